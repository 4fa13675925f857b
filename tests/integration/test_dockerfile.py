"""The install paths replayed for real: the Dockerfile's steps, and the systemd install script.

No container engine runs here, so the Dockerfile is checked by doing what it
says in a virtual environment:

* the Python of its base image (``FROM python:3.11-slim``: the same minor
  version, found on this machine);
* a build context holding only what its COPY lines copy, so a file the build
  needs but does not copy breaks the install;
* its RUN command, as written, in its WORKDIR; ``/install`` is the virtual
  environment, since the image copies ``/install`` over the base image's
  Python prefix (``COPY --from=build /install /usr/local``);
* its ENTRYPOINT + CMD with its ENV, ports published as ``docker run -p``
  would (AGORA_HUB_HOST 127.0.0.1, free ports for the EXPOSEd ones): the hub
  starts and ``/healthz`` answers on each port the hub has;
* its HEALTHCHECK command succeeds, and its STOPSIGNAL stops the hub with
  status 0.

Not checked: the base image and its OS packages, the ``useradd`` step and
USER (the hub runs as the test's user), the read-only layers, Docker's own
parsing of the file. The virtual environment is kept between runs (keyed by
the Dockerfile, pyproject.toml and the Python version) with its dependencies
installed; the RUN command reinstalls the project itself every time.
"""

from __future__ import annotations

import contextlib
import fcntl
import fnmatch
import hashlib
import json
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from hub.config.settings import Settings
from tests.support.servers import ROOT, free_port

DOCKERFILE = ROOT / "deploy" / "Dockerfile"
SYSTEMD = ROOT / "deploy" / "systemd"
HAS_HTTP_PORT = "http_port" in Settings.model_fields


@dataclass
class Stage:
    base: str
    name: str | None = None
    steps: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.steps if kw == keyword]

    def last(self, keyword: str) -> str:
        found = self.all(keyword)
        assert found, f"no {keyword} in the stage FROM {self.base}"
        return found[-1]


def parse_dockerfile(text: str) -> list[Stage]:
    """Stages of instructions (keyword upper-case, arguments as written)."""
    text = re.sub(r"\\\n", " ", text)  # line continuations
    stages: list[Stage] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, args = line.partition(" ")
        keyword, args = keyword.upper(), args.strip()
        if keyword == "FROM":
            base, _, name = args.partition(" AS ")
            stages.append(Stage(base.strip(), name.strip() or None))
        else:
            stages[-1].steps.append((keyword, args))
    return stages


def exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list), f"not the exec (JSON) form: {args}"
    return value


def env_pairs(args: str) -> dict[str, str]:
    return dict(pair.split("=", 1) for pair in shlex.split(args))


def python_for(base: str) -> str:
    match = re.match(r"python:(\d+)\.(\d+)", base)
    assert match, f"base image {base} is not an official python image"
    version = (int(match.group(1)), int(match.group(2)))
    if sys.version_info[:2] == version:
        return sys.executable
    found = shutil.which(f"python{version[0]}.{version[1]}")
    if found is None:
        from tests.conftest import IN_CI

        message = f"Python {version[0]}.{version[1]} (the image's) is not installed here"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    return found


def copy_context(stage: Stage, dest: Path) -> None:
    """The build stage's COPY lines, from the repository root into ``dest`` (its WORKDIR)."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for args in stage.all("COPY"):
        *sources, target = shlex.split(args)
        assert not any(s.startswith("--") for s in sources), f"unexpected COPY option: {args}"
        for source in sources:
            src = ROOT / source
            to = dest / target / src.name if target.endswith("/") else dest / target
            if src.is_dir():
                shutil.copytree(src, to, ignore=ignore)
            else:
                to.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, to)


def project_packages() -> list[str]:
    """The checkout's top-level packages that pyproject.toml's package find includes."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    include = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    return sorted(
        p.parent.name
        for p in ROOT.glob("*/__init__.py")
        if any(fnmatch.fnmatch(p.parent.name, pattern) for pattern in include)
    )


@contextlib.contextmanager
def cached_venv(python: str) -> Iterator[Path]:
    """A virtual environment kept between runs, used by one test run at a time."""
    key = hashlib.sha256()
    for path in (DOCKERFILE, ROOT / "pyproject.toml", ROOT / "clients/python/pyproject.toml"):
        key.update(path.read_bytes())
    key.update(subprocess.check_output([python, "-VV"]))
    venv = Path(tempfile.gettempdir()) / f"agora-hub-image-{key.hexdigest()[:16]}"
    with open(f"{venv}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (venv / "bin" / "python").exists():
            shutil.rmtree(venv, ignore_errors=True)
            subprocess.run([python, "-m", "venv", str(venv)], check=True)
        yield venv


def get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


@contextlib.contextmanager
def running(
    cmd: list[str], env: dict[str, str], health: str, log: Path
) -> Iterator[subprocess.Popen]:
    """``cmd`` started, until ``health`` answers 200; killed if the test did not stop it."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=log.parent)
    try:
        deadline = time.monotonic() + 30
        while get(health) != 200:
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"{cmd} did not serve {health}:\n{log.read_text(errors='replace')}")
            time.sleep(0.1)
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def base_env(bin_dir: Path, home: Path) -> dict[str, str]:
    # Only what a container would have: no AGORA_HUB_* from this machine.
    return {"PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8"}


@pytest.mark.packaging
def test_dockerfile_steps_build_an_image_that_serves(tmp_path):
    stages = parse_dockerfile(DOCKERFILE.read_text())
    build, final = stages[0], stages[-1]
    assert build.base == final.base, "build and runtime stages use the same Python"
    python = python_for(final.base)

    # The runtime stage takes the build's prefix as its Python prefix.
    copied = [shlex.split(a) for a in final.all("COPY")]
    assert copied == [[f"--from={build.name}", "/install", "/usr/local"]]

    workdir = tmp_path / build.last("WORKDIR").lstrip("/")
    workdir.mkdir(parents=True)
    copy_context(build, workdir)
    with cached_venv(python) as venv:
        env = base_env(venv / "bin", tmp_path)
        for command in build.all("RUN"):
            command = command.replace("/install", str(venv))
            result = subprocess.run(
                ["sh", "-c", command], cwd=workdir, env=env, capture_output=True, text=True
            )
            assert result.returncode == 0, f"RUN {command}\n{result.stdout}{result.stderr}"

        # Every package the project ships was copied into the build and installed,
        # and the client SDK the hub depends on for its client tools.
        packages = project_packages()
        assert packages, "no packages found in pyproject.toml"
        packages.append("agora_client.cli")
        imported = subprocess.run(
            [str(venv / "bin" / "python"), "-c", f"import {', '.join(packages)}"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
        )
        assert imported.returncode == 0, imported.stderr

        env.update({k: v for args in final.all("ENV") for k, v in env_pairs(args).items()})
        exposed = [int(p) for p in final.last("EXPOSE").split()]
        published = {port: free_port() for port in exposed}
        env["AGORA_HUB_HOST"] = "127.0.0.1"
        env["AGORA_HUB_PORT"] = str(published[int(env["AGORA_HUB_PORT"])])
        if "AGORA_HUB_HTTP_PORT" in env:
            env["AGORA_HUB_HTTP_PORT"] = str(published[int(env["AGORA_HUB_HTTP_PORT"])])
        cmd = exec_form(final.last("ENTRYPOINT")) + exec_form(final.last("CMD"))
        cmd[0] = shutil.which(cmd[0], path=env["PATH"]) or cmd[0]
        health = f"http://127.0.0.1:{env['AGORA_HUB_PORT']}/healthz"
        with running(cmd, env, health, tmp_path / "hub.log") as hub:
            if HAS_HTTP_PORT:
                assert get(f"http://127.0.0.1:{env['AGORA_HUB_HTTP_PORT']}/healthz") == 200

            check = final.last("HEALTHCHECK")
            probe = exec_form(check[check.index("CMD") + 3 :].strip())
            result = subprocess.run(probe, env=env, capture_output=True, text=True, timeout=30)
            assert result.returncode == 0, f"HEALTHCHECK failed: {result.stderr}"

            hub.send_signal(getattr(signal, final.last("STOPSIGNAL")))
            assert hub.wait(30) == 0, (tmp_path / "hub.log").read_text(errors="replace")


@pytest.mark.timeout(360)  # a venv and two pip installs: minutes on a busy machine
@pytest.mark.packaging
def test_systemd_install_script_stages_a_working_install(tmp_path):
    """install.sh with DESTDIR: venv, config and unit in place, and the staged hub serves."""
    build = parse_dockerfile(DOCKERFILE.read_text())[0]
    source = tmp_path / "src"
    copy_context(build, source)  # what a checkout holds, without its build leftovers
    stage = tmp_path / "stage"
    env = {**base_env(Path(sys.executable).parent, tmp_path), "DESTDIR": str(stage)}
    env["PYTHON"] = python_for(build.base)
    result = subprocess.run(
        ["sh", str(SYSTEMD / "install.sh"), str(source)], env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr

    confdir = stage / "etc" / "agora-hub"
    assert stat.S_IMODE(confdir.stat().st_mode) == 0o750
    for name in ("hub.toml", "env", "tokens.json"):
        assert stat.S_IMODE((confdir / name).stat().st_mode) == 0o640, name
        assert (confdir / name).read_bytes() == (SYSTEMD / name).read_bytes()
    unit = stage / "etc" / "systemd" / "system" / "agora-hub.service"
    assert unit.read_bytes() == (SYSTEMD / "agora-hub.service").read_bytes()

    exec_start = re.search(r"^ExecStart=(.*)$", unit.read_text(), re.M).group(1).split()
    binary = stage / exec_start[0].lstrip("/")
    port = free_port()
    args = [a.replace("/etc/agora-hub", str(confdir)) for a in exec_start[1:]]
    cmd = [str(binary), *args, "--port", str(port)]
    cmd += ["--auth-tokens-file", str(confdir / "tokens.json")]  # the config names /etc/…
    if HAS_HTTP_PORT:
        cmd += ["--http-port", str(free_port())]
    hub_env = base_env(binary.parent, tmp_path)
    with running(cmd, hub_env, f"http://127.0.0.1:{port}/healthz", tmp_path / "hub.log") as hub:
        hub.send_signal(signal.SIGTERM)
        assert hub.wait(30) == 0


def test_dockerfile_parser_reads_the_instructions():
    stages = parse_dockerfile(
        "FROM python:3.11-slim AS build\nWORKDIR /src\nRUN a \\\n  b\n"
        'FROM python:3.11-slim\nENV A=1 \\\n    B="x y"\nCMD ["serve"]\n'
    )
    assert [(s.base, s.name) for s in stages] == [
        ("python:3.11-slim", "build"),
        ("python:3.11-slim", None),
    ]
    assert stages[0].all("RUN") == ["a    b"]
    assert env_pairs(stages[1].last("ENV")) == {"A": "1", "B": "x y"}
    assert exec_form(stages[1].last("CMD")) == ["serve"]
    with pytest.raises(AssertionError):
        exec_form('"serve"')
