"""The runnable example of docs/bridges.md: a hub process, the example agent, curl."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import time
import urllib.request
from typing import Any

import pytest

from protocol.agora_http import hash_document
from tests.support.servers import ROOT

EXAMPLES = ROOT / "examples"
WEATHER_DOC = (EXAMPLES / "agora_http_weather.md").read_text()
_spec = importlib.util.spec_from_file_location("agora_http_agent", EXAMPLES / "agora_http_agent.py")
assert _spec is not None and _spec.loader is not None
example = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(example)
forecast = example.forecast


def post(url: str, body: str | None = None) -> Any:
    """What the docs do with curl (or urllib where there is no curl)."""
    curl = shutil.which("curl")
    if curl is not None:
        args = [curl, "-s", "--max-time", "20", url]
        if body is not None:
            args += ["-d", body]
        out = subprocess.run(args, capture_output=True, text=True, timeout=30, check=True)
        return json.loads(out.stdout)
    data = None if body is None else body.encode()
    with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=20) as resp:
        return json.loads(resp.read())


@pytest.fixture
def example_agent(hub_process) -> Any:
    hub = hub_process(config=str(EXAMPLES / "agora_http.toml"))
    agent = subprocess.Popen(
        [sys.executable, str(EXAMPLES / "agora_http_agent.py"), "--url", hub.url],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        assert agent.stdout is not None
        line = agent.stdout.readline()  # blocks until the agent has joined (or died)
        assert "answering HTTP Agora requests" in line, line + agent.stdout.read()
        yield hub
    finally:
        agent.terminate()
        try:
            agent.wait(10)
        except subprocess.TimeoutExpired:
            agent.kill()
            agent.wait()


def test_the_example_agent_answers_curl(example_agent):
    url = f"{example_agent.http_url}/agora/weather"
    assert post(url, '{"body": "Weather in Paris?"}') == {
        "status": "success",
        "body": f"Tomorrow in Paris: {forecast('Paris')}.",
    }
    doc_hash = hash_document(WEATHER_DOC)
    request = {"body": {"city": "Oslo"}, "protocolHash": doc_hash}
    assert post(url, json.dumps(request)) == {
        "status": "success",
        "body": {"city": "Oslo", "forecast": forecast("Oslo")},
    }
    request = {"body": {"town": "Oslo"}, "protocolHash": doc_hash}
    assert post(url, json.dumps(request)) == {
        "status": "success",
        "body": {"error": "Invalid format"},
    }
    assert post(url, '{"body": "Weather?"}') == {"status": "failure", "error": "Which city?"}
    assert post(f"{url}/wellknown") == {doc_hash: [WEATHER_DOC]}
    opened = post(url, '{"body": "Weather in Rome?", "multiround": true}')
    follow = post(f"{url}/conversations/{opened['conversationId']}", '{"body": "And in Bern?"}')
    assert follow["body"] == f"Tomorrow in Bern: {forecast('Bern')}."
    assert opened["conversationExpires"] > time.time()
