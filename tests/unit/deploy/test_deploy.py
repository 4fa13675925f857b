"""The deploy files, checked against the code and by their own tools.

No container engine or cluster here: the Kubernetes manifests are validated
against the Kubernetes JSON schemas (kubernetes-validate, bundled, offline),
the proxy configs by ``nginx -t`` / ``haproxy -c``, the systemd unit by
``systemd-analyze``, and every setting, command, port, route and name they
use against the hub's code and against each other. The proxies, the
Dockerfile's steps and the systemd install script run for real in
tests/integration.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from aiohttp import web

from hub.auth import TokenFileAuth
from hub.config.settings import Settings, load_settings
from hub.process.cli import build_parser
from tests.support.proxies import (
    HAPROXY_CFG,
    NGINX_COMPOSE_CONF,
    NGINX_CONF,
    NodePorts,
    find_binary,
    nginx_test_config,
)
from tests.support.servers import ROOT

DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
SYSTEMD = DEPLOY / "systemd"
# Every variable a deploy file sets must name a real setting (the hub only
# warns about unknown AGORA_HUB_* variables; unknown keys in its TOML file stop
# it, which test_systemd_files_load checks).
SETTINGS = {f"AGORA_HUB_{n.upper()}" for n in Settings.model_fields}
SETTINGS.add("AGORA_HUB_CONFIG")
# What the balancers send to the HTTP port (path prefixes end with "/").
HTTP_ROUTES = {"/agora/", "/envelope/", "/agentprotocol", "/agentprotocol/", "/api/"}
HTTP_ROUTES |= {"/admin", "/admin/", "/identity", "/mcp", "/a2a/", "/.well-known/agent-card.json"}
#: The HTTP port's routes that are each node's own (probed and scraped per node,
#: not through a balancer); ``/ws`` there only says which port serves WebSockets.
PER_NODE = {"/healthz", "/readyz", "/metrics", "/ws"}
DEFAULT_PORT = Settings.model_fields["port"].default
DEFAULT_HTTP_PORT = 8766  # contract §9
HEARTBEAT_TIMEOUT = Settings.model_fields["heartbeat_timeout"].default


def deploy_files() -> list[Path]:
    return [p for p in DEPLOY.rglob("*") if p.is_file()]


def k8s_docs() -> list[dict[str, Any]]:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    docs = []
    for name in kustomization["resources"]:
        docs += [d for d in yaml.safe_load_all((K8S / name).read_text()) if d]
    return docs


def k8s_object(kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in k8s_docs() if d["kind"] == kind]
    if name is not None:
        found = [d for d in found if d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def hub_container() -> dict[str, Any]:
    pod = k8s_object("Deployment", "agora-hub")["spec"]["template"]["spec"]
    return pod["containers"][0]


# ── every file ──────────────────────────────────────────────────────────────


@pytest.mark.parametrize("path", deploy_files(), ids=lambda p: str(p.relative_to(DEPLOY)))
def test_every_env_var_is_a_real_setting(path):
    for var in re.findall(r"AGORA_HUB_[A-Z_]+", path.read_text()):
        assert var in SETTINGS, f"{path.name}: {var} is not a setting"


def test_yaml_files_parse():
    for path in DEPLOY.rglob("*.yaml"):
        assert [d for d in yaml.safe_load_all(path.read_text()) if d], path


# ── Kubernetes ──────────────────────────────────────────────────────────────


def test_kustomization_lists_every_manifest_and_names_the_image():
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    files = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == files
    image = hub_container()["image"].split(":")[0]
    assert [i["name"] for i in kustomization["images"]] == [image]


def test_k8s_manifests_match_the_kubernetes_schemas(monkeypatch):
    """Strict schemas (unknown fields are errors) of the oldest and newest bundled versions."""

    def no_network(*args, **kwargs):
        raise AssertionError("schema validation tried to use the network")

    monkeypatch.setattr(socket, "socket", no_network)
    versions = kubernetes_validate.utils.all_versions()
    kinds = set()
    for doc in k8s_docs():
        kinds.add(doc["kind"])
        for version in (versions[0], versions[-1]):
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                path = ".".join(str(p) for p in exc.path)
                pytest.fail(f"{doc['kind']} {doc['metadata']['name']} ({version}): {path}: {exc}")
    assert kinds >= {
        "StatefulSet",
        "ConfigMap",
        "Secret",
        "Deployment",
        "Service",
        "Ingress",
        "HorizontalPodAutoscaler",
        "PodDisruptionBudget",
    }


def test_the_schema_check_catches_a_wrong_field():
    deployment = k8s_object("Deployment", "agora-hub")
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["url"] = (
        "/readyz"
    )
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, kubernetes_validate.utils.latest_version(), True)


def test_k8s_deployment_probes_shutdown_resources_and_sandbox():
    pod = k8s_object("Deployment", "agora-hub")["spec"]["template"]["spec"]
    container = hub_container()
    build_parser().parse_args(container["args"])  # a real subcommand
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    env = k8s_object("ConfigMap", "agora-hub-env")["data"]
    assert ports == {"ws": int(env["AGORA_HUB_PORT"]), "http": int(env["AGORA_HUB_HTTP_PORT"])}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "ws"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "ws"}
    # SIGTERM comes after the preStop sleep; the hub then needs shutdown_timeout.
    sleep = container["lifecycle"]["preStop"]["exec"]["command"]
    assert sleep[0] == "sleep"
    shutdown = float(env["AGORA_HUB_SHUTDOWN_TIMEOUT"])
    assert pod["terminationGracePeriodSeconds"] > int(sleep[1]) + shutdown
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(container["resources"][kind]), kind
    assert pod["securityContext"]["runAsNonRoot"] is True
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    uid = re.search(r"^USER (\d+)", dockerfile, re.M)
    assert uid and pod["securityContext"]["runAsUser"] == int(uid.group(1))
    sandbox = container["securityContext"]
    assert sandbox["readOnlyRootFilesystem"] is True
    assert sandbox["allowPrivilegeEscalation"] is False
    assert sandbox["capabilities"]["drop"] == ["ALL"]


def test_k8s_objects_refer_to_each_other():
    pod_template = k8s_object("Deployment", "agora-hub")["spec"]["template"]
    labels = pod_template["metadata"]["labels"]
    container = hub_container()
    port_names = {p["name"] for p in container["ports"]}

    service = k8s_object("Service", "agora-hub")
    assert service["spec"]["selector"].items() <= labels.items()
    assert {p["targetPort"] for p in service["spec"]["ports"]} == port_names
    service_ports = {p["name"] for p in service["spec"]["ports"]}

    pdb = k8s_object("PodDisruptionBudget", "agora-hub")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    target = k8s_object("HorizontalPodAutoscaler", "agora-hub")["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", "agora-hub")

    for source in container["envFrom"]:
        k8s_object("ConfigMap", source["configMapRef"]["name"])
    secret = k8s_object("Secret", "agora-hub")
    for var in container["env"]:
        ref = var.get("valueFrom", {}).get("secretKeyRef")
        if ref and not ref.get("optional"):
            assert ref["key"] in secret["stringData"], ref
    for volume in pod_template["spec"]["volumes"]:
        if "configMap" in volume:
            k8s_object("ConfigMap", volume["configMap"]["name"])
        if "secret" in volume:
            assert volume["secret"]["secretName"] == secret["metadata"]["name"]

    # The Redis the Secret points at is the one redis.yaml defines.
    redis_url = secret["stringData"]["redis-url"]
    redis_service = k8s_object("Service", "agora-redis")
    host, port = re.match(r"redis://([^:/]+):(\d+)/", redis_url).groups()
    assert host == redis_service["metadata"]["name"]
    assert int(port) == redis_service["spec"]["ports"][0]["port"]
    assert k8s_object("StatefulSet", "agora-redis")["spec"]["serviceName"] == host

    ingress = k8s_object("Ingress", "agora-hub")
    for rule in ingress["spec"]["rules"]:
        for path in rule["http"]["paths"]:
            backend = path["backend"]["service"]
            assert backend["name"] == "agora-hub" and backend["port"]["name"] in service_ports


def _balanced(route: str) -> bool:
    """Does a route of the HTTP port (aiohttp's canonical form) go through the balancers?"""
    path = route.replace("{tail}", "/x").replace("{", "").replace("}", "")
    return path in HTTP_ROUTES or any(p.endswith("/") and path.startswith(p) for p in HTTP_ROUTES)


async def test_the_balancers_route_every_face_of_the_http_port(hub):
    """Every route a node serves with every face on (bridges, gateways, API, status
    page) is one the balancers send on: a face added to the hub and not to
    deploy/ would answer its callers 404 behind the documented balancers."""
    server = await hub(
        spaces=[{"id": "desk", "a2a": True, "agora_http": True, "mcp": True}],
        api_key="k" * 32,
        admin_token="t" * 32,
    )
    routes = {
        # A sub-application (the server API) serves what is below its prefix.
        f"{r.canonical}{{tail}}" if isinstance(r, web.PrefixedSubAppResource) else r.canonical
        for r in server.node.http_app.router.resources()
    }
    assert {"/mcp", "/a2a/{space}", "/agora/{space}", "/api{tail}"} <= routes  # all faces on
    missing = {r for r in routes - PER_NODE if not _balanced(r)}
    assert not missing, f"routes the deploy configs do not send on: {sorted(missing)}"


def test_k8s_ingress_routes_and_websocket_timeouts():
    ingress = k8s_object("Ingress", "agora-hub")
    routes = {}
    for rule in ingress["spec"]["rules"]:
        for path in rule["http"]["paths"]:
            routes[path["path"]] = (path["pathType"], path["backend"]["service"]["port"]["name"])
    assert routes.pop("/ws") == ("Exact", "ws")
    # A Kubernetes Prefix matches the path itself and everything below it.
    expected = {}
    for route in HTTP_ROUTES:
        base = route.rstrip("/")
        if route.endswith("/") or f"{base}/" in HTTP_ROUTES:
            expected[base] = ("Prefix", "http")
        else:
            expected.setdefault(base, ("Exact", "http"))
    assert routes == expected
    annotations = ingress["metadata"]["annotations"]
    for name in ("proxy-read-timeout", "proxy-send-timeout"):
        assert float(annotations[f"nginx.ingress.kubernetes.io/{name}"]) > HEARTBEAT_TIMEOUT


def test_k8s_settings_load_in_the_hub(monkeypatch, tmp_path):
    """The ConfigMap's variables and config file, with the Secret's, are valid settings."""
    config = tmp_path / "hub.toml"
    config.write_text(k8s_object("ConfigMap", "agora-hub-config")["data"]["hub.toml"])
    env = dict(k8s_object("ConfigMap", "agora-hub-env")["data"])
    env["AGORA_HUB_CONFIG"] = str(config)
    env["AGORA_HUB_REDIS_URL"] = k8s_object("Secret", "agora-hub")["stringData"]["redis-url"]
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = load_settings()
    assert settings.port == DEFAULT_PORT and settings.redis_url
    assert settings.auth_mode == "tokens"
    # The tokens file the hub reads is the Secret's tokens.json, mounted there.
    mounts = {m["name"]: m["mountPath"] for m in hub_container()["volumeMounts"]}
    key = Path(str(settings.auth_tokens_file)).relative_to(mounts["secrets"])
    tokens = tmp_path / "tokens.json"
    tokens.write_text(k8s_object("Secret", "agora-hub")["stringData"][str(key)])
    TokenFileAuth.load(tokens)


# ── Docker image and compose ────────────────────────────────────────────────


def test_dockerfile_ports_and_compose_wiring():
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    exposed = {int(p) for p in re.search(r"^EXPOSE (.+)$", dockerfile, re.M).group(1).split()}
    assert exposed == {DEFAULT_PORT, DEFAULT_HTTP_PORT}
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    services = compose["services"]
    assert set(services) == {"redis", "hub", "nginx"}
    hub = services["hub"]
    assert (DEPLOY / hub["build"]["context"] / hub["build"]["dockerfile"]).is_file()
    assert hub["deploy"]["replicas"] == 3
    assert hub["environment"]["AGORA_HUB_REDIS_URL"].startswith("redis://redis:")
    grace = float(hub["stop_grace_period"].rstrip("s"))
    assert grace > float(hub["environment"]["AGORA_HUB_SHUTDOWN_TIMEOUT"])
    mount = services["nginx"]["volumes"][0].split(":")
    assert (DEPLOY / mount[0]).resolve() == NGINX_COMPOSE_CONF and mount[
        1
    ] == "/etc/nginx/nginx.conf"
    upstreams = re.findall(r"server hub:(\d+)", NGINX_COMPOSE_CONF.read_text())
    assert {int(p) for p in upstreams} == exposed


# ── load balancers ──────────────────────────────────────────────────────────


def nginx_routes(text: str) -> list[tuple[str, str]]:
    """(location, upstream) pairs; upstream "" for a location that proxies nothing."""
    routes = []
    for match in re.finditer(r"location (=\s+)?(\S+)\s+\{(.*?)\}", text, re.S):
        upstream = re.search(r"proxy_pass http://(\w+);", match.group(3))
        routes.append((match.group(2), upstream.group(1) if upstream else ""))
    return routes


def test_nginx_configs_route_ws_and_http():
    routes = nginx_routes(NGINX_CONF.read_text())
    assert routes == nginx_routes(NGINX_COMPOSE_CONF.read_text())
    assert ("/ws", "agora_hub_ws") in routes
    assert {path for path, up in routes if up == "agora_hub_http"} == HTTP_ROUTES
    assert ("/", "") in routes  # everything else: 404
    text = NGINX_CONF.read_text()
    for timeout in re.findall(r"proxy_(?:read|send)_timeout (\d+)s", text):
        assert int(timeout) > HEARTBEAT_TIMEOUT


def test_haproxy_routes_ws_and_http_and_checks_readyz():
    text = HAPROXY_CFG.read_text()
    assert re.search(r"acl agora_ws +path /ws$", text, re.M)
    prefixes = " ".join(re.findall(r"acl agora_http +path_beg (.+)$", text, re.M)).split()
    exact = " ".join(re.findall(r"acl agora_http +path (.+)$", text, re.M)).split()
    assert set(prefixes) | set(exact) == HTTP_ROUTES
    backends = re.split(r"^backend ", text, flags=re.M)[1:]
    assert {b.split()[0] for b in backends} == {"agora_hub_ws", "agora_hub_http"}
    for backend in backends:
        assert "option httpchk GET /readyz" in backend
        assert all(" check " in s for s in re.findall(r"^\s+server .+$", backend, re.M))
    assert not re.search(r"^\s*maxconn", text, re.M), "a fixed maxconn needs a raised FD limit"
    assert int(re.search(r"timeout tunnel (\d+)s", text).group(1)) > HEARTBEAT_TIMEOUT


def _require(name: str) -> str:
    binary = find_binary(name) or shutil.which(name)
    if binary is None:
        from tests.conftest import IN_CI

        if IN_CI:
            pytest.fail(f"{name} is not installed: .ci/run installs it")
        pytest.skip(f"{name} is not installed")
    return binary


@pytest.mark.parametrize("conf", [NGINX_CONF, NGINX_COMPOSE_CONF], ids=lambda p: p.name)
def test_nginx_configs_pass_nginx_t(conf, tmp_path):
    binary = _require("nginx")
    nodes = [NodePorts(DEFAULT_PORT, DEFAULT_HTTP_PORT)]
    text = nginx_test_config(conf.read_text(), tmp_path, 8080, nodes)
    if conf == NGINX_COMPOSE_CONF:
        # The nginx image has a user "nginx"; this host may not.
        text = re.sub(r"^user \S+;", "user root;", text, flags=re.M)
    (tmp_path / "nginx.conf").write_text(text)
    result = subprocess.run(
        [binary, "-t", "-p", str(tmp_path), "-e", str(tmp_path / "error.log"), "-c", "nginx.conf"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    # Not as root, nginx ignores (with a warning) the user it would switch to.
    problems = [
        line
        for line in result.stderr.splitlines()
        if ("[warn]" in line or "[emerg]" in line)
        and not (os.geteuid() != 0 and '"user" directive' in line)
    ]
    assert not problems, result.stderr


def test_haproxy_cfg_passes_haproxy_c():
    binary = _require("haproxy")
    result = subprocess.run([binary, "-c", "-f", str(HAPROXY_CFG)], capture_output=True, text=True)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "WARNING" not in output and "ALERT" not in output, output


# ── systemd ─────────────────────────────────────────────────────────────────


def unit_values(key: str) -> list[str]:
    text = (SYSTEMD / "agora-hub.service").read_text()
    return re.findall(rf"^{key}=(.*)$", text, re.M)


def test_systemd_files_load():
    exec_start = unit_values("ExecStart")[0].split()
    install = (SYSTEMD / "install.sh").read_text()
    prefix = re.search(r"^prefix=(\S+)$", install, re.M).group(1)
    assert exec_start[0] == f"{prefix}/bin/agora-hub"  # the venv install.sh creates
    args = build_parser().parse_args(exec_start[1:])
    # The config file the unit names is the one install.sh installs, and loads.
    confdir = re.search(r"^confdir=(\S+)$", install, re.M).group(1)
    assert Path(args.config).parent == Path(confdir)
    for name in re.search(r"for name in (.+); do", install).group(1).split():
        assert (SYSTEMD / name).is_file(), name
    settings = load_settings(config_file=SYSTEMD / Path(args.config).name)
    assert settings.auth_mode == "tokens"
    assert Path(str(settings.auth_tokens_file)).parent == Path(confdir)
    TokenFileAuth.load(SYSTEMD / "tokens.json")
    assert float(unit_values("TimeoutStopSec")[0]) > settings.shutdown_timeout
    env_file = unit_values("EnvironmentFile")[0].lstrip("-")
    assert Path(env_file) == Path(confdir) / "env"
    user = unit_values("User")[0]
    assert re.search(rf"^u {user} ", (SYSTEMD / "agora-hub.sysusers").read_text(), re.M)
    assert subprocess.run(["sh", "-n", str(SYSTEMD / "install.sh")]).returncode == 0


def test_systemd_unit_is_sandboxed():
    for key, value in {
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "PrivateDevices": "yes",
        "CapabilityBoundingSet": "",
        "RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX",
    }.items():
        assert unit_values(key) == [value], key


def test_systemd_unit_passes_systemd_analyze(tmp_path):
    """``verify`` needs ExecStart to exist: the unit runs this venv's agora-hub instead."""
    analyze = _require("systemd-analyze")
    agora_hub = Path(sys.executable).parent / "agora-hub"
    text = (SYSTEMD / "agora-hub.service").read_text()
    exec_path = unit_values("ExecStart")[0].split()[0]
    unit = tmp_path / "agora-hub.service"
    unit.write_text(text.replace(exec_path, str(agora_hub)))
    result = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True)
    about_unit = [line for line in result.stderr.splitlines() if "agora-hub" in line]
    assert result.returncode == 0 and not about_unit, result.stderr
    result = subprocess.run(
        [analyze, "security", "--offline=true", str(unit)], capture_output=True, text=True
    )
    exposure = re.search(r"Overall exposure level for agora-hub.service: ([\d.]+)", result.stdout)
    assert exposure, result.stdout + result.stderr
    assert float(exposure.group(1)) <= 2.0, result.stdout
