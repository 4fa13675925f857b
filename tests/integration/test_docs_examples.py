"""The code of README.md, docs/*.md and clients/js/README.md, run as a reader would.

Every fenced block is taken from the documents as written
(:func:`tests.support.examples.snippets`). A block marked ``<!-- doc-test: program
-->`` on the line before it is a program, and runs against a real hub with the
hub's address in place of the default one:

* a Python or JavaScript program that finishes by itself exits 0, without a
  traceback or stack trace;
* one that keeps running is poked: a question in each space it joins must get an
  answer from it (``in_reply_to``) or show up in what it prints; with
  ``asked-by-cli=N`` it is then asked N times by one-shot CLI askers
  (``agora-hub publish SPACE … --to AGENT``, which leave at once: see
  :func:`ask_by_cli`) and must still be running and answering; a second copy
  started meanwhile must end with one line saying the agent id is taken (status 1,
  no traceback); Ctrl-C must end the first without a traceback;
* the browser page runs its module script with the browser build of the client (in
  Node, with a WebSocket and a one-``body`` DOM standing in for the browser's): each
  event must become a line of its own, and the page as written (the placeholder
  token) must say so;
* ``with=a2a-sdk`` runs in the a2a-sdk's own venv, against the example agent and
  config the marker names.

A block a reader would take for a program — Python ending in ``run(…)``, JavaScript
that imports the client and connects, an HTML page with a script — must be marked,
or the first test fails: a new one cannot slip through untested. Other Python blocks
must compile (top-level ``await`` allowed) and other JavaScript blocks must parse.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agora_client import AssembledEvent, Client
from agora_client.cli import main as cli_main
from tests.support.examples import EXAMPLES, KINDS, Snippet, snippets
from tests.support.servers import ROOT

DEFAULT_URL = "ws://127.0.0.1:8765/ws"
TIMEOUT = 20.0
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
JS = ROOT / "clients" / "js"
HUB_CLI = Path(sys.executable).parent / "agora-hub"
# One-shot CLI askers at once, and how many of them are processes of their own.
CLI_AT_ONCE = 8
CLI_PROCESSES = 5

ALL = snippets()
CODE = [s for s in ALL if s.lang in ("python", "js", "html")]
PROGRAMS = [s for s in CODE if s.kind == "program"]
FRAGMENTS = [s for s in CODE if s.kind != "program"]


def ids(snippet: Snippet) -> str:
    return snippet.name


def test_every_runnable_block_is_marked_and_run():
    unmarked = [s.name for s in ALL if s.looks_runnable() and s.kind != "program"]
    assert unmarked == [], f"mark these <!-- doc-test: program -->, so that they run: {unmarked}"
    unknown = [s.name for s in ALL if s.kind is not None and s.kind not in KINDS]
    assert unknown == [], f"unknown doc-test kinds: {unknown}"
    documents = {s.document.relative_to(ROOT).as_posix() for s in PROGRAMS}
    assert {"README.md", "docs/client.md", "clients/js/README.md"} <= documents
    assert {s.lang for s in PROGRAMS} == {"python", "js", "html"}
    assert any(int(s.options.get("asked-by-cli", 0)) >= 100 for s in PROGRAMS if s.lang == "js")


@pytest.mark.parametrize("snippet", [s for s in FRAGMENTS if s.lang == "python"], ids=ids)
def test_python_fragments_compile(snippet: Snippet):
    compile(snippet.code, snippet.name, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)


@pytest.mark.parametrize("snippet", [s for s in FRAGMENTS if s.lang == "js"], ids=ids)
def test_javascript_fragments_parse(snippet: Snippet, tmp_path: Path):
    node = node_or_skip()
    source = tmp_path / "fragment.mjs"
    source.write_text(snippet.code)
    checked = subprocess.run([node, "--check", str(source)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr


# ── the tools a program needs ───────────────────────────────────────────────


def node_or_skip() -> str:
    node = shutil.which("node")
    if node is None:
        if IN_CI:
            pytest.fail("node is not installed: CI must run the JavaScript snippets")
        pytest.skip("node is not installed")
    return node


@pytest.fixture(scope="session")
def js_client() -> Path:
    """clients/js built (``npm ci`` when its dependencies are missing or stale, as
    ``make test-js`` does): the directory to link as ``node_modules/agora-hub-client``."""
    node_or_skip()
    lock = JS / "package-lock.json"
    installed = JS / "node_modules" / ".package-lock.json"
    if not installed.exists() or installed.stat().st_mtime < lock.stat().st_mtime:
        npm = ["npm", "ci", "--no-audit", "--no-fund"]
        subprocess.run(npm, cwd=JS, check=True, capture_output=True, timeout=600)
    assert (JS / "dist" / "node.js").exists() and (JS / "dist" / "browser.js").exists()
    return JS


def program_dir(tmp_path: Path, js_client: Path | None) -> Path:
    """A directory to run a program from; with the JS client installed for one in JS."""
    if js_client is not None:
        (tmp_path / "node_modules").mkdir()
        (tmp_path / "node_modules" / "agora-hub-client").symlink_to(js_client)
        (tmp_path / "package.json").write_text(json.dumps({"type": "module", "private": True}))
    return tmp_path


class Program:
    """A documented program as a process, its output collected as it comes."""

    def __init__(self, argv: list[str], cwd: Path):
        self.argv = argv
        self.cwd = cwd
        self.out: list[str] = []
        self.err = ""
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> Program:
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv, cwd=self.cwd, env={**os.environ, "PYTHONUNBUFFERED": "1"},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        self._reader = asyncio.create_task(self._read())
        return self

    async def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        async for line in self.proc.stdout:
            self.out.append(line.decode())

    def printed(self, text: str) -> bool:
        return any(text in line for line in self.out)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def finished(self) -> int:
        assert self.proc is not None and self.proc.stderr is not None
        async with asyncio.timeout(TIMEOUT):
            self.err = (await self.proc.stderr.read()).decode()
            await self._reader
            return await self.proc.wait()

    async def stop(self) -> None:
        """Killed if still running, and reaped (its pipes closed while the loop runs)."""
        if self.proc is None:
            return
        if self.running:
            self.proc.kill()
        async with asyncio.timeout(TIMEOUT):
            await self.proc.wait()
            await self._reader


def hub_free_env() -> dict[str, str]:
    """This environment without the test's own ``AGORA_HUB_*`` settings."""
    return {k: v for k, v in os.environ.items() if not k.startswith("AGORA_HUB_")}


def crashed(err: str) -> bool:
    """A Python traceback or a JavaScript stack trace."""
    return "Traceback" in err or re.search(r"^\s+at .+:\d+:\d+\)?$", err, re.M) is not None


# ── programs of the client SDKs ─────────────────────────────────────────────


async def answer_its_questions(observer: Client, space: str, agent: str) -> None:
    """Reply to whatever the program publishes that is not itself a reply."""
    async for item in observer.events(space):
        if item.sender == agent and item.in_reply_to is None:
            await observer.reply(item, {"text": "42", "status": "success"}, to=None)


async def reacted(program: Program, observer: Client, space: str, agent: str) -> bool | None:
    """Ask in ``space``; True once the program answers or prints the question,
    None when it finished by itself meanwhile (a request that got its answer)."""
    answers = observer.events(space)
    question = await observer.publish(space, f"ping from the docs test in {space}")
    try:
        async with asyncio.timeout(TIMEOUT):
            while True:
                try:
                    item = await answers.get(0.1)
                except TimeoutError:
                    if program.printed("ping from the docs test"):
                        return True
                    if not program.running:
                        return None
                    continue
                if item.sender == agent and item.in_reply_to == question.event_id:
                    return not isinstance(item, AssembledEvent) or item.complete
    except TimeoutError:
        return False


async def running_as(observer: Client, agent: str, spaces: list[str], program: Program) -> bool:
    """Wait until ``agent`` is connected and in its spaces; False when it exited first."""
    async with asyncio.timeout(TIMEOUT):
        while program.running:
            present = [await observer.find_agents(space=s) for s in spaces] or [
                await observer.find_agents()
            ]
            if all(agent in {a.id for a in found} for found in present):
                return True
            await asyncio.sleep(0.05)
    return False


async def ask_by_cli(url: str, space: str, agent: str, times: int) -> None:
    """``times`` one-shot askers that publish to ``agent`` and leave at once: the
    first few as the README's command itself (``agora-hub publish``, a process each),
    the rest as the same command run in this process (the CLI's ``main``, in threads
    of its own: the same code on the wire, without an interpreter's start-up each)."""
    slots = asyncio.Semaphore(CLI_AT_ONCE)

    async def one(i: int) -> None:
        argv = ["publish", space, f"question {i} from the command line", "--to", agent]
        argv += ["--url", url, "--json"]
        async with slots:
            if i < CLI_PROCESSES:
                proc = await asyncio.create_subprocess_exec(
                    str(HUB_CLI), *argv, env=hub_free_env(),
                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                )  # fmt: skip
                _, err = await proc.communicate()
                assert proc.returncode == 0, err.decode()
            else:
                status = await asyncio.to_thread(cli_main, argv)
                assert status == 0, f"the CLI exited {status}"

    await asyncio.gather(*(one(i) for i in range(times)))


def agent_and_spaces(snippet: Snippet) -> tuple[str, list[str]]:
    agent = re.search(r'Client\(\s*(?:URL|url|"ws://[^"]*"),\s*"([^"]+)"', snippet.code)
    assert agent, f"{snippet.name}: no Client(URL, agent_id) found"
    spaces = re.findall(r'\.(?:join|serve)\(\s*"([^"]+)"', snippet.code)
    return agent[1], list(dict.fromkeys(spaces))


@pytest.mark.parametrize(
    "snippet", [s for s in PROGRAMS if s.lang in ("python", "js") and "with" not in s.options],
    ids=ids,
)  # fmt: skip
async def test_documented_programs_run_against_a_hub(
    snippet: Snippet, hub, clients, tmp_path: Path, request: pytest.FixtureRequest
):
    js = request.getfixturevalue("js_client") if snippet.lang == "js" else None
    server = await hub()
    agent, spaces = agent_and_spaces(snippet)
    cwd = program_dir(tmp_path, js)
    script = cwd / ("agent.mjs" if js else "example.py")
    script.write_text(snippet.code.replace(DEFAULT_URL, server.url))
    argv = [node_or_skip(), script.name] if js else [sys.executable, script.name]

    observer = await clients(server, "docs-observer")
    for space in spaces:
        await observer.join(space)
    answering = [asyncio.create_task(answer_its_questions(observer, s, agent)) for s in spaces]
    first = await Program(argv, cwd).start()
    try:
        finishes_alone = not await running_as(observer, agent, spaces, first)
        for space in spaces if not finishes_alone else ():
            reaction = await reacted(first, observer, space, agent)
            if reaction is None:
                finishes_alone = True
                break
            assert reaction, f"{snippet.name}: no reaction in {space}; printed {first.out}"
        if finishes_alone:
            status = await first.finished()
            assert status == 0, f"{snippet.name} exited {status}:\n{first.err}"
            assert not crashed(first.err), first.err
            return

        asks = int(snippet.options.get("asked-by-cli", 0))
        if asks:
            await ask_by_cli(server.url, spaces[0], agent, asks)
            assert first.running, f"{snippet.name} died after CLI askers left"
            assert await reacted(first, observer, spaces[0], agent), (
                "no answer after the CLI askers"
            )

        second = await Program(argv, cwd).start()
        try:
            status = await second.finished()
        finally:
            await second.stop()
        assert status == 1, f"{snippet.name}: a second copy exited {status}:\n{second.err}"
        lines = second.err.strip().splitlines()
        assert len(lines) == 1 and agent in lines[0] and "another agent" in lines[0], second.err

        assert first.proc is not None
        first.proc.send_signal(signal.SIGINT)
        status = await first.finished()
        assert status in (0, 130), f"{snippet.name}: Ctrl-C → {status}:\n{first.err}"
        assert not crashed(first.err), first.err
    finally:
        await first.stop()
        for task in answering:
            task.cancel()


# ── the browser page ────────────────────────────────────────────────────────

BROWSER_HARNESS = """
// The page's module script, run in Node: the browser build of the client, a WebSocket
// from the ws package (the WHATWG interface, as in a browser), and a DOM of one body
// that reports what is appended to it.
import WebSocket from "WS_MODULE";
globalThis.WebSocket = WebSocket;
const report = (item) => process.stdout.write(JSON.stringify(item) + "\\n");
globalThis.document = {
  createElement: (tag) => ({ tag, textContent: "" }),
  body: {
    append: (...nodes) => {
      for (const node of nodes) {
        if (typeof node === "string") report({ text: node });
        else report({ tag: node.tag, text: node.textContent });
      }
    },
  },
};
const failed = (error) => {
  report({ error: String(error?.message ?? error) });
  process.exit(1);
};
process.on("unhandledRejection", failed);
await import("./page.mjs").catch(failed);
"""


def page_script(snippet: Snippet, url: str, token: str | None) -> str:
    script = re.search(r'<script type="module">\n(.*?)</script>', snippet.code, re.S)
    assert script, f"{snippet.name}: no module script"
    code = re.sub(
        r'"\./agora-hub-client/dist/browser\.js"', '"agora-hub-client/browser"', script[1]
    )
    code = re.sub(r'"wss://[^"]+/ws"', json.dumps(url), code)
    return code if token is None else code.replace('"…"', json.dumps(token))


@contextlib.contextmanager
def page(snippet: Snippet, cwd: Path, url: str, token: str | None) -> Iterator[subprocess.Popen]:
    (cwd / "page.mjs").write_text(page_script(snippet, url, token))
    ws_module = (JS / "node_modules" / "ws" / "wrapper.mjs").as_uri()
    (cwd / "harness.mjs").write_text(BROWSER_HARNESS.replace("WS_MODULE", ws_module))
    proc = subprocess.Popen(
        [node_or_skip(), "harness.mjs"], cwd=cwd, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


async def next_report(proc: subprocess.Popen) -> dict[str, Any]:
    assert proc.stdout is not None
    line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), TIMEOUT)
    assert line, f"the page ended: {proc.stderr.read() if proc.stderr else ''}"
    return json.loads(line)


@pytest.mark.parametrize("snippet", [s for s in PROGRAMS if s.lang == "html"], ids=ids)
async def test_the_browser_page_shows_each_event_on_a_line(
    snippet: Snippet, hub, clients, tmp_path: Path, js_client: Path
):
    server = await hub()
    cwd = program_dir(tmp_path, js_client)
    agent = re.search(r'new Client\([^,]+,\s*"([^"]+)"', snippet.code)
    assert agent, snippet.name
    space = re.search(r'\.join\("([^"]+)"\)', snippet.code)
    assert space, snippet.name

    # As written, the placeholder token is refused with words that say so.
    with page(snippet, cwd, server.url, None) as proc:
        refused = await next_report(proc)
        assert "placeholder" in refused.get("error", ""), refused

    observer = await clients(server, "docs-observer")
    await observer.join(space[1])
    with page(snippet, cwd, server.url, "any-token-0123456789") as proc:
        own = await next_report(proc)  # the page's own publish, echoed
        assert own == {"tag": "div", "text": f"{agent[1]}: hello from a browser"}, own
        for i in range(3):
            await observer.publish(space[1], f"line {i}")
            shown = await next_report(proc)
            # An element of its own per event: a bare string would run into the last one.
            assert shown == {"tag": "div", "text": f"docs-observer: line {i}"}, shown


# ── a program of another protocol's library ─────────────────────────────────


@pytest.mark.parametrize(
    "snippet", [s for s in PROGRAMS if s.options.get("with") == "a2a-sdk"], ids=ids
)
async def test_the_a2a_sdk_program_runs_against_the_example(
    snippet: Snippet, hub_process, tmp_path: Path
):
    from tests.support.a2a_peer import VENV
    from tests.support.examples import running_agent
    from tests.support.peer_venv import peer_env

    python = VENV.require()
    proc = await asyncio.to_thread(hub_process, config=str(ROOT / snippet.options["config"]))
    script = tmp_path / "client.py"
    script.write_text(snippet.code.replace("http://127.0.0.1:8766", proc.http_url))
    with running_agent(snippet.options["agent"], proc.url, "answering"):
        run = await asyncio.create_subprocess_exec(
            str(python), str(script), cwd=tmp_path, env=peer_env(),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        async with asyncio.timeout(60):
            out, err = await run.communicate()
    assert run.returncode == 0, err.decode()
    printed = out.decode()
    assert "TASK_STATE_COMPLETED" in printed and "Paris" in printed, printed
    assert (EXAMPLES / f"{snippet.options['agent']}.py").exists()
