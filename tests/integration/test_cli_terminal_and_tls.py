"""``agora-hub spaces`` and ``agents --list``: aligned tables on a terminal (a
real pseudo-terminal), JSON lines when piped or with ``--json``; and every
client tool against a ``wss://`` hub whose certificate comes from a private CA
(``--ca-file``, or ``SSL_CERT_FILE``)."""

from __future__ import annotations

import asyncio
import os
import pty
import signal
import subprocess
import sys
from pathlib import Path

import orjson

from agora_client import Client
from tests.integration.test_cli_tools import cli, json_lines
from tests.support.certs import make_ca, make_cert_signed_by
from tests.support.servers import ROOT

TIMEOUT = 20.0


def run_in_terminal(
    *args: str, env: dict[str, str] | None = None, stdin: bytes | None = None
) -> tuple[int, str, str]:
    """Run ``agora-hub ARGS`` with stdout on a pseudo-terminal: (status, screen, stderr).
    ``stdin``: piped in (a few KiB at most), else none."""
    master, slave = pty.openpty()
    base = {k: v for k, v in os.environ.items() if not k.startswith("AGORA_HUB_")}
    source: int = subprocess.DEVNULL
    if stdin is not None:  # written whole before the command starts (fits a pipe)
        source, writer = os.pipe()
        os.write(writer, stdin)
        os.close(writer)
    proc = subprocess.Popen(
        [sys.executable, "-m", "hub", *args],
        cwd=ROOT,
        stdin=source,
        stdout=slave,
        stderr=subprocess.PIPE,
        env={**base, "TERM": "dumb", **(env or {})},
    )
    os.close(slave)
    if stdin is not None:
        os.close(source)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    _, err = proc.communicate(timeout=TIMEOUT)
    screen = b"".join(chunks).decode().replace("\r\n", "\n")
    return proc.returncode, screen, err.decode()


async def test_publish_from_stdin_on_a_terminal_says_how_many_deltas_and_lines(hub_process):
    proc = hub_process()
    text = "".join(f"{i}\n" for i in range(1, 301)).encode()
    status, screen, err = await asyncio.to_thread(
        run_in_terminal, "publish", "builds", "-", "--url", proc.url, stdin=text
    )
    assert status == 0, err
    (line,) = [line for line in screen.splitlines() if line.strip()]
    assert line.startswith("published to builds: ") and line.endswith(" 300 lines)"), line
    assert " deltas, " in line, line


async def test_tables_on_a_terminal_json_lines_otherwise(hub_process, clients):
    proc = hub_process()
    worker = await clients(
        proc.url, "image-resizer", agent_type="tool", capabilities=["urn:img:resize", "x"]
    )
    await worker.join("a-rather-long-space-name")
    other = await clients(proc.url, "b")
    await other.join("a-rather-long-space-name")
    await other.join("lobby")

    status, screen, err = await asyncio.to_thread(
        run_in_terminal, "spaces", "--url", proc.url, "--agent-id", "viewer"
    )
    assert status == 0, err
    header, *rows = [line for line in screen.splitlines() if line.strip()]
    assert header.split() == ["SPACE", "TYPE", "MEMBERS"]
    assert {r.split()[0]: r.split()[2] for r in rows} == {
        "a-rather-long-space-name": "2",
        "agent.status": "0",
        "lobby": "1",
        "mcp.calls": "1",  # MCP is on by default: its agent relays mcp.calls
    }
    # Aligned: every row's columns start where the header's do; numbers to the right.
    assert all(r.index(r.split()[1]) == header.index("TYPE") for r in rows)
    assert all(len(r) == len(header) for r in rows), screen

    status, screen, err = await asyncio.to_thread(
        run_in_terminal, "agents", "--list", "--url", proc.url, "--agent-id", "viewer2"
    )
    assert status == 0, err
    header, *rows = [line for line in screen.splitlines() if line.strip()]
    assert header.split() == ["AGENT", "TYPE", "NODE", "CONNECTED", "CAPABILITIES"]
    by_id = {r.split()[0]: r for r in rows}
    assert set(by_id) == {"b", "image-resizer", "viewer2"}
    resizer = by_id["image-resizer"]
    assert resizer.endswith("urn:img:resize,x")
    for title in ("TYPE", "NODE", "CONNECTED", "CAPABILITIES"):
        at = header.index(title)
        assert all(r[at - 2 : at] == "  " and r[at] != " " for r in rows), (title, screen)

    # --json on a terminal, and a pipe without it: one JSON object a line.
    status, screen, _ = await asyncio.to_thread(
        run_in_terminal, "spaces", "--json", "--url", proc.url
    )
    assert status == 0
    assert {orjson.loads(line)["id"] for line in screen.splitlines() if line.strip()} >= {"lobby"}
    status, out, _ = await cli("agents", "--list", "--url", proc.url)
    assert status == 0 and "image-resizer" in {a["id"] for a in json_lines(out)}


async def test_client_tools_with_a_private_ca(hub_process, tmp_path: Path):
    ca_cert, ca_key = make_ca(tmp_path)
    cert, key = make_cert_signed_by(tmp_path, "hub", ca_cert, ca_key)
    proc = hub_process(tls_certfile=str(cert), tls_keyfile=str(key))
    url = proc.url.replace("ws://", "wss://")

    status, out, err = await cli("spaces", "--url", url, "--ca-file", str(ca_cert))
    assert status == 0, err
    assert "agent.status" in {s["id"] for s in json_lines(out)}
    status, out, err = await cli(
        "publish", "news", "over tls", "--url", url, "--ca-file", str(ca_cert)
    )
    assert status == 0, err
    status, out, err = await cli("agents", "--list", "--url", url, "--ca-file", str(ca_cert))
    assert status == 0, err

    # Without the CA the hub's certificate is refused: one line, exit 1.
    status, out, err = await cli("spaces", "--url", url)
    assert status == 1 and "CERTIFICATE_VERIFY_FAILED" in err.upper().replace(" ", "_"), err
    assert "Traceback" not in err

    # SSL_CERT_FILE is honoured when --ca-file is not given.
    status, out, err = await asyncio.to_thread(
        run_in_terminal, "spaces", "--json", "--url", url, env={"SSL_CERT_FILE": str(ca_cert)}
    )
    assert status == 0, err

    # Mistakes are usage errors.
    status, _, err = await cli("spaces", "--url", url, "--ca-file", str(tmp_path / "nope.pem"))
    assert status == 2 and "--ca-file" in err
    status, _, err = await cli("spaces", "--url", proc.url, "--ca-file", str(ca_cert))
    assert status == 2 and "wss://" in err

    # The SDK takes the same context.
    import ssl

    async with Client(url, "sdk", ssl=ssl.create_default_context(cafile=str(ca_cert))) as c:
        assert "agent.status" in {s.id for s in await c.spaces()}


async def test_ctrl_c_while_publish_reads_a_terminal_exits_130_quietly(hub_process, clients):
    """Ctrl-C on ``publish SPACE -`` reading a terminal: exit 130, one quiet end
    (an outside audit: "Fatal Python error: _enter_buffered_busy" and SIGABRT,
    the stdin reader thread holding stdin's lock at interpreter shutdown)."""
    proc = hub_process()
    observer = await clients(proc.url, "observer")
    await observer.join("typing")
    chunks = observer.stream_events("typing")
    master, slave = pty.openpty()
    base = {k: v for k, v in os.environ.items() if not k.startswith("AGORA_HUB_")}
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "hub", "publish", "typing", "-", "--url", proc.url,
        cwd=ROOT, stdin=slave, stdout=slave, stderr=subprocess.PIPE,
        env={**base, "TERM": "dumb"},
    )  # fmt: skip
    os.close(slave)
    try:
        os.write(master, b"first line\n")  # typed: the stream opens with it
        async with asyncio.timeout(TIMEOUT):
            while True:
                chunk = await chunks.get()
                if getattr(chunk, "kind", "") == "delta":
                    break
            child.send_signal(signal.SIGINT)
            _, err = await child.communicate()
    finally:
        os.close(master)
        if child.returncode is None:
            child.kill()
    assert child.returncode == 130, (child.returncode, err)
    assert b"Fatal Python error" not in err and b"Traceback" not in err, err
