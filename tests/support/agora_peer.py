"""The real ``agora-protocol`` 0.2.0 library as a test peer, in its own cached venv.

The library pulls in langchain, so it stays out of the project's dependencies: the
first use builds a virtual environment under ``~/.cache/agora-hub-tests/`` (or
``$AGORA_PEER_CACHE``) and later runs reuse it. Each peer runs as a subprocess of
that venv's Python with ``agora_peer/driver.py``:

* :meth:`AgoraPeer.run_sender` — ``SimpleSenderTransporter`` talks to a URL;
* :meth:`AgoraPeer.start_receiver` — ``ReceiverServer`` with a stub receiver (canned
  answers, no LLM, no network) listens on 127.0.0.1.

:func:`require_agora_peer` is what a fixture calls: it skips when the package cannot
be installed, except under ``CI=true`` where that is a failure.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

LIBRARY = "agora-protocol"
VERSION = "0.2.0"
DRIVER = Path(__file__).with_name("agora_peer") / "driver.py"
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
_MARKER = ".agora-peer-ready"


class AgoraPeerUnavailable(Exception):
    """The library could not be installed (no index, no network …)."""


class AgoraPeerError(Exception):
    """A peer subprocess failed, timed out or answered something unreadable."""


# ── the cached virtual environment ──────────────────────────────────────────


def cache_dir() -> Path:
    configured = os.environ.get("AGORA_PEER_CACHE")
    if configured:
        return Path(configured)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    tag = f"py{sys.version_info.major}{sys.version_info.minor}"
    return base / "agora-hub-tests" / f"{LIBRARY}-{VERSION}-{tag}"


def ensure_venv(timeout: float = 900) -> Path:
    """The venv's Python, building the venv first if needed (under a file lock, so
    concurrent test runs build it once)."""
    venv = cache_dir()
    python = venv / "bin" / "python"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (venv / _MARKER).is_file() and python.exists():
            return python
        shutil.rmtree(venv, ignore_errors=True)  # a half-built venv from a killed run
        _build(venv, python, timeout)
    return python


def _build(venv: Path, python: Path, timeout: float) -> None:
    steps = [
        [sys.executable, "-m", "venv", str(venv)],
        [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
         "--quiet", f"{LIBRARY}=={VERSION}"],
        [str(python), "-c", "import agora.receiver.server, agora.sender, werkzeug.serving"],
    ]  # fmt: skip
    for step in steps:
        try:
            done = subprocess.run(step, capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise AgoraPeerUnavailable(f"{LIBRARY}=={VERSION}: {exc}") from None
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip()[-2000:]
            raise AgoraPeerUnavailable(f"{LIBRARY}=={VERSION} could not be installed:\n{tail}")
    freeze = subprocess.run(
        [str(python), "-m", "pip", "freeze"], capture_output=True, text=True, timeout=timeout
    ).stdout
    (venv / _MARKER).write_text(json.dumps({"version": VERSION, "freeze": freeze.split()}))


def require_agora_peer() -> AgoraPeer:
    """An :class:`AgoraPeer`, or skip the test (fail it under ``CI=true``)."""
    try:
        return AgoraPeer(ensure_venv())
    except AgoraPeerUnavailable as exc:
        if IN_CI:
            pytest.fail(f"CI must run the interop tests: {exc}")
        pytest.skip(str(exc))


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME"}}
    # requests honours proxy variables; the peers only ever talk over loopback.
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost,::1"
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONWARNINGS"] = "ignore"
    return env


# ── the peers ───────────────────────────────────────────────────────────────


@dataclass
class SenderResult:
    """What one sender run did: per message, the library's return value or the
    exception it raised; plus every HTTP call with the raw response it got."""

    protocol_hash: str | None
    protocol_sources: list[str]
    conversation_id: str | None
    turns: list[dict[str, Any]]
    close: dict[str, Any] | None
    http: list[dict[str, Any]]

    @property
    def replies(self) -> list[dict[str, Any] | None]:
        return [turn["reply"] for turn in self.turns]

    @property
    def errors(self) -> list[dict[str, str] | None]:
        return [turn["error"] for turn in self.turns]


class AgoraPeer:
    def __init__(self, python: Path):
        self.python = python

    def _sender_spec(self, url: str, messages: Sequence[Any], **options: Any) -> bytes:
        return json.dumps({"url": url, "messages": list(messages), **options}).encode()

    def _sender_result(self, returncode: int, stdout: bytes, stderr: bytes) -> SenderResult:
        if returncode != 0:
            raise AgoraPeerError(f"sender exited {returncode}:\n{stderr.decode()[-3000:]}")
        try:
            return SenderResult(**json.loads(stdout))
        except (ValueError, TypeError) as exc:
            raise AgoraPeerError(f"sender output unreadable ({exc}): {stdout[:500]!r}") from None

    def run_sender(
        self,
        url: str,
        messages: Sequence[Any],
        *,
        multiround: bool = False,
        protocol_hash: str | None = None,
        protocol_sources: Sequence[str] | None = None,
        document: str | None = None,
        close: bool = False,
        timeout: float = 60,
    ) -> SenderResult:
        """Send ``messages`` as one conversation with ``SimpleSenderTransporter``.

        ``document`` makes the library compute the hash (base64) and the ``data:``
        source itself. The first failing message ends the run. Blocking: from async
        code use :meth:`arun_sender`.
        """
        spec = self._sender_spec(
            url, messages, multiround=multiround, protocol_hash=protocol_hash,
            protocol_sources=protocol_sources, document=document, close=close,
        )  # fmt: skip
        try:
            done = subprocess.run(
                [str(self.python), str(DRIVER), "sender"],
                input=spec, capture_output=True, timeout=timeout, env=_env(),
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            raise AgoraPeerError(f"sender did not finish within {timeout} s") from None
        return self._sender_result(done.returncode, done.stdout, done.stderr)

    async def arun_sender(
        self,
        url: str,
        messages: Sequence[Any],
        *,
        multiround: bool = False,
        protocol_hash: str | None = None,
        protocol_sources: Sequence[str] | None = None,
        document: str | None = None,
        close: bool = False,
        timeout: float = 60,
    ) -> SenderResult:
        """:meth:`run_sender` without blocking the event loop (for in-process servers)."""
        spec = self._sender_spec(
            url, messages, multiround=multiround, protocol_hash=protocol_hash,
            protocol_sources=protocol_sources, document=document, close=close,
        )  # fmt: skip
        proc = await asyncio.create_subprocess_exec(
            str(self.python), str(DRIVER), "sender", env=_env(),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        try:
            stdout, stderr = await asyncio.wait_for(proc.communicate(spec), timeout)
        except TimeoutError:
            raise AgoraPeerError(f"sender did not finish within {timeout} s") from None
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        return self._sender_result(proc.returncode, stdout, stderr)

    def start_receiver(
        self,
        *,
        port: int = 0,
        answers: dict[str, Any] | None = None,
        raise_on: dict[str, str] | None = None,
        reject_hashes: Sequence[str] = (),
        known_hashes: Sequence[str] = (),
        verify_sources: bool = True,
        timeout: float = 30,
    ) -> ReceiverProcess:
        """Start ``ReceiverServer`` on 127.0.0.1 (``port=0``: a free one) and wait
        until it listens.

        The stub answers a string body ``b`` with ``answers[b]`` or ``"echo:" + b``,
        an object with ``{"echo": body}`` (object bodies are keyed by their sorted-key
        JSON); ``raise_on[b]`` raises inside the conversation. A hash in
        ``reject_hashes`` is refused; any other hash, unless in ``known_hashes``, must
        be proven by a ``data:`` source, checked with the library's own code.
        """
        spec = {
            "port": port,
            "answers": answers or {},
            "raise_on": raise_on or {},
            "reject_hashes": list(reject_hashes),
            "known_hashes": list(known_hashes),
            "verify_sources": verify_sources,
        }
        return ReceiverProcess(self.python, spec).start(timeout)

    async def astart_receiver(self, **options: Any) -> ReceiverProcess:
        return await asyncio.to_thread(lambda: self.start_receiver(**options))

    @contextmanager
    def receiver(self, **options: Any) -> Iterator[ReceiverProcess]:
        process = self.start_receiver(**options)
        try:
            yield process
        finally:
            process.stop()


class ReceiverProcess:
    """A running ``ReceiverServer``; :meth:`stop` is idempotent."""

    def __init__(self, python: Path, spec: dict[str, Any]):
        self._python = python
        self._spec = spec
        self._stderr = tempfile.TemporaryFile()
        self._proc: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None
        self._changed = threading.Condition()
        self._calls: list[dict[str, Any]] = []
        self._ended = False
        self._stderr_text: str | None = None
        self.port: int | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def returncode(self) -> int | None:
        return None if self._proc is None else self._proc.poll()

    def start(self, timeout: float) -> ReceiverProcess:
        self._proc = subprocess.Popen(
            [str(self._python), str(DRIVER), "receiver"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, env=_env(),
        )  # fmt: skip
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(json.dumps(self._spec).encode())
        self._proc.stdin.close()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        with self._changed:
            ready = self._changed.wait_for(lambda: self.port is not None or self._ended, timeout)
        if self.port is None:
            self.stop()
            why = "exited" if ready else f"did not listen within {timeout} s"
            raise AgoraPeerError(f"ReceiverServer {why}:\n{self.stderr_text()[-3000:]}")
        return self

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            with self._changed:
                if record.get("event") == "listening":
                    self.port = record["port"]
                else:
                    self._calls.append(record)
                self._changed.notify_all()
        with self._changed:
            self._ended = True
            self._changed.notify_all()

    def calls(self) -> list[dict[str, Any]]:
        """What the stub receiver was asked so far: ``conversation`` (hash and
        sources) and ``message`` (body) records, in order."""
        with self._changed:
            return list(self._calls)

    def wait_for_calls(self, count: int, timeout: float = 10) -> list[dict[str, Any]]:
        with self._changed:
            if not self._changed.wait_for(lambda: len(self._calls) >= count, timeout):
                raise AgoraPeerError(f"receiver saw {len(self._calls)} calls, not {count}")
            return list(self._calls)

    def stderr_text(self) -> str:
        """The server's log (werkzeug's request lines, the library's tracebacks)."""
        if self._stderr_text is not None:
            return self._stderr_text
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")

    def stop(self, timeout: float = 10) -> int | None:
        """SIGTERM, then SIGKILL if it lingers; returns the exit code (0 = clean)."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._reader is not None:
            self._reader.join(timeout)
        if not self._stderr.closed:
            self._stderr_text = self.stderr_text()
            self._stderr.close()
        return self.returncode
