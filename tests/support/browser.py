"""A real headless Chromium, driven over the Chrome DevTools Protocol.

The Debian ``chromium`` package, started with a fresh profile and
``--remote-debugging-port=0``; the port it picked is read from the
``DevToolsActivePort`` file it writes into the profile. Commands and events
travel over one WebSocket (the project's own ``websockets``), one page is
attached with a flat session. Waiting for something on the page is one
promise evaluated in the page that resolves when a condition holds (checked
on every DOM change) or rejects after a timeout — no polling from here.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
from websockets.asyncio.client import ClientConnection, connect

from tests.support.servers import ROOT

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-dev-shm-usage",
    "--remote-debugging-port=0",
]
#: Screenshots and other artefacts of a test run (git-ignored; CI may keep them).
OUTPUT_DIR = Path(os.environ.get("TEST_OUTPUT_DIR", ROOT / "test-output"))


def chromium_binary() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return "/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None


class CdpError(Exception):
    pass


def _spawn(binary: str, profile: str) -> subprocess.Popen[bytes]:
    with open(Path(profile) / "chromium.log", "wb") as log:
        return subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )


def _devtools_endpoint(profile: str) -> str | None:
    """The browser's DevTools WebSocket, once it has written its port file."""
    port_file = Path(profile) / "DevToolsActivePort"
    parts = port_file.read_text().split() if port_file.exists() else []
    return f"ws://127.0.0.1:{parts[0]}{parts[1]}" if len(parts) >= 2 else None


def _write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


class Chromium:
    """The browser process and its DevTools connection."""

    def __init__(self, proc: subprocess.Popen[bytes], profile: str, ws: ClientConnection):
        self.proc = proc
        self.profile = profile
        self.ws = ws
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.events: list[dict[str, Any]] = []
        self._event_added = asyncio.Event()
        self._reader = asyncio.get_running_loop().create_task(self._read())

    @classmethod
    async def launch(cls, binary: str, timeout: float = 30.0) -> Chromium:
        profile = tempfile.mkdtemp(prefix="agora-chromium-")
        proc = _spawn(binary, profile)
        deadline = time.monotonic() + timeout
        while (endpoint := _devtools_endpoint(profile)) is None:
            if proc.poll() is not None or time.monotonic() > deadline:
                output = (Path(profile) / "chromium.log").read_text(errors="replace")
                proc.kill()
                raise RuntimeError(f"chromium did not start:\n{output[-2000:]}")
            await asyncio.sleep(0.05)
        ws = await connect(endpoint, max_size=None, open_timeout=timeout)
        return cls(proc, profile, ws)

    async def _read(self) -> None:
        with contextlib.suppress(Exception):
            async for raw in self.ws:
                msg = orjson.loads(raw)
                future = self._waiting.pop(msg.get("id", -1), None)
                if future is not None:
                    if not future.done():
                        future.set_result(msg)
                elif "method" in msg:
                    self.events.append(msg)
                    self._event_added.set()
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(CdpError("DevTools connection lost"))

    async def send(
        self, method: str, params: dict[str, Any] | None = None, session: str | None = None
    ) -> dict[str, Any]:
        mid = next(self._ids)
        msg: dict[str, Any] = {"id": mid, "method": method, "params": params or {}}
        if session is not None:
            msg["sessionId"] = session
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[mid] = future
        await self.ws.send(orjson.dumps(msg).decode())
        async with asyncio.timeout(30):
            reply = await future
        if "error" in reply:
            raise CdpError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    async def event(self, method: str, session: str | None, since: int, timeout: float) -> Any:
        """The first event ``method`` (of ``session``) at index ``since`` or later."""
        async with asyncio.timeout(timeout):
            while True:
                for event in self.events[since:]:
                    if event["method"] == method and event.get("sessionId") == session:
                        return event
                since = len(self.events)
                self._event_added.clear()
                await self._event_added.wait()

    async def new_page(self, width: int = 1280, height: int = 900) -> Page:
        target = await self.send("Target.createTarget", {"url": "about:blank"})
        attached = await self.send(
            "Target.attachToTarget", {"targetId": target["targetId"], "flatten": True}
        )
        page = Page(self, attached["sessionId"])
        for domain in ("Page", "Runtime", "Network", "Log"):
            await page.send(f"{domain}.enable")
        await page.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        return page

    async def aclose(self) -> None:
        with contextlib.suppress(Exception):
            await self.send("Browser.close")
        with contextlib.suppress(Exception):
            await self.ws.close()
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)


class Page:
    def __init__(self, browser: Chromium, session: str):
        self.browser = browser
        self.session = session

    async def send(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return await self.browser.send(method, params, self.session)

    def mark(self) -> int:
        """A position in the event log, to wait for events after it."""
        return len(self.browser.events)

    async def loaded(self, since: int, timeout: float = 20.0) -> None:
        await self.browser.event("Page.loadEventFired", self.session, since, timeout)

    async def goto(self, url: str, timeout: float = 20.0) -> None:
        since = self.mark()
        result = await self.send("Page.navigate", {"url": url})
        if result.get("errorText"):
            raise CdpError(f"navigation to {url} failed: {result['errorText']}")
        await self.loaded(since, timeout)

    async def evaluate(self, expression: str) -> Any:
        result = await self.send(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
        )
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            raise CdpError(f"{expression[:80]}: {text}")
        return result["result"].get("value")

    async def wait_for(self, condition: str, timeout: float = 15.0) -> Any:
        """Resolve once the JavaScript expression ``condition`` is truthy
        (checked now and after every DOM change); its value is returned."""
        ms = int(timeout * 1000)
        quoted = orjson.dumps(condition).decode()
        return await self.evaluate(
            f"""new Promise((resolve, reject) => {{
                const check = () => {{
                    try {{ return ({condition}); }} catch (e) {{ return null; }}
                }};
                const first = check();
                if (first) {{ resolve(first); return; }}
                const observer = new MutationObserver(() => {{
                    const value = check();
                    if (value) {{ observer.disconnect(); clearTimeout(timer); resolve(value); }}
                }});
                observer.observe(document, {{subtree: true, childList: true,
                                             characterData: true, attributes: true}});
                const timer = setTimeout(() => {{
                    observer.disconnect();
                    reject(new Error("timed out waiting for: " + {quoted}));
                }}, {ms});
            }})"""
        )

    async def screenshot(self, path: Path) -> Path:
        shot = await self.send("Page.captureScreenshot", {"format": "png"})
        return _write(path, base64.b64decode(shot["data"]))

    def requested_urls(self) -> list[str]:
        return [
            e["params"]["request"]["url"]
            for e in self.browser.events
            if e["method"] == "Network.requestWillBeSent" and e.get("sessionId") == self.session
        ]

    def errors(self) -> list[str]:
        """Uncaught exceptions and console errors (a CSP violation is one)."""
        found = []
        for e in self.browser.events:
            if e.get("sessionId") != self.session:
                continue
            if e["method"] == "Runtime.exceptionThrown":
                found.append(str(e["params"]["exceptionDetails"]))
            elif e["method"] == "Log.entryAdded" and e["params"]["entry"]["level"] == "error":
                found.append(e["params"]["entry"]["text"])
        return found
