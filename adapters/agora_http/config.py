"""``[[bridges.agora_http]]``: an HTTP Agora agent elsewhere, a member here."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from adapters.config import BridgeConfig


class AgoraHttpBridge(BridgeConfig):
    """One outbound HTTP Agora agent: ``space``, ``agent_id``, ``url`` and an
    optional Protocol Document and answer timeout."""

    protocol_document: Path | None = None
    timeout: float | None = Field(default=None, gt=0)
