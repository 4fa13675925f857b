"""HTTP Agora bridge (contract §9): inbound routes and outbound agents."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hub.settings import Settings
    from hub.virtual import Adapter


def adapters_for(settings: Settings) -> list[Adapter]:
    return []
