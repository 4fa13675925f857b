"""Runs the real ``agora-protocol`` 0.2.0 library; executed by the library's own venv.

    python driver.py sender   < spec.json   → one JSON object on stdout
    python driver.py receiver < spec.json   → JSON lines on stdout: "listening", then
                                              one line per call into the stub receiver

Only the library and the standard library are importable here (not the project).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from typing import Any

_out_lock = threading.Lock()


def emit(obj: dict[str, Any]) -> None:
    with _out_lock:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()


# ── sender ──────────────────────────────────────────────────────────────────


def run_sender(spec: dict[str, Any]) -> dict[str, Any]:
    import requests
    from agora.sender.components.transporter import SimpleSenderTransporter
    from agora.utils import compute_hash, encode_as_data_uri

    document = spec.get("document")
    protocol_hash = spec.get("protocol_hash")
    protocol_sources = spec.get("protocol_sources")
    if document is not None:
        protocol_hash = protocol_hash or compute_hash(document)
        protocol_sources = (
            protocol_sources if protocol_sources is not None else [encode_as_data_uri(document)]
        )
    if protocol_sources is None:
        protocol_sources = []

    # The transporter calls requests.post / requests.delete; wrapping them records what
    # went over the wire and what came back without changing what the library does.
    http: list[dict[str, Any]] = []

    def recorded(method: str, real: Any) -> Any:
        def call(url: str, *args: Any, **kwargs: Any) -> Any:
            entry: dict[str, Any] = {"method": method, "url": url, "json": kwargs.get("json")}
            http.append(entry)
            try:
                response = real(url, *args, **kwargs)
            except Exception as exc:
                entry["exception"] = repr(exc)
                raise
            entry["status"] = response.status_code
            entry["content_type"] = response.headers.get("Content-Type")
            entry["text"] = response.text
            return response

        return call

    requests.post = recorded("POST", requests.post)
    requests.delete = recorded("DELETE", requests.delete)

    conversation = SimpleSenderTransporter().new_conversation(
        spec["url"], bool(spec.get("multiround")), protocol_hash, protocol_sources
    )
    turns: list[dict[str, Any]] = []
    for message in spec.get("messages", []):
        try:
            turns.append({"message": message, "reply": conversation(message), "error": None})
        except Exception as exc:
            turns.append({"message": message, "reply": None, "error": _describe(exc)})
            break  # the library's conversation state is undefined after a failed call
    closed: dict[str, Any] | None = None
    if spec.get("close"):
        try:
            conversation.close()
            closed = {"error": None}
        except Exception as exc:
            closed = {"error": _describe(exc)}
    return {
        "protocol_hash": protocol_hash,
        "protocol_sources": protocol_sources,
        "conversation_id": conversation._conversation_id,
        "turns": turns,
        "close": closed,
        "http": http,
    }


def _describe(exc: BaseException) -> dict[str, str]:
    return {"type": type(exc).__name__, "message": str(exc)}


# ── receiver ────────────────────────────────────────────────────────────────


class StubReceiver:
    """What ``ReceiverServer`` needs from a ``Receiver``, with canned answers, no LLM.

    Protocol checks reuse the library's own ``download_and_verify_protocol`` on
    ``data:`` sources (never on URLs: no network), so hashes are judged as the real
    ``Receiver`` judges them.
    """

    def __init__(self, spec: dict[str, Any]):
        self.answers: dict[str, Any] = spec.get("answers") or {}
        self.raise_on: dict[str, str] = spec.get("raise_on") or {}
        self.reject = set(spec.get("reject_hashes") or [])
        self.known = set(spec.get("known_hashes") or [])
        self.verify_sources = spec.get("verify_sources", True)
        self.count = 0
        self.lock = threading.Lock()

    def create_conversation(self, protocol_hash: Any, protocol_sources: Any) -> Any:
        from agora.common.errors import ProtocolRejectedError, ProtocolRetrievalError
        from agora.utils import download_and_verify_protocol

        with self.lock:
            self.count += 1
            number = self.count
        emit(
            {
                "event": "conversation",
                "conversation": number,
                "protocolHash": protocol_hash,
                "protocolSources": protocol_sources,
            }
        )
        if protocol_hash in self.reject:
            raise ProtocolRejectedError("Protocol rejected by stub")
        if protocol_hash is not None and protocol_hash not in self.known and self.verify_sources:
            documents = [
                download_and_verify_protocol(protocol_hash, source)
                for source in protocol_sources
                if isinstance(source, str) and source.startswith("data:")
            ]
            if not any(doc is not None for doc in documents):
                raise ProtocolRetrievalError("Failed to download protocol")
        return lambda body: self.answer(number, body)

    def answer(self, conversation: int, body: Any) -> Any:
        emit({"event": "message", "conversation": conversation, "body": body})
        key = body if isinstance(body, str) else json.dumps(body, sort_keys=True)
        if key in self.raise_on:
            raise RuntimeError(self.raise_on[key])
        if key in self.answers:
            return self.answers[key]
        return "echo:" + body if isinstance(body, str) else {"echo": body}


def run_receiver(spec: dict[str, Any]) -> None:
    from agora.receiver.server import ReceiverServer
    from werkzeug.serving import make_server

    server = ReceiverServer(StubReceiver(spec))
    # ReceiverServer.run() is Flask's app.run(); serving the same app with werkzeug's
    # make_server gives port 0 and a clean stop.
    http = make_server(
        spec.get("host", "127.0.0.1"), spec.get("port", 0), server.app, threaded=True
    )

    def stop(_signum: int, _frame: Any) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    emit({"event": "listening", "port": http.server_port})
    try:
        http.serve_forever()
    finally:
        http.server_close()
        sys.stdout.flush()
        # ReceiverServer arms a 300 s non-daemon Timer per multiround conversation;
        # exiting normally would wait for them.
        os._exit(0)


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    spec = json.loads(sys.stdin.read())
    if mode == "sender":
        emit(run_sender(spec))
    elif mode == "receiver":
        run_receiver(spec)
    else:
        sys.exit(f"usage: {sys.argv[0]} sender|receiver < spec.json")


if __name__ == "__main__":
    main()
