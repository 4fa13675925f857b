"""The runnable example of docs/bridges.md: a hub process, the example agent, curl."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from protocol.agora_http import hash_document
from tests.support.examples import EXAMPLES, load_example, post, running_agent

WEATHER_DOC = (EXAMPLES / "agora_http_weather.md").read_text()
example = load_example("agora_http_agent")
forecast = example.forecast


@pytest.fixture
def example_agent(hub_process) -> Iterator[Any]:
    hub = hub_process(config=str(EXAMPLES / "agora_http.toml"))
    with running_agent("agora_http_agent", hub.url, "answering HTTP Agora requests"):
        yield hub


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
