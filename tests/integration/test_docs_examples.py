"""The Python examples in README.md and docs/client.md, run against a real hub.

Every ``python`` code block is taken from the documents as written. A block that
is a program (it ends in ``run(main())`` or ``asyncio.run(...)``) runs as a
process with the hub's URL in place of the default one, and must work the way a
reader trying it would see it:

* a program that finishes by itself exits 0, without a traceback;
* a program that keeps running is poked: a question in each space it joined must
  get an answer from it (``in_reply_to``), or show up in what it prints; a second
  copy started meanwhile must end with one line saying the agent id is taken (no
  traceback); Ctrl-C must end the first without a traceback.

A question the program itself publishes is answered by the test, so request/reply
examples get their reply. Blocks that are fragments are compiled (top-level
``await`` allowed), so at least they stay valid Python.
"""

from __future__ import annotations

import ast
import asyncio
import re
import signal
import sys
from pathlib import Path

import pytest

from agora_client import AssembledEvent, Client
from tests.support.servers import ROOT

DOCS = [ROOT / "README.md", ROOT / "docs" / "client.md"]
DEFAULT_URL = "ws://127.0.0.1:8765/ws"
TIMEOUT = 15.0


def python_blocks(path: Path) -> list[tuple[str, str]]:
    """``(name, code)`` of every python block in ``path``."""
    blocks = re.findall(r"^```python\n(.*?)^```", path.read_text(), re.M | re.S)
    return [(f"{path.name}#{i}", code) for i, code in enumerate(blocks)]


BLOCKS = [block for path in DOCS for block in python_blocks(path)]
PROGRAMS = [(n, c) for n, c in BLOCKS if re.search(r"^(asyncio\.)?run\(", c, re.M)]
FRAGMENTS = [(n, c) for n, c in BLOCKS if (n, c) not in PROGRAMS]


def test_the_documents_have_programs_to_run():
    assert {n.split("#")[0] for n, _ in PROGRAMS} == {"README.md", "client.md"}
    assert len(PROGRAMS) >= 5


@pytest.mark.parametrize(("name", "code"), FRAGMENTS, ids=[n for n, _ in FRAGMENTS])
def test_fragments_are_valid_python(name, code):
    compile(code, name, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)


class Program:
    """A documented program as a process, its output collected as it comes."""

    def __init__(self, path: Path):
        self.path = path
        self.out: list[str] = []
        self.err = ""
        self._changed = asyncio.Event()
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> Program:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-u",
            str(self.path),
            cwd=self.path.parent,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        self._reader = asyncio.create_task(self._read())
        return self

    async def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        async for line in self.proc.stdout:
            self.out.append(line.decode())
            self._changed.set()

    def printed(self, text: str) -> bool:
        return any(text in line for line in self.out)

    async def finished(self) -> int:
        assert self.proc is not None and self.proc.stderr is not None
        async with asyncio.timeout(TIMEOUT):
            self.err = (await self.proc.stderr.read()).decode()
            await self._reader
            return await self.proc.wait()

    def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()


async def answer_its_questions(observer: Client, space: str, agent: str) -> None:
    """Reply to whatever the program publishes that is not itself a reply."""
    async for item in observer.assembled_events(space, events=True):
        if item.sender == agent and item.in_reply_to is None:
            await observer.reply(item, {"text": "42", "status": "success"}, to=None)


async def reacted(program: Program, observer: Client, space: str, agent: str) -> bool:
    """Ask in ``space``; True once the program answers or prints the question."""
    answers = observer.assembled_events(space, events=True)
    question = await observer.publish(space, f"ping from the docs test in {space}")
    try:
        async with asyncio.timeout(TIMEOUT):
            while True:
                try:
                    item = await answers.get(0.1)
                except TimeoutError:
                    if program.printed("ping from the docs test"):
                        return True
                    continue
                if item.sender == agent and item.in_reply_to == question.event_id:
                    return not isinstance(item, AssembledEvent) or item.complete
    except TimeoutError:
        return False


async def running_as(observer: Client, agent: str, spaces: list[str], program: Program) -> bool:
    """Wait until ``agent`` is connected and in its spaces; False when it exited first."""
    async with asyncio.timeout(TIMEOUT):
        while program.proc is not None and program.proc.returncode is None:
            present = [await observer.find_agents(space=s) for s in spaces] or [
                await observer.find_agents()
            ]
            if all(agent in {a.id for a in found} for found in present):
                return True
            await asyncio.sleep(0.05)
    return False


@pytest.mark.parametrize(("name", "code"), PROGRAMS, ids=[n for n, _ in PROGRAMS])
async def test_documented_programs_run_against_a_hub(name, code, hub, clients, tmp_path):
    server = await hub()
    agent_match = re.search(r'Client\(\s*(?:URL|"ws://[^"]*"),\s*"([^"]+)"', code)
    assert agent_match, f"{name}: no Client(URL, agent_id) found"
    agent = agent_match.group(1)
    spaces = re.findall(r'\.join\("([^"]+)"\)', code)
    script = tmp_path / "example.py"
    script.write_text(code.replace(DEFAULT_URL, server.url))

    observer = await clients(server, "docs-observer")
    for space in spaces:
        await observer.join(space)
    answering = [asyncio.create_task(answer_its_questions(observer, s, agent)) for s in spaces]
    first = await Program(script).start()
    try:
        if not await running_as(observer, agent, spaces, first):
            status = await first.finished()
            assert status == 0, f"{name} exited {status}:\n{first.err}"
            assert "Traceback" not in first.err, first.err
            return
        for space in spaces:
            assert await reacted(first, observer, space, agent), (
                f"{name}: no reaction in {space}; printed {first.out}"
            )

        second = await Program(script).start()
        try:
            status = await second.finished()
        finally:
            second.kill()
        assert status == 1, f"{name}: a second copy exited {status}:\n{second.err}"
        assert "Traceback" not in second.err and repr(agent) in second.err, second.err
        assert "another agent_id" in second.err, second.err

        assert first.proc is not None
        first.proc.send_signal(signal.SIGINT)
        status = await first.finished()
        assert status in (0, 130), f"{name}: Ctrl-C → {status}:\n{first.err}"
        assert "Traceback" not in first.err, first.err
    finally:
        first.kill()
        for task in answering:
            task.cancel()
