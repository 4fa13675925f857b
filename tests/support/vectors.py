"""The shared test vectors: ``$AGORA_SHARED_DIR/vectors``, else the nearest
``shared/vectors`` beside the repository or one of its parent directories
(or beside the local checkout it was cloned from).

A test module that needs them calls :func:`vectors_dir` at import time (or
:func:`load_vector`). When they are missing the module is skipped locally,
but under CI (``CI=true``) that is an error: vector tests must never silently
not run.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
REPO_ROOT = REPO
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def shared_dir() -> Path:
    env = os.environ.get("AGORA_SHARED_DIR")
    if env:
        return Path(env)
    for root in (REPO, *_origin()):
        for parent in root.parents:
            candidate = parent / "shared"
            if (candidate / "vectors").is_dir():
                return candidate
    return REPO.parent / "shared"


def _origin() -> list[Path]:
    """The checkout this one was cloned from, when it is a local directory (a
    fresh clone in a scratch directory still finds the vectors beside it)."""
    try:
        url = subprocess.run(
            ["git", "-C", str(REPO), "config", "--get", "remote.origin.url"],
            capture_output=True, text=True, timeout=10, check=False,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return []
    path = Path(url.removeprefix("file://"))
    return [path.resolve()] if url and path.is_absolute() and path.is_dir() else []


def vectors_dir(name: str) -> Path:
    """``vectors/<name>``, or skip (fail under CI) the calling module."""
    path = shared_dir() / "vectors" / name
    if not path.is_dir():
        message = f"test vectors not found at {path} (set AGORA_SHARED_DIR)"
        if IN_CI:
            pytest.fail(message, pytrace=False)
        pytest.skip(message, allow_module_level=True)
    return path


def cases(root: Path) -> list[Path]:
    """The vector folders under ``root``, sorted; fails when there are none."""
    found = sorted(p for p in root.iterdir() if p.is_dir())
    if not found:
        pytest.fail(f"no vector folders in {root}", pytrace=False)
    return found


def load_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def load_vector(name: str, filename: str) -> Any:
    """``vectors/<name>/<filename>`` parsed as JSON."""
    return load_json(vectors_dir(name) / filename)
