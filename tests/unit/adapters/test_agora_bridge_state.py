"""The bridge's state without a hub: conversations (on the memory key-value store,
a fake clock), supported protocols (on memory presence) and the config checks."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from adapters import from_settings
from adapters.agora_http import AgoraHttpInbound, AgoraHttpOutbound, read_document
from adapters.agora_http.conversations import (
    INBOUND_PREFIX,
    InboundConversations,
    OutboundConversations,
)
from adapters.agora_http.protocols import SpaceProtocols, documents_by_hash, registered_documents
from hub.cluster.kvstore import MemoryKeyValueStore
from hub.cluster.presence import AgentRecord, MemoryPresence
from hub.config.settings import load_settings
from hub.errors import ConfigError
from protocol.agora_http import AgoraHttpError, hash_document, parse_request
from tests.support.agora_bridge import ADDITION_DOC, WEATHER_DOC


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def _error(exc: pytest.ExceptionInfo[AgoraHttpError]) -> tuple[int, str]:
    return exc.value.http_status, exc.value.error


# ── inbound conversations ──────────────────────────────────────────────────


async def test_inbound_conversation_lifecycle():
    clock = Clock()
    store = MemoryKeyValueStore(clock=clock)
    convs = InboundConversations(store, ttl=60, clock=clock)
    opened = await convs.open("weather", "ab" * 20)
    assert len(opened.id) == 32 and opened.expires_at == int(clock.now) + 60
    clock.now += 59
    resumed = await convs.resume("weather", opened.id)
    assert resumed.protocol_hash == "ab" * 20 and resumed.expires == clock.now + 60  # slides
    with pytest.raises(AgoraHttpError) as exc:
        await convs.resume("sunny", opened.id)
    assert _error(exc) == (200, "Conversation not found")
    await convs.end("weather", opened.id)
    for call in (convs.resume("weather", opened.id), convs.end("weather", opened.id)):
        with pytest.raises(AgoraHttpError) as exc:
            await call
        assert _error(exc) == (200, "Conversation not found")


async def test_inbound_conversation_expiry_then_forgotten():
    clock = Clock()
    store = MemoryKeyValueStore(clock=clock)
    convs = InboundConversations(store, ttl=100, clock=clock)
    opened = await convs.open("weather", None)
    clock.now += 100
    with pytest.raises(AgoraHttpError) as exc:
        await convs.resume("weather", opened.id)
    assert _error(exc) == (200, "Conversation expired")
    clock.now += 100  # kept one more TTL to say "expired", then gone
    with pytest.raises(AgoraHttpError) as exc:
        await convs.resume("weather", opened.id)
    assert _error(exc) == (200, "Conversation not found")
    other = await convs.open("weather", None)
    clock.now += 100
    with pytest.raises(AgoraHttpError) as exc:
        await convs.end("weather", other.id)  # ending an expired one removes it
    assert _error(exc) == (200, "Conversation expired")
    assert await store.get(INBOUND_PREFIX + other.id) is None


@pytest.mark.parametrize("value", [b"not json", b"[1]", b'{"space": "weather"}'])
async def test_inbound_conversation_with_a_damaged_record_is_not_found(value):
    store = MemoryKeyValueStore()
    await store.set(INBOUND_PREFIX + "x" * 32, value, 60)
    with pytest.raises(AgoraHttpError) as exc:
        await InboundConversations(store, 60).resume("weather", "x" * 32)
    assert _error(exc) == (200, "Conversation not found")


async def test_a_short_ttl_still_says_expired_for_a_minute():
    clock = Clock()
    convs = InboundConversations(MemoryKeyValueStore(clock=clock), ttl=1, clock=clock)
    opened = await convs.open("weather", None)
    clock.now += 59
    with pytest.raises(AgoraHttpError) as exc:
        await convs.resume("weather", opened.id)
    assert _error(exc) == (200, "Conversation expired")


def test_conversation_ttl_must_be_positive():
    with pytest.raises(ValueError):
        InboundConversations(MemoryKeyValueStore(), 0)
    with pytest.raises(ValueError):
        OutboundConversations(MemoryKeyValueStore(), "a", -1)


# ── outbound conversations ─────────────────────────────────────────────────


async def test_outbound_conversations_keyed_per_sender_and_bounded_by_the_remote():
    clock = Clock()
    store = MemoryKeyValueStore(clock=clock)
    convs = OutboundConversations(store, "calc", ttl=300, clock=clock)
    keys = {
        convs.key("lab", "alice", "c1"),
        convs.key("lab", "bob", "c1"),
        convs.key("lab", "alice:c1", ""),
        convs.key("lab2", "alice", "c1"),
    }
    assert len(keys) == 4
    key = convs.key("lab", "alice", "c1")
    kept = await convs.put(key, "remote-1", remote_expires=int(clock.now) + 100)
    assert kept.expires == int(clock.now) + 100  # the remote ends it sooner
    assert await convs.get(key) == kept
    kept = await convs.put(key, "remote-1", remote_expires=int(clock.now) - 5)  # nonsense: TTL
    assert kept.expires == clock.now + 300
    clock.now += 300
    assert convs.expired(await convs.get(key))  # type: ignore[arg-type]
    assert await convs.delete(key) and await convs.get(key) is None


# ── supported protocols ────────────────────────────────────────────────────


async def _member(presence: MemoryPresence, agent_id: str, space: str, metadata: Any) -> None:
    record = AgentRecord(agent_id, "n", f"c-{agent_id}", metadata=metadata)
    assert await presence.claim_agent(record) is None
    await presence.join_space(space, agent_id, 100)


def _records(presence: MemoryPresence) -> Any:
    """What the host's ``member_records`` does, over a memory presence."""

    async def member_records(space: str, limit: int) -> list[AgentRecord]:
        ids, _count = await presence.space_members(space, limit)
        records = await asyncio.gather(*(presence.get_agent(i) for i in ids))
        return [r for r in records if r is not None]

    return member_records


def test_registered_documents_are_read_carefully():
    assert registered_documents({"agora_protocols": [ADDITION_DOC, 3, "", None]}) == [ADDITION_DOC]
    assert registered_documents({"agora_protocols": "not a list"}) == []
    assert registered_documents(None) == []
    assert registered_documents({"agora_protocols": ["x" * (256 * 1024 + 1)]}) == []
    assert len(registered_documents({"agora_protocols": [f"d{n}" for n in range(50)]})) == 16


async def test_support_from_config_members_and_sources():
    presence = MemoryPresence()
    declared = {"weather": documents_by_hash([WEATHER_DOC])}
    protocols = SpaceProtocols(declared, _records(presence), exclude=("agora-http",))
    other = "name: O\ndescription: o\nmultiround: false\n---\nother\n"

    def request(doc: str, *sources: str) -> Any:
        return parse_request(
            {"body": "x", "protocolHash": hash_document(doc), "protocolSources": list(sources)}
        )

    assert await protocols.supports("weather", parse_request({"body": "no protocol"}))
    assert await protocols.supports("weather", request(WEATHER_DOC))
    assert not await protocols.supports("weather", request(ADDITION_DOC))
    assert await protocols.supports("weather", request(other, other))
    await _member(presence, "adder", "weather", {"agora_protocols": [ADDITION_DOC]})
    await _member(presence, "agora-http", "weather", {"agora_protocols": [other]})  # excluded
    protocols.invalidate("weather")
    assert await protocols.supports("weather", request(ADDITION_DOC))
    assert not await protocols.supports("weather", request(other))
    assert set(await protocols.documents("weather")) == {
        hash_document(WEATHER_DOC),
        hash_document(ADDITION_DOC),
    }
    assert await protocols.documents("elsewhere") == {}


async def test_members_are_scanned_once_for_concurrent_lookups_and_bounded():
    presence = MemoryPresence()
    for n in range(5):
        await _member(presence, f"a{n}", "big", {"agora_protocols": [f"doc {n}"]})
    reads = 0
    real_get = presence.get_agent

    async def counting_get(agent_id: str) -> Any:
        nonlocal reads
        reads += 1
        return await real_get(agent_id)

    presence.get_agent = counting_get  # type: ignore[method-assign]
    protocols = SpaceProtocols({}, _records(presence), scan_limit=3)
    found = await asyncio.gather(*(protocols.documents("big") for _ in range(10)))
    assert reads == 3  # one scan, of the first three members
    assert all(docs == documents_by_hash(["doc 0", "doc 1", "doc 2"]) for docs in found)


async def test_a_miss_rescans_only_after_min_rescan():
    clock = Clock()
    presence = MemoryPresence()
    protocols = SpaceProtocols({}, _records(presence), max_age=5, min_rescan=1, clock=clock)
    wanted = parse_request({"body": "x", "protocolHash": hash_document(ADDITION_DOC)})
    assert not await protocols.supports("s", wanted)
    await _member(presence, "adder", "s", {"agora_protocols": [ADDITION_DOC]})
    assert not await protocols.supports("s", wanted)  # the scan is fresh: no rescan yet
    clock.now += 1.5
    assert await protocols.supports("s", wanted)


# ── configuration ──────────────────────────────────────────────────────────


def _settings(tmp_path: Path, text: str) -> Any:
    (tmp_path / "hub.toml").write_text(text)
    return load_settings({}, tmp_path / "hub.toml")


def _agora_adapters(settings: Any) -> list[Any]:
    found = from_settings(settings)
    return [a for a in found if isinstance(a, AgoraHttpInbound | AgoraHttpOutbound)]


def test_adapters_from_the_config(tmp_path):
    (tmp_path / "w.md").write_text(WEATHER_DOC)
    settings = _settings(
        tmp_path,
        f"""
[[spaces]]
id = "weather"
agora_http = true
agora_protocols = ["{tmp_path / "w.md"}"]

[[spaces]]
id = "plain"

[[bridges.agora_http]]
space = "lab"
agent_id = "calc"
url = "https://agents.example/agora"
protocol_document = "{tmp_path / "w.md"}"
timeout = 3
""",
    )
    inbound, outbound = _agora_adapters(settings)
    assert isinstance(inbound, AgoraHttpInbound) and isinstance(outbound, AgoraHttpOutbound)
    assert inbound.spaces == {"weather": documents_by_hash([WEATHER_DOC])}
    assert outbound.protocol_hash == hash_document(WEATHER_DOC) and outbound.timeout == 3
    # No space served: the inbound adapter is there anyway, only to answer /agora/*
    # with the JSON failure (404) rather than the HTTP server's plain-text page.
    (idle,) = _agora_adapters(_settings(tmp_path, '[[spaces]]\nid = "plain"\n'))
    assert isinstance(idle, AgoraHttpInbound) and idle.spaces == {}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[[spaces]]\nid = "w"\nagora_http = true\nagora_protocols = ["missing.md"]\n',
         "cannot read protocol document"),
        ('[[bridges.agora_http]]\nspace = "lab"\nagent_id = "c"\nurl = "ftp://x/agora"\n',
         "url must be an http"),
        ('[[bridges.agora_http]]\nspace = "lab"\nagent_id = "c"\nurl = "http:///agora"\n',
         "url must be an http"),
        ('[[bridges.agora_http]]\nspace = "lab"\nagent_id = "c"\nurl = "http://x/a?q=1"\n',
         "no query"),
        ('[[bridges.agora_http]]\nspace = "Lab!"\nagent_id = "c"\nurl = "http://x/a"\n',
         "not a user space"),
        ('[[bridges.agora_http]]\nspace = "agent.status"\nagent_id = "c"\nurl = "http://x/a"\n',
         "not a user space"),
        ('[[bridges.agora_http]]\nspace = "lab"\nagent_id = "agora-http"\nurl = "http://x/a"\n',
         "not a usable agent id"),
        ('[[bridges.agora_http]]\nspace = "lab"\nagent_id = "-x"\nurl = "http://x/a"\n',
         "not a usable agent id"),
        ('[[bridges.agora_http]]\nspace = "lab"\nagent_id = "c"\nurl = "http://x/a"\n'
         '[[bridges.agora_http]]\nspace = "lab2"\nagent_id = "c"\nurl = "http://y/a"\n',
         "used twice"),
    ],
)  # fmt: skip
def test_config_mistakes_stop_the_hub(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message):
        from_settings(_settings(tmp_path, text))


def test_documents_that_cannot_be_served(tmp_path):
    (tmp_path / "bin.md").write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigError, match="not UTF-8"):
        read_document(tmp_path / "bin.md", "x")
    (tmp_path / "big.md").write_text("x" * (256 * 1024 + 1))
    with pytest.raises(ConfigError, match="exceeds"):
        read_document(tmp_path / "big.md", "x")
    # Not a well-formed Protocol Document: served anyway (it is named by its hash).
    (tmp_path / "plain.md").write_text(ADDITION_DOC)
    assert read_document(tmp_path / "plain.md", "x") == ADDITION_DOC
