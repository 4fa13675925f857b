"""The runnable example of two agents negotiating through a signed space."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

from protocol.envelope import verify
from tests.support.examples import EXAMPLES, load_example
from tests.support.servers import ROOT

EXAMPLE = EXAMPLES / "negotiation.py"


async def test_the_example_runs_on_its_own():
    proc = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, str(EXAMPLE)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    states = [line.rsplit("task ", 1)[1] for line in lines if "task " in line]
    assert states == ["PENDING", "NEGOTIATING", "PROCESSING", "COMPLETED"], lines
    assert "hub     refused the replayed RESULT: UNAUTHORIZED" in lines
    assert "hub     refused the unsigned text: UNAUTHORIZED" in lines
    assert lines[-1] == "result: success: HELLO, SIGNED WORLD"


async def test_the_example_against_a_hub_with_the_space_declared(hub):
    example = load_example("negotiation", "negotiation_example")
    server = await hub(spaces=[{"id": example.SPACE, "require_signed": True}])
    result, log = await example.negotiate(server.url)
    seller_did = log[0].split()[-1]
    v = verify(result, now=time.time())
    assert v.type == "RESULT" and v.signer == seller_did
    assert [line.split()[1] for line in log[1:5]] == ["REQUEST", "OFFER", "ACCEPT", "RESULT"]
