"""A cached virtual environment for a real peer library the project must not depend on.

Interop tests run the reference implementation of a protocol (``a2a-sdk``…)
as a subprocess of its own venv, built once under ``~/.cache/agora-hub-tests/``
(or ``$AGORA_PEER_CACHE``) and reused: :meth:`PeerVenv.python` builds it
under a file lock, so concurrent test runs build it once, and a half-built one
from a killed run is built again. :meth:`PeerVenv.require` is what a fixture
calls: it skips when the packages cannot be installed, except under
``CI=true`` where that is a failure. :mod:`tests.support.peer_driver` runs
the peers' driver scripts with the venv's Python.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
_MARKER = ".peer-ready"


class PeerUnavailable(Exception):
    """The packages could not be installed (no index, no network …)."""


class PeerVenv:
    def __init__(
        self, name: str, requirements: Sequence[str], check: str, *, marker: str = _MARKER
    ):
        """``name`` names the cache directory; ``check`` is Python code that
        must run in the venv once the ``requirements`` are installed; the file
        ``marker`` in the venv says it was built completely (a peer whose
        caches exist keeps its name for it, so they are not built again)."""
        self.name = name
        self.requirements = list(requirements)
        self.check = check
        self.marker = marker

    @property
    def path(self) -> Path:
        configured = os.environ.get("AGORA_PEER_CACHE")
        base = Path(configured) if configured else (
            Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "agora-hub-tests"
        )  # fmt: skip
        tag = f"py{sys.version_info.major}{sys.version_info.minor}"
        return base / f"{self.name}-{tag}"

    def python(self, timeout: float = 900) -> Path:
        """The venv's Python, building the venv first if needed."""
        venv = self.path
        python = venv / "bin" / "python"
        venv.parent.mkdir(parents=True, exist_ok=True)
        with open(venv.parent / f"{venv.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if (venv / self.marker).is_file() and python.exists():
                return python
            shutil.rmtree(venv, ignore_errors=True)  # a half-built venv from a killed run
            self._build(venv, python, timeout)
        return python

    def _build(self, venv: Path, python: Path, timeout: float) -> None:
        steps = [
            [sys.executable, "-m", "venv", str(venv)],
            [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
             "--quiet", *self.requirements],
            [str(python), "-c", self.check],
        ]  # fmt: skip
        for step in steps:
            try:
                done = subprocess.run(step, capture_output=True, text=True, timeout=timeout)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise PeerUnavailable(f"{self.requirements}: {exc}") from None
            if done.returncode != 0:
                tail = (done.stderr or done.stdout).strip()[-2000:]
                raise PeerUnavailable(f"{self.requirements} could not be installed:\n{tail}")
        freeze = subprocess.run(
            [str(python), "-m", "pip", "freeze"], capture_output=True, text=True, timeout=timeout
        ).stdout
        (venv / self.marker).write_text(json.dumps({"requirements": self.requirements,
                                                "freeze": freeze.split()}))  # fmt: skip

    def require(self) -> Path:
        """The venv's Python, or skip the test (fail it under ``CI=true``)."""
        try:
            return self.python()
        except PeerUnavailable as exc:
            if IN_CI:
                pytest.fail(f"CI must run the interop tests: {exc}")
            pytest.skip(str(exc))


def peer_env() -> dict[str, str]:
    """The environment of a peer subprocess: none of this project's Python
    paths, no proxies for loopback, unbuffered output."""
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME"}}
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost,::1"
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONWARNINGS"] = "ignore"
    return env
