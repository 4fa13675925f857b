"""What a new user meets first, client side (issue 28): token streams on the default
rate limit, ``--to``, the CLI's own id, the wrong scheme, and ``agent.status`` after
a reconnect."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from agora_client import AssembledEvent, Backoff, Client, ConnectionFailed, Resumed
from tests.integration.test_cli_tools import cli, finish, json_lines
from tests.support import certs
from tests.support.servers import ROOT

TIMEOUT = 20.0


async def test_a_model_speed_token_stream_fits_the_default_rate_limit(hub, clients):
    """300 tokens a second for 3 s (900 sends) on the hub's default rate limit
    (100 messages/s, burst 200): one frame per token would be refused after
    about 1 s; coalesced, the stream stays far below it."""
    server = await hub()  # default rate_limit and rate_burst
    alice = await clients(server, "alice")
    bob = await clients(server, "bob")
    for c in (alice, bob):
        await c.join("tokens")
    whole = bob.assembled_events("tokens")
    loop = asyncio.get_running_loop()
    start = loop.time()
    async with alice.stream("tokens", echo=False) as s:
        for i in range(900):
            await s.send(f"{i} ")
            await asyncio.sleep(max(0.0, start + (i + 1) / 300 - loop.time()))
    done = await whole.get(TIMEOUT)
    assert isinstance(done, AssembledEvent) and done.complete
    assert done.text == "".join(f"{i} " for i in range(900))
    assert s.written == 900 and s.sent <= 250, s.sent  # ≤ 50 deltas/s, plus slack


async def test_cli_publish_stdin_at_model_speed_on_default_limits(hub_process):
    proc = hub_process()  # default rate limit
    feeder = (
        "import sys, time\n"
        "t = time.monotonic()\n"
        "for i in range(600):\n"
        "    print(i, flush=True)\n"
        "    time.sleep(max(0, t + (i + 1) / 300 - time.monotonic()))\n"
    )
    shell = (
        f"{sys.executable} -c '{feeder}' | "
        f"{sys.executable} -m hub publish builds - --url {proc.url} --json"
    )
    run = await asyncio.create_subprocess_shell(
        shell,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    status, out, err = await finish(run)
    assert status == 0, err
    (result,) = json_lines(out)
    assert result["lines"] == 600 and result["deltas"] <= 160, result


async def test_cli_publish_to_one_member(hub_process, clients):
    proc = hub_process()
    bob = await clients(proc.url, "bob")
    carol = await clients(proc.url, "carol")
    for c in (bob, carol):
        await c.join("room")
    at_bob, at_carol = bob.events("room"), carol.events("room")
    status, _, err = await cli("publish", "room", "psst", "--to", "bob", "--url", proc.url)
    assert status == 0, err
    got = await at_bob.get(TIMEOUT)
    assert got.text == "psst" and got.to == "bob"
    marker = await bob.publish("room", "marker")
    assert (await at_carol.get(TIMEOUT)).event_id == marker.event_id  # carol got no psst

    status, _, err = await cli("publish", "room", "x", "--to", "no body", "--url", proc.url)
    assert status == 2 and "--to" in err
    status, _, err = await cli("publish", "room", "x", "--to", "nobody", "--url", proc.url)
    assert status == 4 and "not members" in err


async def test_agents_list_leaves_out_the_tools_own_connection(hub_process, clients):
    proc = hub_process()
    await clients(proc.url, "worker")
    status, out, err = await cli("agents", "--list", "--url", proc.url)
    assert status == 0, err
    assert [a["id"] for a in json_lines(out)] == ["worker"]
    # An id the user chose is an agent like any other.
    status, out, _ = await cli("agents", "--list", "--url", proc.url, "--agent-id", "me")
    assert {a["id"] for a in json_lines(out)} == {"worker", "me"}


async def test_the_wrong_scheme_says_which_to_try(hub, tmp_path: Path):
    plain = await hub()
    status, _, err = await cli("spaces", "--url", plain.url.replace("ws://", "wss://"))
    assert status == 1 and f"try {plain.url}" in err and "Traceback" not in err, err

    cert, key = certs.make_cert(tmp_path, "localhost")
    tls = await hub(tls_certfile=str(cert), tls_keyfile=str(key))
    as_plain = tls.url.replace("wss://", "ws://")
    status, _, err = await cli("spaces", "--url", as_plain)
    assert status == 1 and f"try {tls.url}" in err and "Traceback" not in err, err


async def test_the_http_port_says_where_websockets_are_served(hub):
    """A client pointed at ``http_port`` (8766, one off the WebSocket port) is told
    the port and path to use, not a bare ``HTTP 404: Not Found``."""
    server = await hub()
    wrong = f"ws://127.0.0.1:{server.http_port}"  # no path: the client asks for /ws
    with pytest.raises(ConnectionFailed) as failed:
        await Client(wrong, "lost-agent").connect()
    assert failed.value.status == 404
    assert f"port {server.port}, path /ws" in str(failed.value), failed.value
    status, _, err = await cli("spaces", "--url", wrong)
    assert status == 1 and f"port {server.port}" in err and "Traceback" not in err, err


async def test_agent_status_is_not_replayed_after_a_reconnect(hub, clients, proxy):
    server = await hub()
    via = await proxy(server.port)
    resumes: asyncio.Queue[Resumed] = asyncio.Queue()
    watcher = await clients(
        via.url,
        "watcher",
        reconnect=True,
        backoff=Backoff(initial=0.05, maximum=0.3),
        on_resume=resumes.put_nowait,
    )
    status = watcher.events("agent.status")
    await watcher.join("agent.status")
    before = await clients(server, "before")
    assert (await status.get(TIMEOUT)).data["agent"]["id"] == "before"

    via.drop()  # the watcher's old connection goes offline, a new one comes online
    async with asyncio.timeout(TIMEOUT):
        note = await resumes.get()
    assert note.space == "agent.status" and not note.recovered
    await before.aclose()  # live events still come…
    await clients(server, "after")
    seen = []
    while not seen or seen[-1] != ("online", "after"):
        event = await status.get(TIMEOUT)
        seen.append((event.data["event"], event.data["agent"]["id"]))
    # …and none of the gap's: not the watcher's own offline, nor its new online.
    assert seen == [("offline", "before"), ("online", "after")], seen
