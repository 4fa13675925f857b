"""When a stream's receivers stop, its producer hears of it, on whatever node (contract §19).

A receiver stops by cancelling its copy of a stream or by leaving the stream's
space (a leave, a disconnect, its node's death). Once every receiver of a
client stream has stopped, the hub ends the stream and its producer gets one
``space.event.cancel`` with its own ``event_id``, ``from`` the receiver whose
stop ended the audience and ``reason`` how it stopped (``receiver_cancelled``
or ``receivers_left``); the producer's session takes it from there
(:mod:`hub.core.publisher_streams`: deltas in flight are dropped, not refused).

Who knows what:

- a receiver's node knows its own receivers of each relayed stream
  (:mod:`hub.core.stream_audiences`), and its registry reports each receiver
  of an addressed stream that stops, and the last local receiver of an
  unaddressed one (:meth:`StreamStops.stopped`);
- the producer's node knows the producer's open streams and, of an addressed
  one, its recipients: it counts them off as their stops arrive;
- nobody knows who got the first frame of an unaddressed stream on the other
  nodes, so the producer's node asks them: a **census** on the space's
  channel, which every node subscribed to the space answers with how many of
  its members still receive the stream. The backplane says how many nodes
  the question reached; when that many answered and all said none, nobody
  receives the stream. A node that does not answer within
  :data:`CENSUS_TIMEOUT` leaves the question open: the producer is not told
  (a receiver may still be reading there); the next stop asks again.

Between nodes these travel as *signals*: unsequenced messages on the space's
channel (``op`` :attr:`~hub.core.stream_audiences.StreamOp.SIGNAL`), never
delivered to members and never in history, and the census answers as node
messages (``census_result``)::

    {"op": "stopped", "stream": S, "receiver": A, "left": false}
    {"op": "census", "stream": S, "token": T, "reply_to": NODE}
    {"op": "departed", "agents": [A, ...]}     the reaper, for a dead node's agents
    {"op": "census_result", "token": T, "receivers": N}     (node message)

A stop whose producer is on the same node needs no signal. Nothing here runs
per frame: a stream nobody stops costs nothing. Everything is best effort:
when the backplane is down the producer is simply not told (its stream still
ends by its done, its cancel or the idle timeout).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from hub.cluster.backplane import Broker, Delivery, StreamOp
from hub.core.peer import Peer, PeerKind
from hub.core.publisher_streams import Heard, Unheard
from hub.core.registry import Registry
from hub.core.stream_audiences import ReceiverStop
from hub.errors import BackplaneUnavailable
from hub.handlers.publishing import Publishing
from protocol import codec

#: Seconds the producer's node waits for every node's census answer.
CENSUS_TIMEOUT = 2.0


class _Census:
    """Answers to one census: done when the nodes it reached have all
    answered none (True), or as soon as one answers some (False)."""

    __slots__ = ("answered", "expected", "result")

    def __init__(self) -> None:
        self.answered = 0
        self.expected: int | None = None
        self.result: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

    def answer(self, receivers: int) -> None:
        self.answered += 1
        if receivers > 0:
            self._settle(False)
        self._check()

    def expect(self, reached: int) -> None:
        self.expected = reached
        self._check()

    def _check(self) -> None:
        if self.expected is not None and self.answered >= self.expected:
            self._settle(True)

    def _settle(self, nobody: bool) -> None:
        if not self.result.done():
            self.result.set_result(nobody)


class StreamStops:
    """The node's part in telling producers that nobody listens any more."""

    def __init__(
        self,
        node_id: str,
        registry: Registry[Any],
        backplane: Broker,
        publishing: Publishing,
        *,
        filling: Callable[[str], bool] = lambda space: False,
        census_timeout: float = CENSUS_TIMEOUT,
    ):
        self.node_id = node_id
        self.registry = registry
        self.backplane = backplane
        self.publishing = publishing
        self.census_timeout = census_timeout
        #: Is the space's gap being filled from history (hub/handlers/gaps.py)?
        self._filling = filling
        self._censuses: dict[str, _Census] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    # ── a receiver of this node stopped ─────────────────────────────────

    def stopped(self, stop: ReceiverStop) -> None:
        """The registry's report (see :mod:`hub.core.stream_audiences`)."""
        peer = self.registry.agents.get(stop.publisher)
        if peer is not None:
            heard = self._heard(peer, stop.space, stop.stream_id, stop.receiver, stop.left)
            # An agent id is held on one node: its streams are here or nowhere.
            # A shared member (one per node) may publish it from another one.
            if heard or peer.kind is not PeerKind.SHARED:
                return
        signal = {"op": "stopped", "stream": stop.stream_id, "receiver": stop.receiver}
        self._spawn(self._signal(stop.space, {**signal, "left": stop.left}))

    async def departed(self, space: str, agents: list[str]) -> None:
        """A dead node's agents were reaped from ``space``: its members'
        producers count them as gone. BackplaneUnavailable propagates."""
        await self._signal(space, {"op": "departed", "agents": agents})

    # ── what other nodes say ────────────────────────────────────────────

    def on_signal(self, message: Delivery) -> None:
        """A signal from the space's channel (the node's delivery hands it here)."""
        try:
            signal = orjson.loads(message.frame)
            op = signal["op"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return
        space = message.space
        if op == "stopped":
            stream, receiver = str(signal.get("stream")), str(signal.get("receiver"))
            peer = self.registry.agents.get(stream.partition("/")[0])
            if peer is not None:
                self._heard(peer, space, stream, receiver, bool(signal.get("left")))
        elif op == "census":
            self._count(space, signal)
        elif op == "departed":
            agents = signal.get("agents")
            if isinstance(agents, list) and agents:
                self._departed(space, [str(a) for a in agents])

    def census_result(self, msg: dict[str, Any]) -> None:
        """A node's answer to a census of this node (a node message)."""
        census = self._censuses.get(str(msg.get("token")))
        receivers = msg.get("receivers")
        if census is not None and isinstance(receivers, int):
            census.answer(receivers)

    def _count(self, space: str, signal: dict[str, Any]) -> None:
        """Answer a census: how many of this node's members receive the stream.

        Not while the space's missed messages are being filled in: the
        stream's first frame may be among them, and an answer of none would
        be wrong. The census then stays open (the producer is not told)."""
        if self._filling(space):
            return
        token, reply_to = str(signal.get("token")), str(signal.get("reply_to"))
        receivers = self.registry.streams.receivers(str(signal.get("stream")))
        if reply_to == self.node_id:
            self.census_result({"token": token, "receivers": receivers})
            return
        answer = orjson.dumps({"op": "census_result", "token": token, "receivers": receivers})
        self._spawn(self.backplane.send_to_node(reply_to, answer))

    # ── the producer's node ─────────────────────────────────────────────

    def _heard(self, peer: Peer, space: str, stream_id: str, receiver: str, left: bool) -> bool:
        """``receiver`` stopped receiving ``stream_id``; False when ``peer``
        publishes no such open stream."""
        session = peer.session
        if session is None or peer.closing:
            return False
        heard = session.receiver_stopped(stream_id, receiver, left)
        if heard is Heard.NOBODY:
            self._end(peer, stream_id)
        elif heard is Heard.ASK:
            self._spawn(self._ask(peer, space, stream_id))
        return heard is not Heard.NOT_OPEN

    def _departed(self, space: str, agents: list[str]) -> None:
        for peer in self.registry.members(space):
            session = peer.session
            if session is None or not session.open_streams:
                continue
            for stream_id in session.streams_in(space):
                for agent in agents:
                    heard = session.receiver_stopped(stream_id, agent, True)
                    if heard is Heard.NOBODY:
                        self._end(peer, stream_id)
                    elif heard is Heard.ASK:
                        self._spawn(self._ask(peer, space, stream_id))
                    if heard is not Heard.HEARD:
                        break

    async def _ask(self, peer: Peer, space: str, stream_id: str) -> None:
        if await self._nobody_receives(space, stream_id):
            self._end(peer, stream_id)

    async def _nobody_receives(self, space: str, stream_id: str) -> bool:
        """The census: True when every node reached says none of its members
        receives ``stream_id``; False when one does, or did not answer in time."""
        token = secrets.token_hex(8)
        census = self._censuses[token] = _Census()
        question = {"op": "census", "stream": stream_id, "token": token, "reply_to": self.node_id}
        try:
            census.expect(await self._signal(space, question))
            async with asyncio.timeout(self.census_timeout):
                return await census.result
        except (TimeoutError, BackplaneUnavailable):
            return False
        finally:
            del self._censuses[token]

    def _end(self, peer: Peer, stream_id: str) -> None:
        """Nobody receives the stream: it ends, and its producer hears of it
        (``from`` the receiver last heard to stop: censuses may cross)."""
        session = peer.session
        if session is None or peer.closing:
            return
        unheard = session.receivers_gone(stream_id)
        if unheard is None:
            return  # it ended meanwhile (done, cancel, another stop's census)
        peer.send_frame(_notice(peer, unheard))
        self._spawn(self._relay(peer, unheard))

    async def _relay(self, peer: Peer, unheard: Unheard) -> None:
        with contextlib.suppress(BackplaneUnavailable):
            await self.publishing.end_unheard(peer, unheard.relayed())

    # ── helpers ─────────────────────────────────────────────────────────

    async def _signal(self, space: str, signal: dict[str, Any]) -> int:
        """Send ``signal`` on ``space``'s channel; how many nodes it reached."""
        return await self.backplane.send(Delivery(space, orjson.dumps(signal), op=StreamOp.SIGNAL))

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(_quietly(coro))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for census in self._censuses.values():
            census.result.cancel()


async def _quietly(work: Awaitable[Any]) -> None:
    """Best effort: a backplane that cannot take a signal loses it."""
    with contextlib.suppress(BackplaneUnavailable):
        await work


def _notice(peer: Peer, unheard: Unheard) -> bytes:
    """The producer's notice. The hub's own bridges (virtual members) still
    get the hub-side id that adapters/a2a/outbound.py matches its reply
    streams by; every agent's connection gets its own id (contract §19)."""
    if peer.kind in (PeerKind.VIRTUAL, PeerKind.SHARED):
        return codec.receivers_gone(
            unheard.space, unheard.stream_id, unheard.receiver, unheard.reason
        )
    return unheard.notice()
