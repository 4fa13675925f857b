"""``[[bridges.envelope]]``: a signed-envelope agent elsewhere, a member here."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from adapters.config import BridgeConfig


class EnvelopeBridge(BridgeConfig):
    """One outbound envelope peer: ``space``, ``agent_id``, ``url``, the
    envelope ``protocol`` it speaks and an optional answer timeout."""

    protocol: Literal["agora/1.0", "agentprotocol/0.1"]
    timeout: float | None = Field(default=None, gt=0)
