"""Two agents negotiate a task through a signed space: REQUEST → OFFER → ACCEPT → RESULT.

A buyer and a seller, each with its own Ed25519 key, trade agora/1.0
envelopes in the space ``bazaar``, which the hub declares
``require_signed = true``: the hub verifies every envelope before anyone
sees it, so each side trusts ``event.verified`` and ``event.signer``
without checking signatures itself. The buyer follows the task's state with
the same lifecycle table the hub uses. At the end it shows that the hub
refuses a replayed envelope and anything unsigned.

Run it::

    python examples/negotiation.py
        # starts a hub in this process (the space declared) and runs both agents

    python examples/negotiation.py --url ws://127.0.0.1:8765/ws
        # against your hub, whose config declares the space:
        #   [[spaces]]
        #   id = "bazaar"
        #   require_signed = true
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

from nacl.signing import SigningKey

from agora_client import Client, HubRejected, run
from protocol.envelope import TaskTable, agora
from protocol.identity import did_key

SPACE = "bazaar"


def envelope(kind: str, payload: dict[str, Any], key: SigningKey) -> dict[str, Any]:
    """A new agora/1.0 envelope from ``key``, signed now."""
    return agora.build(kind, payload, signing_key=key, now=time.time())


async def seller(url: str, key: SigningKey, ready: asyncio.Event) -> None:
    """Offers a price for each REQUEST; delivers once the offer is accepted."""
    async with Client(url, "seller") as c:
        await c.join(SPACE)
        events = c.events(SPACE)
        ready.set()
        offered: dict[str, dict[str, Any]] = {}  # offer id → the request
        async for event in events:
            if event.sender == "seller" or not event.verified:
                continue
            env = event.data
            if env["type"] == "REQUEST":
                offer = envelope(
                    "OFFER", {"request_id": env["id"], "cost": 3, "ttl": 30_000, "eta": 500}, key
                )
                offered[offer["id"]] = env
                await c.publish(SPACE, offer)
            elif env["type"] == "ACCEPT" and env["payload"]["offer_id"] in offered:
                request = offered.pop(env["payload"]["offer_id"])
                text = request["payload"]["params"]["text"]
                payload = {"request_id": request["id"], "status": "success", "data": text.upper()}
                await c.publish(SPACE, envelope("RESULT", payload, key))
                return


async def buyer(url: str, key: SigningKey, log: list[str]) -> dict[str, Any]:
    """Asks for a task, accepts the first offer within budget, returns the RESULT."""
    async with Client(url, "buyer") as c:
        await c.join(SPACE)
        events = c.events(SPACE)
        table = TaskTable(default_timeout=30)
        request = envelope(
            "REQUEST",
            {
                "resource": "shout:v1",
                "params": {"text": "hello, signed world"},
                "budget": {"max": 5},
                "timeout": 30_000,
            },
            key,
        )
        await c.publish(SPACE, request)
        task = table.apply("REQUEST", request["payload"], time.time(), envelope_id=request["id"])
        assert task is not None
        log.append(f"buyer   REQUEST {request['id'][:8]}  task {task.state}")
        async for event in events:
            if event.sender == "buyer":
                continue
            if not event.verified:  # never true in a require_signed space
                continue
            env = event.data
            table.apply(env["type"], env["payload"], time.time(), envelope_id=env["id"])
            who = f"{event.sender:<7} {env['type']:<7} from {event.signer[:20]}…"
            log.append(f"{who}  task {task.state}")
            if env["type"] == "OFFER" and env["payload"]["cost"] <= 5:
                accept = envelope("ACCEPT", {"offer_id": env["id"]}, key)
                await c.publish(SPACE, accept)
                table.apply("ACCEPT", accept["payload"], time.time(), envelope_id=accept["id"])
                log.append(f"buyer   ACCEPT  {env['id'][:8]}  task {task.state}")
            if task.done:
                await show_refusals(c, env, log)
                return env
        raise RuntimeError("the space closed before the task finished")


async def show_refusals(c: Client, result: dict[str, Any], log: list[str]) -> None:
    """The hub refuses a replayed envelope and unsigned data in this space."""
    for what, data in (("replayed RESULT", result), ("unsigned text", {"text": "trust me"})):
        try:
            await c.publish(SPACE, data)
            log.append(f"hub     accepted the {what}?!")
        except HubRejected as exc:
            log.append(f"hub     refused the {what}: {exc.code}")


async def negotiate(url: str) -> tuple[dict[str, Any], list[str]]:
    """Run both agents against the hub at ``url``; the RESULT and a transcript."""
    buyer_key, seller_key = SigningKey.generate(), SigningKey.generate()
    log = [f"seller's key {did_key(bytes(seller_key.verify_key))}"]
    ready = asyncio.Event()
    selling = asyncio.create_task(seller(url, seller_key, ready))
    await asyncio.wait_for(ready.wait(), 10)
    result = await asyncio.wait_for(buyer(url, buyer_key, log), 30)
    await asyncio.wait_for(selling, 10)
    return result, log


async def main(url: str | None) -> int:
    server = None
    if url is None:
        from hub.ops.logging import configure_logging
        from hub.node.node import Node
        from hub.process.server import HubServer
        from hub.config.settings import load_settings

        settings = load_settings(
            {
                "port": 0,
                "http_port": 0,
                "log_level": "warning",
                "spaces": [{"id": SPACE, "require_signed": True}],
            }
        )
        configure_logging(settings.log_level, settings.log_format)
        server = HubServer(Node(settings))
        await server.start()
        url = server.url
    try:
        result, log = await negotiate(url)
    finally:
        if server is not None:
            await server.aclose()
    print("\n".join(log))
    print(f"result: {result['payload']['status']}: {result['payload']['data']}")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a hub's WebSocket URL (default: start one here)")
    sys.exit(run(main(parser.parse_args().url)))
