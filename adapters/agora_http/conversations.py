"""HTTP Agora conversations, kept in the key-value store so every node sees them.

*Inbound* (:class:`InboundConversations`): ``multiround: true`` on
``POST /agora/{space}`` opens a conversation under an unguessable id; a
follow-up may land on any node behind the load balancer, so the conversation
(its space, its protocol and its expiry) lives in the cluster's store. Expiry
slides: every accepted follow-up extends it by the TTL. An expired conversation
is reported as expired for one more TTL (at least a minute), then forgotten.

*Outbound* (:class:`OutboundConversations`): per (space, sender,
``data.conversation_id``) the remote's ``conversationId``, so a bridge that
moves to another node (takeover) continues the conversations it had.

Times here are Unix seconds (``time.time``): ``conversationExpires`` is one,
and nodes compare them, so node clocks should be synchronised (NTP).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import orjson

from adapters.kit.stored import hashed_key, json_object
from hub.adapter_host import KeyValueStore
from protocol.agora_http import (
    CONVERSATION_EXPIRED,
    CONVERSATION_NOT_FOUND,
    AgoraHttpError,
    new_conversation_id,
)

INBOUND_PREFIX = "agora-http:in:"
#: At least this long after expiry a conversation is still reported as expired.
EXPIRED_GRACE = 60.0
OUTBOUND_PREFIX = "agora-http:out:"


@dataclass(frozen=True, slots=True)
class Conversation:
    id: str
    space: str
    protocol_hash: str | None
    expires: float

    @property
    def expires_at(self) -> int:
        """``conversationExpires``: whole seconds, rounded down (never promises more)."""
        return math.floor(self.expires)


class InboundConversations:
    def __init__(self, store: KeyValueStore, ttl: float, *, clock: Callable[[], float] = time.time):
        if not ttl > 0:
            raise ValueError("the conversation TTL must be positive")
        self.store = store
        self.ttl = ttl
        self._clock = clock

    async def _save(self, conversation: Conversation, **condition: bool) -> bool:
        value = orjson.dumps(
            {
                "space": conversation.space,
                "hash": conversation.protocol_hash,
                "expires": conversation.expires,
            }
        )
        # Kept a while past its expiry so a late follow-up hears "expired".
        keep = max(conversation.expires - self._clock(), 0) + max(self.ttl, EXPIRED_GRACE)
        return await self.store.set(INBOUND_PREFIX + conversation.id, value, keep, **condition)

    async def open(self, space: str, protocol_hash: str | None) -> Conversation:
        while True:  # a collision of 192 random bits will not happen; never overwrite anyway
            conversation = Conversation(
                new_conversation_id(), space, protocol_hash, self._clock() + self.ttl
            )
            if await self._save(conversation, if_absent=True):
                return conversation

    async def _find(self, space: str, conversation_id: str) -> Conversation:
        value = json_object(await self.store.get(INBOUND_PREFIX + conversation_id))
        # Another space's conversation is not found here: ids do not cross spaces.
        if value is None or value.get("space") != space:
            raise AgoraHttpError.failure(CONVERSATION_NOT_FOUND)
        protocol_hash = value.get("hash")
        expires = value.get("expires")
        if not isinstance(expires, int | float):
            raise AgoraHttpError.failure(CONVERSATION_NOT_FOUND)
        conversation = Conversation(
            conversation_id,
            space,
            protocol_hash if isinstance(protocol_hash, str) else None,
            float(expires),
        )
        if conversation.expires <= self._clock():
            raise AgoraHttpError.failure(CONVERSATION_EXPIRED)
        return conversation

    async def resume(self, space: str, conversation_id: str) -> Conversation:
        """The conversation, its expiry extended; an Agora failure when it is
        unknown, of another space or expired."""
        found = await self._find(space, conversation_id)
        extended = Conversation(
            found.id, found.space, found.protocol_hash, self._clock() + self.ttl
        )
        if not await self._save(extended, if_present=True):
            raise AgoraHttpError.failure(CONVERSATION_NOT_FOUND)  # ended meanwhile
        return extended

    async def end(self, space: str, conversation_id: str) -> None:
        """DELETE: ends it; an Agora failure when there is nothing to end."""
        try:
            await self._find(space, conversation_id)
        except AgoraHttpError as exc:
            if exc.error == CONVERSATION_EXPIRED:
                await self.store.delete(INBOUND_PREFIX + conversation_id)
            raise
        if not await self.store.delete(INBOUND_PREFIX + conversation_id):
            raise AgoraHttpError.failure(CONVERSATION_NOT_FOUND)

    async def discard(self, conversation: Conversation) -> None:
        """A conversation whose first turn was not answered with success."""
        await self.store.delete(INBOUND_PREFIX + conversation.id)


@dataclass(frozen=True, slots=True)
class RemoteConversation:
    key: str
    remote_id: str
    expires: float


class OutboundConversations:
    def __init__(
        self,
        store: KeyValueStore,
        agent_id: str,
        ttl: float,
        *,
        clock: Callable[[], float] = time.time,
    ):
        if not ttl > 0:
            raise ValueError("the conversation TTL must be positive")
        self.store = store
        self.agent_id = agent_id
        self.ttl = ttl
        self._clock = clock

    def key(self, space: str, sender: str, conversation_id: str) -> str:
        return hashed_key(OUTBOUND_PREFIX, self.agent_id, space, sender, conversation_id)

    async def get(self, key: str) -> RemoteConversation | None:
        value = json_object(await self.store.get(key))
        if value is None:
            return None
        remote_id, expires = value.get("remote"), value.get("expires")
        if not isinstance(remote_id, str) or not isinstance(expires, int | float):
            return None
        return RemoteConversation(key, remote_id, float(expires))

    async def put(
        self, key: str, remote_id: str, remote_expires: int | None = None
    ) -> RemoteConversation:
        """Record (or extend) a conversation: it ends after the TTL of silence,
        or when the remote said it would, whichever comes first."""
        now = self._clock()
        expires = now + self.ttl
        if remote_expires is not None and now < remote_expires < expires:
            expires = float(remote_expires)
        value = orjson.dumps({"remote": remote_id, "expires": expires})
        # Kept a while past expiry so the sweeper can still close it remotely.
        await self.store.set(key, value, expires - now + self.ttl)
        return RemoteConversation(key, remote_id, expires)

    async def delete(self, key: str) -> bool:
        return await self.store.delete(key)

    def expired(self, conversation: RemoteConversation) -> bool:
        return conversation.expires <= self._clock()
