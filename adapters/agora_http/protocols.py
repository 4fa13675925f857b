"""Which Protocol Documents a space supports over HTTP Agora.

A space supports a document when the operator declared it (``agora_protocols``
files of the ``[[spaces]]`` entry) or when one of its members registered it:
``agent.register`` with ``metadata.agora_protocols``, a list of document texts.
A request may also bring the document itself (``protocolSources`` that hash to
its ``protocolHash``); that is judged per request, not here.

Members' documents are read from presence — the first ``scan_limit`` members
(oldest first), one record each — and cached per space for ``max_age``
seconds, or until the space's membership changes (the bridge's member sees
``space.members``). A miss is looked up again when the cache is older than
``min_rescan`` seconds, so an agent that registers a document is heard within
that time while a stream of unknown hashes costs at most one scan per
``min_rescan`` per space. Concurrent lookups of one space share one scan.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import structlog

from hub.adapter_host import AgentRecord
from protocol.agora_http import MAX_SOURCE_BYTES, AgoraRequest, ProtocolDocumentError, hash_document
from protocol.agora_http import ProtocolDocument as Document

#: At most this many documents are read from one agent's registration.
MAX_DOCUMENTS_PER_AGENT = 16

log = structlog.get_logger("adapters.agora_http")


def documents_by_hash(texts: Iterable[str]) -> dict[str, str]:
    return {hash_document(text): text for text in texts}


def describe_document(text: str) -> str | None:
    """Why ``text`` is not a well-formed Protocol Document, or ``None``.

    Documents are served by hash whatever their shape (the library's own
    examples have no metadata); this is only for telling the operator.
    """
    try:
        Document.parse(text)
    except ProtocolDocumentError as exc:
        return exc.reason
    return None


def registered_documents(metadata: Any) -> list[str]:
    """The document texts an agent registered in ``metadata.agora_protocols``."""
    if not isinstance(metadata, dict):
        return []
    texts = metadata.get("agora_protocols")
    if not isinstance(texts, list):
        return []
    return [text for text in texts[:MAX_DOCUMENTS_PER_AGENT] if _usable(text)]


def _usable(text: object) -> bool:
    if not isinstance(text, str):
        return False
    return 0 < len(text.encode("utf-8", "surrogatepass")) <= MAX_SOURCE_BYTES


class SpaceProtocols:
    def __init__(
        self,
        declared: Mapping[str, Mapping[str, str]],
        member_records: Callable[[str, int], Awaitable[list[AgentRecord]]],
        *,
        scan_limit: int = 200,
        max_age: float = 5.0,
        min_rescan: float = 0.25,
        exclude: Iterable[str] = (),
        clock: Callable[[], float] = time.monotonic,
    ):
        self.declared = {space: dict(docs) for space, docs in declared.items()}
        self.member_records = member_records
        self.scan_limit = scan_limit
        self.max_age = max_age
        self.min_rescan = min_rescan
        self._exclude = frozenset(exclude)
        self._clock = clock
        self._cache: dict[str, tuple[float, dict[str, str]]] = {}
        self._scans: dict[str, asyncio.Task[dict[str, str]]] = {}

    async def supports(self, space: str, request: AgoraRequest) -> bool:
        wanted = request.protocol_hash
        if wanted is None or wanted in self.declared.get(space, {}):
            return True
        if request.document_for(wanted) is not None:
            return True
        if wanted in await self._members(space, self.max_age):
            return True
        return wanted in await self._members(space, self.min_rescan)

    async def documents(self, space: str) -> dict[str, str]:
        """Every supported document of ``space``, by hash (for ``wellknown``)."""
        members = await self._members(space, self.min_rescan)
        return {**members, **self.declared.get(space, {})}

    def invalidate(self, space: str) -> None:
        """Members changed (someone joined or left): the next lookup reads them again."""
        self._cache.pop(space, None)

    async def _members(self, space: str, max_age: float) -> dict[str, str]:
        cached = self._cache.get(space)
        if cached is not None and self._clock() - cached[0] <= max_age:
            return cached[1]
        scan = self._scans.get(space)
        if scan is None:
            scan = asyncio.get_running_loop().create_task(self._scan(space))
            self._scans[space] = scan
            scan.add_done_callback(lambda _: self._scans.pop(space, None))
        # Shielded: one caller giving up (its HTTP client left) does not cancel
        # the scan the others are waiting for.
        return await asyncio.shield(scan)

    async def _scan(self, space: str) -> dict[str, str]:
        started = self._clock()
        records = await self.member_records(space, self.scan_limit)
        found: dict[str, str] = {}
        for record in records:
            if record.agent_id not in self._exclude:
                found.update(documents_by_hash(registered_documents(record.metadata)))
        self._cache[space] = (started, found)
        return found
