"""Every metric the Grafana dashboard queries exists in a real hub's /metrics.

A real ``agora-hub serve`` process is exercised the way the dashboard's
panels need it — agents publish (enough for the sampled latency histogram to
have observations), a bad frame is refused (an error code), an operator
disconnects an agent (a close code), bridge and API routes are called (HTTP
series) — then its /metrics on the HTTP port is parsed and every metric name
in every PromQL expression of ``deploy/grafana/agora-hub.json`` must be
there.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from agora_client import HubAPI
from tests.support.promql import dashboard_expressions, metric_names
from tests.support.servers import ROOT
from tests.support.wsclient import WsClient

KEY = "dashboard-api-key-0123456789"
DASHBOARD = ROOT / "deploy" / "grafana" / "agora-hub.json"


def scrape(url: str) -> tuple[set[str], str]:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    names = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    return names, text


def post(url: str, body: bytes) -> int:
    req = urllib.request.Request(url, data=body, method="POST")
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code


async def test_every_metric_the_dashboard_queries_exists(hub_process):
    proc = hub_process(api_key=KEY)
    alice = await WsClient.connect(proc.url, "alice")
    bob = await WsClient.connect(proc.url, "bob")
    for client in (alice, bob):
        await client.join("general")
    for i in range(40):  # events whose seq is a multiple of 16 are timed
        await alice.request({"type": "space.publish", "space": "general", "data": {"n": i}})
    await alice.send("not json")
    assert (await alice.wait_for("error"))["code"] == "INVALID_REQUEST"
    async with HubAPI(proc.http_url, KEY) as api:
        await api.spaces()
        await api.publish("general", {"text": "from the API"})
        await api.disconnect("bob")
    code, _ = await bob.closed()
    assert code == 4403
    status = await asyncio.to_thread(post, proc.http_url + "/envelope/general", b"not json")
    assert status == 400

    names, text = await asyncio.to_thread(scrape, proc.http_url)
    dashboard = json.loads(DASHBOARD.read_text())
    queried = set().union(*(metric_names(e) for e in dashboard_expressions(dashboard)))
    assert len(queried) >= 10
    missing = sorted(queried - names)
    assert not missing, f"the dashboard queries metrics /metrics does not have: {missing}"
    # The series the panels split by exist with their labels.
    assert 'agora_hub_errors_total{code="INVALID_REQUEST"}' in text
    assert 'agora_hub_closes_total{code="4403"}' in text
    assert 'route="/envelope/{space}"' in text and 'route="/api/spaces"' in text
    count = next(
        s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "agora_hub_delivery_latency_seconds_count"
    )
    assert count >= 2
    await alice.close()
