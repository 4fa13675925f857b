"""``agora-hub tail|publish|spaces|agents`` run as real processes against a real hub."""

from __future__ import annotations

import asyncio
import io
import os
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pytest

from agora_client import AssembledEvent, Client, Event, MembersChanged, StreamChunk
from agora_client.cli import Output, TailPrinter
from tests.support.servers import ROOT, free_port

TIMEOUT = 20.0


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("AGORA_HUB_")}


async def start_cli(*args: str, stdin: bytes | None = None) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "hub",
        *args,
        cwd=ROOT,
        env=_env(),
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def finish(
    proc: asyncio.subprocess.Process, stdin: bytes | None = None
) -> tuple[int, str, str]:
    try:
        async with asyncio.timeout(TIMEOUT):
            out, err = await proc.communicate(stdin)
    except TimeoutError:
        proc.kill()
        out, err = await proc.communicate()
        pytest.fail(f"command did not finish: stdout={out!r} stderr={err!r}")
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def cli(*args: str, stdin: bytes | None = None) -> tuple[int, str, str]:
    """Run one command to completion: (exit status, stdout, stderr)."""
    return await finish(await start_cli(*args, stdin=stdin), stdin)


def json_lines(text: str) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in text.splitlines() if line.strip()]


@pytest.fixture
async def observer() -> AsyncIterator[Callable[..., Any]]:
    """An SDK client to watch a space: tells when a CLI process has joined it."""
    opened: list[Client] = []

    async def _watch(url: str, space: str) -> Any:
        client = Client(url, f"observer-{len(opened)}")
        opened.append(client)
        await client.connect()
        changes = client.events(space, members=True)
        await client.join(space)
        return changes

    yield _watch
    for client in opened:
        await client.aclose()


async def joined(changes: Any, agent_id: str) -> None:
    async with asyncio.timeout(TIMEOUT):
        while True:
            item = await changes.get()
            if isinstance(item, MembersChanged) and item.joined == agent_id:
                return


async def test_tail_prints_events_and_assembled_streams(hub_process, observer):
    proc = hub_process()
    changes = await observer(proc.url, "general")
    tail = await start_cli(
        "tail", "general", "--url", proc.url, "--agent-id", "tailer", "-n", "3", "--no-members"
    )
    await joined(changes, "tailer")

    assert (await cli("publish", "general", "hello", "--url", proc.url))[0] == 0
    status, out, err = await cli(
        "publish",
        "general",
        "-",
        "--url",
        proc.url,
        "--data",
        '{"kind": "log"}',
        stdin=b"line one\nline two\n",
    )
    assert status == 0, err
    (result,) = json_lines(out)
    assert result["deltas"] == 2 and result["event_id"].startswith("cli-")
    big = "x" * 100_000  # over the hub's stream threshold: arrives as deltas
    assert (await cli("publish", "general", big, "--url", proc.url))[0] == 0

    status, out, err = await finish(tail)
    assert status == 0, err
    first, second, third = json_lines(out)
    assert first["type"] == "space.event" and first["data"]["text"] == "hello"
    assert second["streamed"] is True and second["data"]["text"] == "line one\nline two\n"
    assert second["data"]["kind"] == "log" and second["event_id"] == result["event_id"]
    assert third["streamed"] is True and third["data"]["text"] == big


async def test_publish_stdin_splits_a_line_longer_than_a_frame(hub_process):
    """A line of stdin bigger than the hub's frame limit is sent as several
    deltas (never cutting a character), not as one delta the hub refuses."""
    proc = hub_process()
    watcher = Client(proc.url, "watcher")
    await watcher.connect()
    streams = watcher.assembled_events("general")
    await watcher.join("general")
    text = "é😀x" * 200_000 + "\nlast line\n"  # a 1.8 MB first line
    status, out, err = await cli("publish", "general", "-", "--url", proc.url, stdin=text.encode())
    assert status == 0, err
    (result,) = json_lines(out)
    assert result["deltas"] > 2
    async with asyncio.timeout(TIMEOUT):
        assembled = await streams.__anext__()
    assert assembled.status == "complete" and assembled.data["text"] == text
    await watcher.aclose()


async def test_spaces_lists_json_lines(hub_process, observer):
    proc = hub_process()
    await observer(proc.url, "lobby")
    status, out, err = await cli("spaces", "--url", proc.url)
    assert status == 0, err
    spaces = {s["id"]: s for s in json_lines(out)}
    assert spaces["lobby"] == {"id": "lobby", "type": "public", "member_count": 1}
    assert spaces["agent.status"]["type"] == "system"


async def test_agents_watches_agent_status(hub_process, observer):
    proc = hub_process()
    changes = await observer(proc.url, "agent.status")
    agents = await start_cli("agents", "--url", proc.url, "--agent-id", "watcher", "-n", "2")
    await joined(changes, "watcher")
    async with Client(proc.url, "newcomer") as c:
        await c.register(type="llm", capabilities=["chat"])
        status, out, err = await finish(agents)
    assert status == 0, err
    online, updated = json_lines(out)
    assert online["event"] == "online" and online["agent"]["id"] == "newcomer"
    assert updated["event"] == "updated" and updated["agent"]["type"] == "llm"


async def test_failures_are_one_line_with_an_exit_status(hub_process, tmp_path):
    status, _, err = await cli("spaces", "--url", f"ws://127.0.0.1:{free_port()}/ws")
    assert status == 1 and "connection refused" in err
    assert err.count("\n") == 1 and "Traceback" not in err

    tokens = tmp_path / "tokens.json"
    tokens.write_bytes(orjson.dumps({"ops": "letmein"}))
    proc = hub_process(auth_mode="tokens", auth_tokens_file=str(tokens))
    status, _, err = await cli("spaces", "--url", proc.url, "--agent-id", "ops")
    assert status == 3 and "UNAUTHORIZED" in err
    assert err.count("\n") == 1 and "Traceback" not in err

    status, _, err = await cli(
        "publish", "Not Valid", "hi", "--url", proc.url, "--agent-id", "ops", "--token", "letmein"
    )
    assert status == 4 and "INVALID_REQUEST" in err and "Traceback" not in err

    status, _, err = await cli("spaces", "--url", proc.url, "--agent-id", "bad id!")
    assert status == 2 and "invalid agent_id" in err and "Traceback" not in err

    for port in ("99999", "abc"):  # an outside audit: websockets' traceback, exit 1
        status, _, err = await cli("tail", "room", "--url", f"ws://127.0.0.1:{port}/ws")
        assert status == 2 and "no valid port" in err and "Traceback" not in err, err


def test_tail_on_a_terminal_shows_streams_live():
    buf = io.StringIO()
    printer = TailPrinter(Output(buf, json_lines=False))

    def delta(text: str, first: bool = False, event_id: str = "bob/1") -> StreamChunk:
        data = {"text": text, **({"from": "bob"} if first else {})}
        return StreamChunk("delta", "s", event_id, 2, "bob", 0, data)

    printer.event(Event("s", "e1", 1, "alice", 0, {"text": "hi", "from": "alice"}))
    printer.chunk(delta("Hel", first=True))
    printer.chunk(delta("lo"))
    assert buf.getvalue().endswith("bob ▸ Hello")  # shown as it arrives
    printer.members(MembersChanged("s", ["alice", "bob", "carol"], 3, joined="carol"))
    printer.chunk(delta(" world"))
    printer.assembled(
        AssembledEvent("s", "bob/1", "bob", 0, 5, {"text": "Hello world"}, "complete")
    )
    printer.assembled(
        AssembledEvent(
            "s", "dan/7", "dan", 0, 6, {"text": "half"}, "cancelled", "publisher_disconnected"
        )
    )
    lines = buf.getvalue().splitlines()
    assert lines[0].endswith("#1 alice: hi")
    assert lines[1].endswith("bob ▸ Hello")
    assert lines[2].endswith("* carol joined s (3 members)")
    assert lines[3].endswith("bob ▸ … world")
    assert lines[4].endswith("#6 dan ▸ half [cancelled: publisher_disconnected]")
    assert len(lines) == 5


async def test_tail_exits_when_the_hub_goes_away(hub_process, observer):
    proc = hub_process()
    changes = await observer(proc.url, "general")
    tail = await start_cli(
        "tail", "general", "--url", proc.url, "--agent-id", "tailer", "--no-reconnect"
    )
    await joined(changes, "tailer")
    await asyncio.to_thread(proc.stop)
    status, _, err = await finish(tail)
    assert status == 1 and "connection lost" in err and "1001" in err
    assert err.count("\n") == 1 and "Traceback" not in err
