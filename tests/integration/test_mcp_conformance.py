"""The official MCP conformance suite passes every applicable server scenario
(contract §20): ``make conformance``, run by CI.

Marked ``packaging``: the first run installs the suite and a Node 22 toolchain
from npm (about 120 packages and a 30 MB Node), so a developer's plain
``make test`` leaves it out; CI (``CI=true``) and ``make conformance`` run it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from tests.support.servers import ROOT

pytestmark = [pytest.mark.packaging, pytest.mark.timeout(900)]


def test_every_applicable_server_scenario_passes():
    if shutil.which("npm") is None:
        pytest.fail("npm is needed to install the MCP conformance suite")
    done = subprocess.run(
        [sys.executable, "-m", "tests.conformance"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert " 0 failed," in done.stdout, done.stdout[-3000:]
