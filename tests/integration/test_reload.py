"""SIGHUP to a real hub process: tokens file, TLS certificate and log level are
reloaded while connected agents stay connected; a bad reload changes nothing."""

from __future__ import annotations

import asyncio
import shutil
import signal
import ssl
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.support.certs import client_context, common_name, make_cert
from tests.support.servers import HubProcess
from tests.support.wsclient import WsClient


async def wait_for_lines(proc: Any, event: str, count: int, timeout: float = 15) -> list[dict]:
    """Poll the hub's log until ``count`` lines of ``event`` are there."""
    deadline = time.monotonic() + timeout
    while True:
        lines = [e for e in proc.log_lines() if e.get("event") == event]
        if len(lines) >= count:
            return lines
        assert time.monotonic() < deadline, f"waiting for {count}× {event!r}:\n{proc.log()}"
        await asyncio.sleep(0.1)  # polling the log file of another process


def opened(proc: Any) -> set[str]:
    return {e["agent_id"] for e in proc.log_lines() if e.get("event") == "connection opened"}


async def served_cert(host: str, port: int, ctx: ssl.SSLContext) -> str:
    """The common name of the certificate a new TLS handshake gets."""
    _, writer = await asyncio.open_connection(host, port, ssl=ctx)
    der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    writer.close()
    return common_name(der)


async def refused(url: str, agent_id: str, token: str, ctx: ssl.SSLContext) -> int | None:
    c = await WsClient.connect(url, agent_id, token=token, registered=False, ssl=ctx)
    code, _ = await c.closed()
    return code


class Files:
    def __init__(self, directory: Path):
        self.dir = directory
        self.tokens = directory / "tokens.json"
        self.config = directory / "hub.toml"
        self.cert, self.key = directory / "hub.crt", directory / "hub.key"
        self.certs = {name: make_cert(directory, name) for name in ("first", "second")}

    def write(self, tokens: Any = None, log_level: str | None = None, cert: str | None = None):
        if tokens is not None:
            raw = tokens if isinstance(tokens, bytes) else orjson.dumps(tokens)
            aside = self.dir / "tokens.new"
            aside.write_bytes(raw)
            aside.replace(self.tokens)  # how operators (and config managers) write files
        if log_level is not None:
            self.config.write_text(f'log_level = "{log_level}"\n')
        if cert is not None:
            certfile, keyfile = self.certs[cert]
            shutil.copy(certfile, self.cert)
            shutil.copy(keyfile, self.key)


async def test_sighup_reloads_tokens_certificate_and_log_level(tmp_path, hub_process):
    files = Files(tmp_path)
    files.write({"alice": "a-1", "bob": "b-1"}, "info", "first")
    proc = hub_process(
        config=str(files.config),
        auth_mode="tokens",
        auth_tokens_file=str(files.tokens),
        tls_certfile=str(files.cert),
        tls_keyfile=str(files.key),
    )
    host, ws_port, http_port = "127.0.0.1", proc.settings["port"], proc.settings["http_port"]
    url = f"wss://{host}:{ws_port}/ws"
    ctx = client_context(*(cert for cert, _ in files.certs.values()))
    alice = await WsClient.connect(url, "alice", token="a-1", ssl=ctx, heartbeat=True)
    await alice.join("lobby")
    assert await served_cert(host, ws_port, ctx) == "first"
    assert await served_cert(host, http_port, ctx) == "first"

    # Bob's token goes, carol's comes, a new certificate, quieter logs.
    files.write({"alice": "a-1", "carol": "c-1"}, "warning", "second")
    proc.proc.send_signal(signal.SIGHUP)
    (done,) = await wait_for_lines(proc, "reloaded", 1)
    assert done["log_level"] == "warning" and done["tokens_file"] == str(files.tokens)

    assert await served_cert(host, ws_port, ctx) == "second"
    assert await served_cert(host, http_port, ctx) == "second"
    assert await refused(url, "bob", "b-1", ctx) == 4401
    carol = await WsClient.connect(url, "carol", token="c-1", ssl=ctx, heartbeat=True)
    await carol.join("lobby")
    # Alice never noticed: same connection, same session, and she hears carol.
    received = alice.wait_for("space.event", space="lobby")
    await carol.request({"type": "space.publish", "space": "lobby", "data": {"text": "hi"}})
    assert (await received)["from"] == "carol"
    assert alice.ws.transport.get_extra_info("ssl_object").getpeercert(True) is not None

    # A reload that fails (the tokens file is broken) changes nothing — not
    # even the log level asked for in the same go — and says so once.
    files.write(b'{"alice": "a-2", "dave":', "info", "first")
    proc.proc.send_signal(signal.SIGHUP)
    (failed,) = await wait_for_lines(proc, "reload failed; nothing changed", 1)
    assert failed["level"] == "error" and str(files.tokens) in failed["error"]
    assert await served_cert(host, ws_port, ctx) == "second"
    late = await WsClient.connect(url, "alice-2", token="x", ssl=ctx, registered=False)
    await late.closed()
    assert await refused(url, "alice", "a-2", ctx) == 4401  # the new token is not in force
    assert await refused(url, "dave", "d-1", ctx) == 4401

    # Fixed: everything of the second reload goes in at once.
    files.write({"alice": "a-1", "dave": "d-1"})
    proc.proc.send_signal(signal.SIGHUP)
    await wait_for_lines(proc, "reloaded", 2)
    assert await served_cert(host, ws_port, ctx) == "first"
    dave = await WsClient.connect(url, "dave", token="d-1", ssl=ctx)

    # The level: nothing was logged for carol (warning), again for dave (info).
    # (Info lines may wait a moment to be written together: hub.ops.log_output.)
    await wait_for_lines(proc, "connection opened", 2)
    seen = opened(proc)
    assert "alice" in seen and "dave" in seen and "carol" not in seen
    refusals = [e for e in proc.log_lines() if e.get("event") == "connection refused"]
    assert refusals == []  # info lines, all made while the level was warning
    assert all(c.ws.state.name == "OPEN" for c in (alice, carol, dave))
    for c in (alice, carol, dave):
        await c.close()
    assert proc.stop() == 0


async def test_a_bad_certificate_keeps_the_old_one(tmp_path, hub_process):
    files = Files(tmp_path)
    files.write({"alice": "a-1"}, "info", "first")
    proc = hub_process(
        config=str(files.config),
        auth_mode="tokens",
        auth_tokens_file=str(files.tokens),
        tls_certfile=str(files.cert),
        tls_keyfile=str(files.key),
    )
    ws_port = proc.settings["port"]
    ctx = client_context(*(cert for cert, _ in files.certs.values()))
    # The second certificate with the first one's key: a classic rotation mistake.
    shutil.copy(files.certs["second"][0], files.cert)
    proc.proc.send_signal(signal.SIGHUP)
    (failed,) = await wait_for_lines(proc, "reload failed; nothing changed", 1)
    assert "tls_certfile" in failed["error"] and "matching private key" in failed["error"]
    assert await served_cert("127.0.0.1", ws_port, ctx) == "first"
    files.key.unlink()
    proc.proc.send_signal(signal.SIGHUP)
    failures = await wait_for_lines(proc, "reload failed; nothing changed", 2)
    assert f"tls_keyfile {files.key}: no such file" in failures[1]["error"]
    alice = await WsClient.connect(f"wss://127.0.0.1:{ws_port}/ws", "alice", token="a-1", ssl=ctx)
    assert await served_cert("127.0.0.1", ws_port, ctx) == "first"
    await alice.close()
    assert [e for e in proc.log_lines() if e.get("event") == "reloaded"] == []


HAS_PROC = Path("/proc/self/status").exists()


def sighup_blocked(pid: int) -> bool:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("SigBlk:"):
                return bool(int(line.split()[1], 16) & (1 << (signal.SIGHUP - 1)))
    return False


@pytest.mark.skipif(not HAS_PROC, reason="needs /proc to see when serve has started")
async def test_a_sighup_while_starting_waits_for_the_hub():
    """From the moment ``serve`` runs, SIGHUP is blocked until the reload handler
    is in place: a reload sent while the hub starts is acted on, never fatal.
    (Before Python runs the hub's code at all, no process can help it.)"""
    proc = HubProcess()
    starting = asyncio.create_task(asyncio.to_thread(proc.start))
    try:
        deadline = time.monotonic() + 20
        while proc.proc is None or not await asyncio.to_thread(sighup_blocked, proc.proc.pid):
            assert time.monotonic() < deadline and not starting.done(), proc.log()
            await asyncio.sleep(0.01)
        sent = 0
        while not starting.done():
            proc.proc.send_signal(signal.SIGHUP)
            sent += 1
            await asyncio.sleep(0.05)  # a steady stream of reloads while it starts
        await starting  # it started: none of them killed it
        assert sent >= 1
        await wait_for_lines(proc, "reloaded", 1)
        assert proc.stop() == 0
    finally:
        proc.close()
