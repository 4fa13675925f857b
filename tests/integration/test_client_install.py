"""``pip install ./clients/python`` in a clean virtual environment: the client SDK alone.

The SDK is its own distribution (``agora-hub-client``) and must install and run
with websockets and orjson only — no pydantic, nothing of the server. This
does what a user would: a fresh virtual environment (kept between runs, keyed
by the client's pyproject.toml and the Python version, so the dependencies
come from PyPI once), ``pip install`` of a copy of ``clients/python`` (the
copy keeps build leftovers out of the checkout), then ``pip check``, the
import, and its ``agora-hub-client publish`` against a real hub.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests.support.servers import ROOT

CLIENT = ROOT / "clients" / "python"
RUNTIME = {"agora-hub-client", "websockets", "orjson"}
VENV_TOOLS = {"pip", "setuptools", "wheel"}

CHECK_IMPORTS = """
import sys
import agora_client, agora_client.cli
from agora_client import Client
server_side = sorted(
    m for m in sys.modules
    if m.split(".")[0] in ("hub", "protocol", "adapters", "pydantic", "aiohttp")
)
assert not server_side, server_side
assert agora_client.__file__.startswith(sys.prefix), agora_client.__file__
try:
    agora_client.HubAPI
except ImportError as exc:
    assert "agora-hub-client[api]" in str(exc), exc
else:
    raise AssertionError("HubAPI without aiohttp")
print(agora_client.__version__)
"""


@contextlib.contextmanager
def client_venv() -> Iterator[Path]:
    key = hashlib.sha256((CLIENT / "pyproject.toml").read_bytes())
    key.update(sys.version.encode())
    venv = Path(tempfile.gettempdir()) / f"agora-hub-client-{key.hexdigest()[:16]}"
    with open(f"{venv}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (venv / "bin" / "pip").exists():
            shutil.rmtree(venv, ignore_errors=True)
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        yield venv


def run(venv: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": f"{venv / 'bin'}:/usr/bin:/bin",
        "HOME": os.environ.get("HOME", str(cwd)),
        "LANG": "C.UTF-8",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.packaging
async def test_the_client_installs_alone_and_talks_to_a_hub(tmp_path, hub):
    source = tmp_path / "python"
    shutil.copytree(
        CLIENT, source, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    )
    with client_venv() as venv:
        python = str(venv / "bin" / "python")
        pip = (python, "-m", "pip")
        run(venv, *pip, "uninstall", "--quiet", "-y", "agora-hub-client", cwd=tmp_path)
        installed = run(venv, python, "-m", "pip", "install", "--quiet", str(source), cwd=tmp_path)
        assert installed.returncode == 0, installed.stdout + installed.stderr

        check = run(venv, python, "-m", "pip", "check", cwd=tmp_path)
        assert check.returncode == 0, check.stdout + check.stderr
        listed = run(venv, python, "-m", "pip", "list", "--format=json", cwd=tmp_path)
        names = {p["name"].lower() for p in json.loads(listed.stdout)}
        assert names - VENV_TOOLS == RUNTIME

        imported = run(venv, python, "-c", CHECK_IMPORTS, cwd=tmp_path)
        assert imported.returncode == 0, imported.stderr

        server = await hub()
        proc = await asyncio.create_subprocess_exec(
            str(venv / "bin" / "agora-hub-client"),
            *("publish", "general", "from a clean venv", "--url", server.url, "--json"),
            cwd=tmp_path,
            env={"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "LANG": "C.UTF-8"},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        async with asyncio.timeout(30):
            out, err = await proc.communicate()
        assert proc.returncode == 0, err.decode()
        published = orjson.loads(out)
        assert published["space"] == "general" and published["seq"] >= 1


@contextlib.contextmanager
def current_pip_venv() -> Iterator[Path]:
    """A venv with the newest pip, as ``make run`` makes one (kept between runs)."""
    tag = f"py{sys.version_info[0]}{sys.version_info[1]}"
    venv = Path(tempfile.gettempdir()) / f"agora-hub-pip-{tag}"
    with open(f"{venv}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (venv / ".pip-upgraded").exists():
            shutil.rmtree(venv, ignore_errors=True)
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            python = str(venv / "bin" / "python")
            upgraded = run(venv, python, "-m", "pip", "install", "-q", "--upgrade", "pip", cwd=venv)
            assert upgraded.returncode == 0, upgraded.stdout + upgraded.stderr
            (venv / ".pip-upgraded").touch()
        yield venv


@pytest.mark.packaging
def test_building_either_package_prints_no_warning_of_ours(tmp_path):
    """What ``make run`` shows a newcomer first is pip building the two
    pyproject files: neither may make setuptools warn (a ``project.license``
    table did, 30 lines per package). ``make run`` upgrades pip first, and only
    a recent pip shows what the build backend warns, so this does too."""
    with current_pip_venv() as venv:
        pip = (str(venv / "bin" / "python"), "-m", "pip")
        for source in (CLIENT, ROOT):
            built = run(
                venv,
                *(*pip, "install", "--dry-run", "--no-deps", "--quiet", str(source)),
                cwd=tmp_path,
            )
            assert built.returncode == 0, built.stdout + built.stderr
            assert "BuildBackendWarning" not in built.stderr, built.stderr
