"""The open-file limit and the listen backlog a node asks of the system."""

from __future__ import annotations

import resource
import subprocess
import sys
import textwrap
from typing import Any

import structlog
from structlog.testing import capture_logs

from hub.process.os_limits import (
    WANTED_OPEN_FILES,
    effective_backlog,
    log_backlog,
    log_open_files,
    raise_open_files_limit,
)
from tests.support.servers import ROOT


class FakeRlimits:
    """The parts of :mod:`resource` the node uses, with a settable limit."""

    RLIMIT_NOFILE = resource.RLIMIT_NOFILE
    RLIM_INFINITY = resource.RLIM_INFINITY

    def __init__(self, soft: int, hard: int, *, refuse: bool = False):
        self.limit = (soft, hard)
        self.refuse = refuse
        self.calls: list[tuple[int, int]] = []

    def getrlimit(self, which: int) -> tuple[int, int]:
        assert which == self.RLIMIT_NOFILE
        return self.limit

    def setrlimit(self, which: int, limit: tuple[int, int]) -> None:
        self.calls.append(limit)
        if self.refuse:
            raise ValueError("not allowed")
        self.limit = limit


def test_the_soft_limit_is_raised_to_the_hard_limit():
    fake = FakeRlimits(1024, 1_048_576)
    limit = raise_open_files_limit(fake)
    assert fake.calls == [(1_048_576, 1_048_576)]
    assert (limit.before, limit.soft, limit.hard) == (1024, 1_048_576, 1_048_576)
    assert limit.raised and not limit.capped


def test_a_soft_limit_already_at_the_hard_limit_is_left_alone():
    fake = FakeRlimits(20_000, 20_000)
    limit = raise_open_files_limit(fake)
    assert fake.calls == []
    assert not limit.raised and limit.capped
    assert limit.connections == 20_000 - 100


def test_an_unlimited_hard_limit_raises_to_what_the_kernel_allows():
    fake = FakeRlimits(1024, resource.RLIM_INFINITY)
    raise_open_files_limit(fake)
    assert len(fake.calls) == 1 and fake.calls[0][0] > 1024


def test_a_refusal_leaves_the_limit_as_it_was():
    fake = FakeRlimits(1024, 4096, refuse=True)
    limit = raise_open_files_limit(fake)
    assert (limit.soft, limit.raised) == (1024, False)


def test_the_limit_is_logged_and_a_cap_warned_about():
    with capture_logs() as logs:
        log_open_files(raise_open_files_limit(FakeRlimits(1024, 20_000)), _log())
    info, warning = logs
    assert info == {
        "event": "open files limit", "log_level": "info",
        "soft": 20_000, "hard": 20_000, "raised": True,
    }  # fmt: skip
    assert warning["log_level"] == "warning"
    assert "caps this node near 19900 connections" in warning["event"]
    assert warning["connections"] == 19_900


def test_a_limit_at_or_over_the_target_is_not_warned_about():
    with capture_logs() as logs:
        log_open_files(raise_open_files_limit(FakeRlimits(1024, WANTED_OPEN_FILES)), _log())
    assert [e["log_level"] for e in logs] == ["info"]


def test_the_real_limit_is_raised_in_a_process():
    """A process started with a low soft limit ends with soft == hard."""
    script = textwrap.dedent(
        """
        import resource
        from hub.process.os_limits import raise_open_files_limit
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
        limit = raise_open_files_limit()
        print(limit.before, limit.soft, hard, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    before, soft, hard, now = map(int, out)
    assert before == 256
    assert soft == now > 256
    if hard != resource.RLIM_INFINITY:
        assert now == hard


def test_the_backlog_is_capped_by_somaxconn(tmp_path):
    somaxconn = tmp_path / "somaxconn"
    somaxconn.write_text("1024\n")
    assert effective_backlog(4096, somaxconn) == 1024
    assert effective_backlog(512, somaxconn) == 512
    assert effective_backlog(4096, tmp_path / "missing") == 4096
    with capture_logs() as logs:
        assert log_backlog(4096, _log(), somaxconn) == 1024
    assert logs[0]["log_level"] == "warning"
    assert "capped at 1024 by net.core.somaxconn" in logs[0]["event"]
    somaxconn.write_text("4096\n")
    with capture_logs() as logs:
        log_backlog(4096, _log(), somaxconn)
    assert logs == [{"event": "listen backlog", "log_level": "info", "backlog": 4096}]


def _log() -> Any:
    return structlog.get_logger("test")
