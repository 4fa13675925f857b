"""Deploy files can't be run here (no Docker engine, no cluster): check them
against the code instead — every setting, command and port they use exists."""

import re
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from hub.cli import build_parser
from hub.settings import Settings
from tests.support.proxies import find_binary

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
SETTINGS = {f"AGORA_HUB_{name.upper()}" for name in Settings.model_fields} | {"AGORA_HUB_CONFIG"}


def deploy_files():
    return [p for p in DEPLOY.rglob("*") if p.is_file()]


@pytest.mark.parametrize("path", deploy_files(), ids=lambda p: str(p.relative_to(DEPLOY)))
def test_every_env_var_is_a_real_setting(path):
    for var in re.findall(r"AGORA_HUB_[A-Z_]+", path.read_text()):
        assert var in SETTINGS, f"{path.name}: {var} is not a setting"


def test_yaml_files_parse_and_use_real_commands():
    parser = build_parser()
    for path in [*DEPLOY.rglob("*.yaml")]:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        assert docs, path
    k8s = list(yaml.safe_load_all((DEPLOY / "k8s" / "agora-hub.yaml").read_text()))
    deployment = next(d for d in k8s if d["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    parser.parse_args(container["args"])  # a real subcommand
    probes = {
        container["readinessProbe"]["httpGet"]["path"],
        container["livenessProbe"]["httpGet"]["path"],
    }
    assert probes == {"/readyz", "/healthz"}
    assert deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > 20


def test_systemd_unit_runs_a_real_command():
    unit = (DEPLOY / "systemd" / "agora-hub.service").read_text()
    exec_start = re.search(r"^ExecStart=(\S+) (.*)$", unit, re.M)
    assert exec_start and exec_start.group(1).endswith("agora-hub")
    build_parser().parse_args(exec_start.group(2).split())


def test_dockerfile_installs_the_packages_and_runs_serve():
    text = (DEPLOY / "Dockerfile").read_text()
    for package in ("hub", "protocol", "adapters"):
        assert f"COPY {package} ./{package}" in text
    assert 'ENTRYPOINT ["agora-hub"]' in text and 'CMD ["serve"]' in text
    assert "8765" in text and "/healthz" in text
    tomllib.loads((DEPLOY.parent / "pyproject.toml").read_text())  # what it pip-installs


@pytest.mark.parametrize("name", ["nginx", "haproxy"])
def test_proxy_configs_pass_their_own_checker(name, tmp_path):
    binary = find_binary(name)
    if binary is None:
        pytest.skip(f"{name} not installed")
    if name == "haproxy":
        result = subprocess.run(
            [binary, "-c", "-f", str(DEPLOY / "haproxy" / "haproxy.cfg")],
            capture_output=True,
            text=True,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        return
    for conf in ("agora-hub.conf", "compose.conf"):
        site = (DEPLOY / "nginx" / conf).read_text()
        site = site.replace("server hub:8765", "server 127.0.0.1:8765")  # no Docker DNS here
        (tmp_path / "site.conf").write_text(site.replace("listen 80;", "listen 127.0.0.1:1;"))
        main = tmp_path / "nginx.conf"
        main.write_text(
            f"pid {tmp_path}/nginx.pid; error_log {tmp_path}/error.log;\n"
            f"events {{}}\nhttp {{ include {tmp_path}/site.conf; }}\n"
        )
        result = subprocess.run(
            [binary, "-t", "-p", str(tmp_path), "-c", str(main)], capture_output=True, text=True
        )
        assert result.returncode == 0, conf + result.stderr
