"""The authorization matrix (contract §18): every face × every identity × every
action × an open, a restricted and a missing space — once with JWTs, once with
a tokens file — against the one policy's answer.

Faces: the WebSocket, ``/api``, ``/admin``, every MCP tool, every A2A card and
JSON-RPC method, every HTTP Agora route, the envelope routes. Identities: none,
a bad token, an expired JWT, ``reader`` (may join the restricted space, may
publish only in the open one), ``outsider`` (kept out of the restricted space
by its ``allow_join``), ``member``. The policy says what each may do
(:func:`expected`); every face must answer accordingly — and a refusal on an
HTTP face must look exactly like the missing space's answer.

Built so that nothing can be forgotten: the MCP tools are enumerated from
``tools/list`` and the A2A methods from the gateway's method table, the HTTP
routes from the node's router; one without a row here fails the test.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import aiohttp
import jwt
import orjson
import pytest
from nacl.signing import SigningKey

from adapters.a2a import A2aGateway
from protocol.envelope import agentprotocol as ap
from protocol.identity import did_key
from protocol.messages import CLIENT_MODELS
from tests.support import a2a_http as a2a
from tests.support.envelopes import agora_env
from tests.support.wsclient import WsClient

OPEN, VAULT, MISSING = "plaza", "vault", "nowhere"
SPACES = (OPEN, VAULT, MISSING)
SECRET = "m" * 32
API_KEY = "api-key-0123456789abcdef"
ADMIN = "admin-token-0123456789abcdef"
AGENTS = ("member", "reader", "outsider", "keeper", "opener")
KEYS = {name: SigningKey(bytes([n + 1]) * 32) for n, name in enumerate(AGENTS)}
#: The answering agents: keeper in the restricted space, opener in the open one,
#: each offering one MCP tool.
TOOLS = {"keeper.secrets": VAULT, "opener.greet": OPEN}


class Act(StrEnum):
    READ = "read"
    PUBLISH = "publish"


class Outcome(StrEnum):
    OK = "ok"
    UNAUTHENTICATED = "unauthenticated"
    ABSENT = "absent"  # as if the space did not exist
    FORBIDDEN = "forbidden"  # known, and not allowed


def expected(identity: str, act: Act, space: str) -> Outcome:
    """What the policy allows; the one table every face is held to."""
    if identity in ("none", "bad", "expired"):
        return Outcome.UNAUTHENTICATED
    if space == MISSING or (space == VAULT and identity == "outsider"):
        return Outcome.ABSENT  # a refused read, an absent space: the same answer
    if space == VAULT and identity == "reader" and act is Act.PUBLISH:
        return Outcome.FORBIDDEN
    return Outcome.OK


# ── the hub under test ──────────────────────────────────────────────────────


@dataclass
class Matrix:
    mode: str
    server: Any
    tokens: dict[str, str | None]
    http: aiohttp.ClientSession
    failures: list[str] = field(default_factory=list)
    cases: int = 0

    @property
    def identities(self) -> list[str]:
        return [i for i in ("none", "bad", "expired", "reader", "outsider", "member")
                if i in self.tokens]  # fmt: skip

    def headers(self, identity: str) -> dict[str, str]:
        token = self.tokens[identity]
        return {} if token is None else {"Authorization": f"Bearer {token}"}

    def check(self, what: str, got: Outcome, want: Outcome) -> None:
        self.cases += 1
        if got is not want:
            self.failures.append(f"[{self.mode}] {what}: got {got}, want {want}")

    async def request(
        self, method: str, path: str, identity: str, **kwargs: Any
    ) -> tuple[int, bytes]:
        headers = {**self.headers(identity), **kwargs.pop("headers", {})}
        url = self.server.http_url + path
        async with self.http.request(method, url, headers=headers, **kwargs) as resp:
            return resp.status, await resp.read()


def jwt_for(agent: str, **claims: Any) -> str:
    payload = {"sub": agent, "exp": int(time.time()) + 600, **claims}
    return jwt.encode(payload, SECRET, algorithm="HS256")


def settings_for(mode: str, tmp_path: Any) -> tuple[dict[str, Any], dict[str, str | None]]:
    ruled = {"allow_join": ["member", "reader", "keeper"]}
    common: dict[str, Any] = {
        "spaces": [
            {"id": OPEN, "a2a": True, "agora_http": True, "mcp": True},
            {"id": VAULT, "a2a": True, "agora_http": True, "mcp": True, **ruled},
        ],
        "auto_create_spaces": False,
        "api_key": API_KEY,
        "admin_token": ADMIN,
        "bridge_timeout": 3,
        "caller_share": 1,
        "signers": [{"did": did_key(KEYS[a].verify_key.encode()), "agent_id": a} for a in AGENTS],
    }
    if mode == "jwt":
        tokens = {a: jwt_for(a) for a in AGENTS}
        tokens["reader"] = jwt_for("reader", publish=[OPEN])
        tokens["expired"] = jwt.encode(
            {"sub": "member", "exp": int(time.time()) - 3600}, SECRET, algorithm="HS256"
        )
        return {**common, "auth_mode": "jwt", "jwt_secret": SECRET}, {
            **tokens, "none": None, "bad": "not.a.token",
        }  # fmt: skip
    entries: dict[str, Any] = {a: f"{a}-token-0123" for a in AGENTS}
    entries["reader"] = {"token": "reader-token-0123", "publish": [OPEN]}
    path = tmp_path / "tokens.json"
    path.write_bytes(orjson.dumps(entries))
    tokens = {a: f"{a}-token-0123" for a in AGENTS}
    return {**common, "auth_mode": "tokens", "auth_tokens_file": str(path)}, {
        **tokens, "none": None, "bad": "wrong-token",
    }  # fmt: skip


async def answering_agent(matrix: Matrix, name: str, space: str, tool: str) -> WsClient:
    """An agent offering ``tool`` in ``space`` that answers every request it hears."""
    client = await WsClient.connect(
        matrix.server.url, name, token=matrix.tokens[name], heartbeat=True
    )
    meta = {"mcp_tools": [{"name": tool}]}
    await client.request({"type": "agent.register", "agent": {"id": name, "metadata": meta}})
    await client.join(space)
    return client


async def answer_forever(client: WsClient, space: str) -> None:
    with contextlib.suppress(Exception):
        while True:
            event = await client.wait_for("space.event", timeout=3600, space=space)
            data = event.get("data") or {}
            addressed_elsewhere = "to" in event and client.agent_id not in event["to"]
            if "in_reply_to" in data or addressed_elsewhere:
                continue
            if event["from"] not in ("mcp", "a2a", "agora-http"):
                continue
            reply = {"in_reply_to": event["event_id"], "text": "ok", "body": "ok"}
            await client.send({"type": "space.publish", "space": space, "data": reply})


@pytest.fixture(params=["jwt", "tokens"])
async def matrix(request, hub, tmp_path) -> AsyncIterator[Matrix]:
    settings, tokens = settings_for(request.param, tmp_path)
    server = await hub(**settings)
    async with aiohttp.ClientSession() as http:
        m = Matrix(request.param, server, tokens, http)
        keeper = await answering_agent(m, "keeper", VAULT, "secrets")
        opener = await answering_agent(m, "opener", OPEN, "greet")
        tasks = [
            asyncio.ensure_future(answer_forever(keeper, VAULT)),
            asyncio.ensure_future(answer_forever(opener, OPEN)),
        ]
        yield m
        for task in tasks:
            task.cancel()
        await keeper.close()
        await opener.close()


# ── the faces ───────────────────────────────────────────────────────────────


def http_outcome(status: int, body: bytes = b"") -> Outcome:
    if status == 401:
        return Outcome.UNAUTHENTICATED
    if status == 404:
        return Outcome.ABSENT
    if status == 403:
        return Outcome.FORBIDDEN
    return Outcome.OK


def blank(body: bytes, *names: str) -> bytes:
    for name in sorted(names, key=len, reverse=True):
        body = body.replace(name.encode(), b"_")
    return body


async def same_as_absent(
    m: Matrix,
    what: str,
    got: tuple[int, bytes],
    absent: Awaitable[tuple[int, bytes]],
    names: tuple[str, ...],
) -> None:
    """A refusal must be the missing space's answer (``absent``), word for word."""
    missing = await absent
    m.cases += 1
    if got[0] != missing[0] or blank(got[1], *names) != blank(missing[1], *names):
        m.failures.append(f"[{m.mode}] {what}: refusal {got} differs from absence {missing}")


# WebSocket ---------------------------------------------------------------------


async def websocket_face(m: Matrix) -> None:
    for identity in m.identities:
        token = m.tokens[identity]
        try:
            client = await WsClient.connect(
                m.server.url, "member" if identity in ("expired", "bad", "none") else identity,
                token=token, heartbeat=True,
            )  # fmt: skip
        except Exception:
            client = None
        if client is not None and identity in ("none", "bad", "expired"):
            code, _ = await client.closed()
            client = None if code == 4401 else client
        connected = Outcome.UNAUTHENTICATED if client is None else Outcome.OK
        m.check(f"ws {identity} connect", connected, expected(identity, Act.READ, OPEN))
        if client is None:
            continue
        for space in SPACES:
            want_read = ws_code(expected(identity, Act.READ, space), space)
            joined = await client.request({"type": "space.join", "space": space})
            m.check(f"ws {identity} join {space}", ws_outcome(joined), want_read)
            reply = await client.request({"type": "space.members", "space": space})
            m.check(f"ws {identity} space.members {space}", ws_outcome(reply), want_read)
            # agent.list of a space nobody is in is an empty list (§12), refused or not.
            reply = await client.request({"type": "agent.list", "space": space})
            want = Outcome.OK if want_read is Outcome.ABSENT else want_read
            m.check(f"ws {identity} agent.list {space}", ws_outcome(reply), want)
            if joined["type"] == "space.joined":
                reply = await client.request({"type": "space.history", "space": space})
                m.check(f"ws {identity} history {space}", ws_outcome(reply), want_read)
                published = await client.request(
                    {"type": "space.publish", "space": space, "data": {"text": "x"}}
                )
                want = ws_code(expected(identity, Act.PUBLISH, space), space)
                m.check(f"ws {identity} publish {space}", ws_outcome(published), want)
                streamed = await stream_outcome(client, space)
                m.check(f"ws {identity} stream {space}", streamed, want)
        listed = await client.request({"type": "agent.list"})
        sees_keeper = "keeper" in {a["id"] for a in listed.get("agents", [])}
        may = expected(identity, Act.READ, VAULT) is Outcome.OK
        m.check(f"ws {identity} agent.list shows keeper", ok_if(sees_keeper), ok_if(may))
        listed = await client.request({"type": "space.list"})
        sees_vault = VAULT in {s["id"] for s in listed.get("spaces", [])}
        m.check(f"ws {identity} space.list shows {VAULT}", ok_if(sees_vault), ok_if(may))
        await client.close()


async def stream_outcome(client: WsClient, space: str) -> Outcome:
    """A client stream into ``space``: its first delta refused, or its done echoed."""
    stream = f"s-{uuid.uuid4().hex[:8]}"
    delta, done = f"d-{stream}", f"e-{stream}"
    await client.send({"type": "space.event.delta", "id": delta, "space": space,
                       "event_id": stream, "data": {"text": "x"}})  # fmt: skip
    await client.send({"type": "space.event.done", "id": done, "space": space, "event_id": stream})
    reply = await client._until(
        lambda msg: msg.get("request_id") in (delta, done) or msg.get("id") in (delta, done), 10.0
    )
    return ws_outcome(reply)


#: How the WebSocket rows above cover each message a client may send: a new
#: message type without an entry here fails the matrix.
WS_ROWS = {
    "space.join": "join", "space.members": "space.members", "agent.list": "agent.list",
    "space.history": "history", "space.publish": "publish", "space.list": "space.list",
    "space.event.delta": "stream", "space.event.done": "stream",
    # A receiver's or the producer's cancel touches only a stream the caller
    # already receives or produces; leaving, registering, heartbeats and token
    # refreshes concern the caller's own connection, in no space it is not in.
    "space.event.cancel": None, "space.leave": None, "agent.register": None,
    "agent.heartbeat": None, "agent.refresh": None,
}  # fmt: skip


def ws_outcome(reply: dict[str, Any]) -> Outcome:
    if reply.get("type") != "error":
        return Outcome.OK
    return {"UNAUTHORIZED": Outcome.FORBIDDEN, "SPACE_NOT_FOUND": Outcome.ABSENT}.get(
        reply.get("code"), Outcome.UNAUTHENTICATED
    )


def ws_code(want: Outcome, space: str) -> Outcome:
    """The WebSocket words it as §11 says: a refused join is ``UNAUTHORIZED``
    whatever the space (declared spaces' rules are the operator's, not a
    secret of the space), an absent one ``SPACE_NOT_FOUND``."""
    if want is Outcome.ABSENT and space != MISSING:
        return Outcome.FORBIDDEN
    return want


def ok_if(condition: bool) -> Outcome:
    return Outcome.OK if condition else Outcome.ABSENT


# /api and /admin ------------------------------------------------------------------


async def operator_faces(m: Matrix) -> None:
    """The operator's faces take the operator's credentials only: an agent's
    token is no API key; with the key, the operator may publish anywhere a
    user may (not in system spaces)."""
    creds: dict[str, dict[str, str]] = {
        "none": {}, "bad": {"X-API-Key": "nope"},
        **{i: m.headers(i) for i in m.identities if m.tokens[i] is not None},
        "operator": {"X-API-Key": API_KEY},
    }  # fmt: skip
    for who, headers in creds.items():
        for space in SPACES:
            status, _ = await m.request(
                "POST", "/api/publish", "none", headers=headers,
                json={"space": space, "data": {"text": "x"}},
            )  # fmt: skip
            want = Outcome.UNAUTHENTICATED
            if who == "operator":
                want = Outcome.ABSENT if space == MISSING else Outcome.OK
            m.check(f"/api {who} publish {space}", http_outcome(status), want)
        status, _ = await m.request("GET", f"/api/spaces/{OPEN}/members", "none", headers=headers)
        m.check(f"/api {who} members", http_outcome(status),
                Outcome.OK if who == "operator" else Outcome.UNAUTHENTICATED)  # fmt: skip
        status, _ = await m.request("POST", "/api/publish", "none", headers=headers,
                                    json={"space": "agent.status", "data": {}})  # fmt: skip
        if who == "operator":
            m.check("/api operator publish system", http_outcome(status), Outcome.FORBIDDEN)
    for who in ("none", "bad", *[i for i in m.identities if m.tokens[i]], "admin"):
        headers = {"Authorization": f"Bearer {ADMIN}"} if who == "admin" else m.headers(who)
        status, _ = await m.request("GET", "/admin/state", "none", headers=headers)
        want = Outcome.OK if who == "admin" else Outcome.UNAUTHENTICATED
        m.check(f"/admin {who} state", http_outcome(status), want)


# MCP ------------------------------------------------------------------------------

#: Each hub tool: what it does where (None: no space), and its arguments.
MCP_TOOLS: dict[str, tuple[Act | None, Callable[[str], dict[str, Any]]]] = {
    "spaces_list": (None, lambda space: {}),
    "agents_list": (Act.READ, lambda space: {"space": space}),
    "space_history": (Act.READ, lambda space: {"space": space}),
    "space_publish": (Act.PUBLISH, lambda space: {"space": space, "text": "x"}),
    "space_ask": (Act.PUBLISH, lambda space: {"space": space, "text": "x", "timeout": 2}),
}


#: Each resource method (contract §20): what it does in the space named by its
#: URI (None: no space), and its params.
MCP_RESOURCES: dict[str, tuple[Act | None, Callable[[str], dict[str, Any]]]] = {
    "resources/list": (None, lambda space: {}),
    "resources/templates/list": (None, lambda space: {}),
    "resources/read": (Act.READ, lambda space: {"uri": f"agora://spaces/{space}"}),
    "resources/subscribe": (Act.READ, lambda space: {"uri": f"agora://spaces/{space}"}),
    # Stops what was followed: refuses nobody who is authenticated.
    "resources/unsubscribe": (None, lambda space: {"uri": f"agora://spaces/{space}"}),
}


async def mcp_session(m: Matrix, identity: str) -> dict[str, str]:
    """Headers of a new MCP session of ``identity`` (none when it is refused)."""
    headers = {"Accept": "application/json", "MCP-Protocol-Version": "2025-06-18"}
    init = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "m"},
        },
    }
    url = m.server.http_url + "/mcp"
    async with m.http.post(url, json=init, headers={**m.headers(identity), **headers}) as resp:
        session = resp.headers.get("Mcp-Session-Id")
    return {**headers, "Mcp-Session-Id": session} if session else headers


async def mcp_rpc(
    m: Matrix, identity: str, method: str, params: dict[str, Any], headers: dict[str, str]
) -> Any:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    status, raw = await m.request("POST", "/mcp", identity, json=body, headers=headers)
    return status, orjson.loads(raw) if raw else None


async def mcp_resources(m: Matrix, identity: str) -> None:
    headers = await mcp_session(m, identity)
    for method, (act, params) in MCP_RESOURCES.items():
        if act is None:
            status, answer = await mcp_rpc(m, identity, method, params(OPEN), headers)
            want = expected(identity, Act.READ, OPEN)
            m.check(f"mcp {identity} {method}", mcp_outcome(status, answer), want)
            if status == 200 and method == "resources/list":
                uris = {r["uri"] for r in answer["result"]["resources"]}
                m.check(f"mcp {identity} resources/list shows {VAULT}",
                        ok_if(f"agora://spaces/{VAULT}" in uris),
                        ok_if(expected(identity, Act.READ, VAULT) is Outcome.OK))  # fmt: skip
            continue
        for space in SPACES:
            status, answer = await mcp_rpc(m, identity, method, params(space), headers)
            want = expected(identity, act, space)
            m.check(f"mcp {identity} {method} {space}", mcp_outcome(status, answer), want)


async def mcp_call(m: Matrix, identity: str, name: str, arguments: dict[str, Any]) -> Any:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": name, "arguments": arguments}}  # fmt: skip
    headers = {"Accept": "application/json", "MCP-Protocol-Version": "2025-06-18"}
    status, raw = await m.request("POST", "/mcp", identity, json=body, headers=headers)
    return status, orjson.loads(raw) if raw else None


def mcp_outcome(status: int, answer: Any) -> Outcome:
    if status != 200:
        return http_outcome(status)
    if "error" in answer:
        absent = answer["error"]["code"] in (-32602, -32002)  # unknown tool, unknown resource
        return Outcome.ABSENT if absent else Outcome.FORBIDDEN
    result = answer["result"]
    text = result["content"][0].get("text", "") if result.get("content") else ""
    if result.get("isError") and "does not exist, or you may not read it" in text:
        return Outcome.ABSENT
    if result.get("isError") and "may not publish" in text:
        return Outcome.FORBIDDEN
    return Outcome.OK


async def mcp_face(m: Matrix) -> None:
    headers = {"Accept": "application/json", "MCP-Protocol-Version": "2025-06-18"}
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    status, raw = await m.request("POST", "/mcp", "member", json=listing, headers=headers)
    assert status == 200, raw
    listed = {tool["name"] for tool in orjson.loads(raw)["result"]["tools"]}
    missing_rows = listed - set(MCP_TOOLS) - set(TOOLS)
    assert not missing_rows, f"MCP tools without a row in the matrix: {sorted(missing_rows)}"
    assert set(TOOLS) <= listed, listed
    for identity in m.identities:
        for name, (act, arguments) in MCP_TOOLS.items():
            if act is None:
                status, answer = await mcp_call(m, identity, name, {})
                want = expected(identity, Act.READ, OPEN)
                m.check(f"mcp {identity} {name}", mcp_outcome(status, answer), want)
                if status == 200:
                    spaces = {s["id"] for s in answer["result"]["structuredContent"]["spaces"]}
                    sees = ok_if(VAULT in spaces)
                    m.check(f"mcp {identity} spaces_list shows {VAULT}", sees,
                            ok_if(expected(identity, Act.READ, VAULT) is Outcome.OK))  # fmt: skip
                continue
            for space in SPACES:
                status, answer = await mcp_call(m, identity, name, arguments(space))
                want = expected(identity, act, space)
                m.check(f"mcp {identity} {name} {space}", mcp_outcome(status, answer), want)
        status, answer = await mcp_call(m, identity, "agents_list", {})
        if status == 200:
            agents = {a["id"] for a in answer["result"]["structuredContent"]["agents"]}
            m.check(f"mcp {identity} agents_list shows keeper", ok_if("keeper" in agents),
                    ok_if(expected(identity, Act.READ, VAULT) is Outcome.OK))  # fmt: skip
        for tool, space in TOOLS.items():
            status, answer = await mcp_call(m, identity, tool, {})
            want = expected(identity, Act.PUBLISH, space)
            if want is Outcome.FORBIDDEN:  # a tool the caller may not call is not there
                want = Outcome.ABSENT
            m.check(f"mcp {identity} {tool}", mcp_outcome(status, answer), want)
        await mcp_resources(m, identity)


# A2A ------------------------------------------------------------------------------

#: Each JSON-RPC method: what it does in the space, and its params.
A2A_METHODS: dict[str, tuple[Act, Callable[[], dict[str, Any]]]] = {
    "SendMessage": (Act.PUBLISH, lambda: {
        "message": a2a.message("hi"), "configuration": {"returnImmediately": True}}),
    "SendStreamingMessage": (Act.PUBLISH, lambda: {"message": a2a.message("hi")}),
    "GetTask": (Act.READ, lambda: {"id": str(uuid.uuid4())}),
    "CancelTask": (Act.READ, lambda: {"id": str(uuid.uuid4())}),
    "ListTasks": (Act.READ, lambda: {}),
    "SubscribeToTask": (Act.READ, lambda: {"id": str(uuid.uuid4())}),
    "GetExtendedAgentCard": (Act.READ, lambda: {}),
    "CreateTaskPushNotificationConfig": (Act.READ, lambda: {}),
    "GetTaskPushNotificationConfig": (Act.READ, lambda: {}),
    "ListTaskPushNotificationConfigs": (Act.READ, lambda: {}),
    "DeleteTaskPushNotificationConfig": (Act.READ, lambda: {}),
}  # fmt: skip
CARD = ".well-known/agent-card.json"


async def a2a_face(m: Matrix) -> None:
    methods = set(A2aGateway({}).methods)
    missing_rows = methods - set(A2A_METHODS)
    assert not missing_rows, f"A2A methods without a row in the matrix: {sorted(missing_rows)}"
    for identity in m.identities:
        # The hub's own card at the root: its skills are the A2A spaces the caller may read.
        got = await m.request("GET", f"/{CARD}", identity)
        want = expected(identity, Act.READ, OPEN)
        m.check(f"a2a {identity} GET /{CARD}", http_outcome(got[0]), want)
        if got[0] == 200:
            shown = {skill["id"] for skill in orjson.loads(got[1])["skills"]}
            may = {s for s in (OPEN, VAULT) if expected(identity, Act.READ, s) is Outcome.OK}
            m.check(f"a2a {identity} /{CARD} skills {sorted(shown)}", ok_if(shown == may),
                    Outcome.OK)  # fmt: skip
        for space in SPACES:
            for path, names in ((f"/a2a/{space}/{CARD}", (space,)),
                                (f"/a2a/{space}/keeper/{CARD}", (space, "keeper"))):  # fmt: skip
                if space == OPEN and "keeper" in names:
                    continue  # keeper is not in the open space
                got = await m.request("GET", path, identity)
                want = expected(identity, Act.READ, space)
                m.check(f"a2a {identity} GET {path}", http_outcome(got[0]), want)
                if want is Outcome.ABSENT and space != MISSING:
                    absent = path.replace(space, MISSING)
                    await same_as_absent(m, f"a2a {identity} {path}", got,
                                         m.request("GET", absent, identity),
                                         (space, MISSING))  # fmt: skip
            for method, (act, params) in A2A_METHODS.items():
                if method not in methods:
                    continue
                body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": params()}
                got = await a2a_post(m, f"/a2a/{space}", identity, body)
                want = expected(identity, act, space)
                m.check(f"a2a {identity} {method} {space}", http_outcome(got[0]), want)
                if want is Outcome.ABSENT and space != MISSING:
                    await same_as_absent(m, f"a2a {identity} {method}", got,
                                         a2a_post(m, f"/a2a/{MISSING}", identity, body),
                                         (space, MISSING))  # fmt: skip


async def a2a_post(m: Matrix, path: str, identity: str, body: Any) -> tuple[int, bytes]:
    headers = {**m.headers(identity), **a2a.HEADERS}
    async with m.http.post(m.server.http_url + path, json=body, headers=headers) as resp:
        if resp.content_type == "text/event-stream":
            first = await resp.content.readline()  # the task: it was accepted
            return resp.status, first
        return resp.status, await resp.read()


# HTTP Agora -------------------------------------------------------------------------


async def agora_face(m: Matrix) -> None:
    conversation = "c" * 32
    for identity in m.identities:
        for space in SPACES:
            rows = (
                ("POST", f"/agora/{space}", Act.PUBLISH, {"json": {"body": "hi"}}),
                ("GET", f"/agora/{space}/wellknown", Act.READ, {}),
                ("DELETE", f"/agora/{space}/conversations/{conversation}", Act.PUBLISH, {}),
                ("GET", f"/agora/{space}", Act.READ, {}),  # 405 where it is served
            )
            for method, path, act, kwargs in rows:
                got = await m.request(method, path, identity, **kwargs)
                want = expected(identity, act, space)
                m.check(f"agora {identity} {method} {path}", http_outcome(got[0]), want)
                if want is Outcome.ABSENT and space != MISSING:
                    absent = path.replace(space, MISSING)
                    await same_as_absent(
                        m, f"agora {identity} {method} {path}", got,
                        m.request(method, absent, identity, **kwargs),
                        (space, MISSING),
                    )  # fmt: skip


# Envelope routes ---------------------------------------------------------------------


def envelope_outcome(status: int, body: bytes) -> Outcome:
    """agora/1.0 has no 403: a known caller or signer that may not is a 401
    whose message says "may not"."""
    if status == 401 and b"may not" in body:
        return Outcome.FORBIDDEN
    return http_outcome(status)


async def envelope_face(m: Matrix) -> None:
    for identity in m.identities:
        signer = KEYS[identity] if identity in KEYS else KEYS["member"]
        for space in SPACES:
            rows = (  # each signed by the identity's own key, mapped to it
                ("/envelope", Act.PUBLISH, agora_env("STATUS", {"status": "x"}, signer)),
                ("/envelope", Act.READ, agora_env("HELLO", {"name": "x"}, signer)),
                ("/agentprotocol", Act.PUBLISH,
                 ap.build("notify", {"x": 1}, signing_key=signer, now=time.time())),
            )  # fmt: skip
            for route, act, envelope in rows:
                got = await m.request("POST", f"{route}/{space}", identity, json=envelope)
                want = expected(identity, act, space)
                kind = envelope.get("type")
                m.check(f"envelope {identity} {route} {kind} {space}",
                        envelope_outcome(*got), want)  # fmt: skip
                if want is Outcome.ABSENT and space != MISSING:
                    await same_as_absent(
                        m, f"envelope {identity} {route} {kind}",
                        (got[0], orjson.dumps(orjson.loads(got[1])["payload"])),
                        payload_of(m, f"{route}/{MISSING}", identity, envelope),
                        (space, MISSING),
                    )  # fmt: skip
    # A bearer who may publish, an envelope whose signer nobody mapped: refused.
    stranger = SigningKey(b"\x77" * 32)
    got = await m.request("POST", f"/envelope/{OPEN}", "member",
                          json=agora_env("STATUS", {"status": "x"}, stranger))  # fmt: skip
    m.check("envelope unmapped signer", envelope_outcome(*got), Outcome.FORBIDDEN)


async def payload_of(m: Matrix, path: str, identity: str, envelope: Any) -> tuple[int, bytes]:
    status, raw = await m.request("POST", path, identity, json=envelope)
    return status, orjson.dumps(orjson.loads(raw)["payload"])


# ── every face has its rows ────────────────────────────────────────────────────

#: Routes of the HTTP port that are faces, by the matrix part that covers them.
FACE_ROUTES = {
    "/mcp": "mcp",
    "/a2a/{space}": "a2a", "/a2a/{space}/{agent_id}": "a2a",
    f"/a2a/{{space}}/{CARD}": "a2a", f"/a2a/{{space}}/{{agent_id}}/{CARD}": "a2a",
    f"/{CARD}": "a2a",
    "/agora/{space}": "agora", "/agora/{space}/conversations/{id}": "agora",
    "/agora/{space}/wellknown": "agora", "/agora{tail}": "agora",
    "/envelope/{space}": "envelope", "/agentprotocol/{space}": "envelope",
    "/agentprotocol": "envelope",
    "/api": "operator",
    "/admin": "operator", "/admin/": "operator", "/admin/login": "operator",
    "/admin/logout": "operator", "/admin/state": "operator",
    "/admin/agents/{agent_id}/disconnect": "operator",
}  # fmt: skip
#: Routes that are not faces: no space, no caller's identity.
#: (``/ws`` there only says which port serves WebSockets.)
NOT_FACES = {"/healthz", "/readyz", "/metrics", "/identity", "/admin/static/{name}", "/ws"}

FACES: dict[str, Callable[[Matrix], Awaitable[None]]] = {
    "websocket": websocket_face,
    "operator": operator_faces,
    "mcp": mcp_face,
    "a2a": a2a_face,
    "agora": agora_face,
    "envelope": envelope_face,
}


async def test_every_face_every_identity_every_space(matrix: Matrix) -> None:
    unlisted = set(CLIENT_MODELS) - set(WS_ROWS)
    assert not unlisted, f"WebSocket messages without a row in the matrix: {sorted(unlisted)}"
    routes = {r.canonical for r in matrix.server.node.http_app.router.resources()}
    uncovered = routes - set(FACE_ROUTES) - NOT_FACES
    assert not uncovered, f"HTTP routes without a row in the matrix: {sorted(uncovered)}"
    for face in FACES.values():
        await face(matrix)
    assert not matrix.failures, "\n".join(matrix.failures)
    assert matrix.cases > 400, matrix.cases
