"""The real ``agora-protocol`` 0.2.0 library as a test peer, in its own cached venv.

The library pulls in langchain, so it stays out of the project's dependencies:
:data:`VENV` builds a virtual environment with it once
(:mod:`tests.support.peer_venv`) and each peer runs as a subprocess of that
venv's Python with ``agora_peer/driver.py`` (:mod:`tests.support.peer_driver`):

* :meth:`AgoraPeer.run_sender` — ``SimpleSenderTransporter`` talks to a URL;
* :meth:`AgoraPeer.start_receiver` — ``ReceiverServer`` with a stub receiver (canned
  answers, no LLM, no network) listens on 127.0.0.1.

:func:`require_agora_peer` is what a fixture calls: it skips when the package cannot
be installed, except under ``CI=true`` where that is a failure.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.peer_driver import PeerError, PeerServer, run_driver, run_driver_sync
from tests.support.peer_venv import PeerUnavailable, PeerVenv

LIBRARY = "agora-protocol"
VERSION = "0.2.0"
DRIVER = Path(__file__).with_name("agora_peer") / "driver.py"
VENV = PeerVenv(
    f"{LIBRARY}-{VERSION}",
    [f"{LIBRARY}=={VERSION}"],
    "import agora.receiver.server, agora.sender, werkzeug.serving",
    marker=".agora-peer-ready",
)

AgoraPeerUnavailable = PeerUnavailable
AgoraPeerError = PeerError


def require_agora_peer() -> AgoraPeer:
    """An :class:`AgoraPeer`, or skip the test (fail it under ``CI=true``)."""
    return AgoraPeer(VENV.require())


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

    def _sender_result(self, stdout: bytes) -> SenderResult:
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
        stdout = run_driver_sync(
            self.python, DRIVER, "sender", spec=spec, timeout=timeout, what="sender"
        )
        return self._sender_result(stdout)

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
        stdout = await run_driver(
            self.python, DRIVER, "sender", spec=spec, timeout=timeout, what="sender"
        )
        return self._sender_result(stdout)

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
    ) -> PeerServer:
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
        return PeerServer(self.python, DRIVER, "receiver", spec, "ReceiverServer").start(timeout)

    async def astart_receiver(self, **options: Any) -> PeerServer:
        return await asyncio.to_thread(lambda: self.start_receiver(**options))

    @contextmanager
    def receiver(self, **options: Any) -> Iterator[PeerServer]:
        process = self.start_receiver(**options)
        try:
            yield process
        finally:
            process.stop()
