"""What an operator sees when the configuration is wrong: mistyped variables
are warned about with the closest name, missing or unusable files are named
with what they are for, and the hub exits 2 (with --workers too)."""

from __future__ import annotations

import resource
import subprocess
import sys

import pytest

from hub.process.heap import GEN0_THRESHOLD
from hub.process.os_limits import WANTED_OPEN_FILES
from tests.support.servers import ROOT, _env_without_hub_settings, free_port


def serve(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "hub", "serve", "--port", str(free_port())]
    return subprocess.run(
        [*command, "--http-port", "0", *args],
        cwd=ROOT,
        env=_env_without_hub_settings(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_a_mistyped_variable_is_warned_about_at_start(hub_process):
    proc = hub_process(env={"AGORA_HUB_HEARTBEAT_TIMOUT": "3", "AGORA_HUB_XYZZY": "5"})
    warnings = [
        e
        for e in proc.log_lines()
        if e.get("level") == "warning" and "environment variable" in e["event"]
    ]
    assert [w["event"] for w in warnings] == [
        "unknown environment variable AGORA_HUB_HEARTBEAT_TIMOUT is ignored; "
        "did you mean AGORA_HUB_HEARTBEAT_TIMEOUT?",
        "unknown environment variable AGORA_HUB_XYZZY is ignored",
    ]
    assert proc.stop() == 0


def test_the_open_file_limit_is_raised_and_logged_at_start(hub_process):
    proc = hub_process()
    lines = proc.log_lines()
    (limit,) = [e for e in lines if e["event"] == "open files limit"]
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert limit["soft"] == limit["hard"] == hard
    assert limit["node"]
    capped = [e for e in lines if "caps this node near" in e["event"]]
    assert len(capped) == (1 if hard < WANTED_OPEN_FILES else 0)
    if capped:
        assert capped[0]["level"] == "warning" and capped[0]["connections"] == hard - 100
    assert proc.stop() == 0


def test_a_started_hub_freezes_its_long_lived_objects(hub_process):
    proc = hub_process()
    (frozen,) = [e for e in proc.log_lines() if e["event"] == "heap frozen"]
    assert frozen["objects"] > 10_000
    assert frozen["gc_threshold"][0] == GEN0_THRESHOLD
    assert proc.stop() == 0


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (
            ["--tls-certfile", "{dir}/nope.crt", "--tls-keyfile", "{dir}/nope.key"],
            "tls_certfile {dir}/nope.crt: no such file; it should hold the TLS certificate",
        ),
        (
            ["--auth-mode", "tokens", "--auth-tokens-file", "{dir}/tokens.json"],
            "auth_tokens_file {dir}/tokens.json: no such file; it should hold the agents' tokens",
        ),
        (
            ["--identity-file", "{dir}"],
            "identity_file {dir}: not a file; it should hold the hub's Ed25519 identity key",
        ),
    ],
)
def test_a_missing_file_is_named_with_its_purpose(tmp_path, flags, expected):
    result = serve(*(f.format(dir=tmp_path) for f in flags))
    assert result.returncode == 2, result.stderr
    assert expected.format(dir=tmp_path) in result.stderr
    assert "Errno" not in result.stderr


def test_an_unusable_certificate_stops_every_worker_with_status_2(tmp_path):
    bad = tmp_path / "hub.crt"
    bad.write_text("not a certificate\n")
    result = serve(
        "--workers", "2", "--redis-url", "redis://127.0.0.1:1/0",
        "--tls-certfile", str(bad), "--tls-keyfile", str(bad),
        "--log-format", "json",
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert f"tls_certfile {bad} / tls_keyfile {bad}: not a PEM certificate" in result.stderr
    assert '"worker cannot start; stopping"' in result.stderr
    assert "restarting" not in result.stderr
