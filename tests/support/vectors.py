"""Where the shared test vectors live.

``AGORA_SHARED_DIR`` if set, else ``shared/`` next to the repository. Missing vectors
skip a test on a developer machine but fail it under ``CI=true``: CI must never pass
because the vectors were not there.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def shared_dir() -> Path:
    configured = os.environ.get("AGORA_SHARED_DIR")
    return Path(configured) if configured else REPO_ROOT.parent / "shared"


def vectors_dir(name: str) -> Path:
    """``shared/vectors/<name>``, or skip (fail under CI) when it is missing."""
    path = shared_dir() / "vectors" / name
    if not path.is_dir():
        reason = f"test vectors {path} not found (set AGORA_SHARED_DIR)"
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)
    return path


def load_json(name: str, filename: str) -> Any:
    return json.loads((vectors_dir(name) / filename).read_text(encoding="utf-8"))
