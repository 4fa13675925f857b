"""The Grafana dashboard in deploy/grafana/ is well-formed, and the PromQL
reader the metric check relies on finds exactly the metric names."""

from __future__ import annotations

import json

import pytest

from tests.support.promql import dashboard_expressions, metric_names
from tests.support.servers import ROOT

DASHBOARD = ROOT / "deploy" / "grafana" / "agora-hub.json"


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("sum(agora_hub_connections)", {"agora_hub_connections"}),
        (
            'sum by (code) (rate(agora_hub_errors_total{job=~"$job", code!="x(y)"}[5m]))',
            {"agora_hub_errors_total"},
        ),
        (
            "histogram_quantile(0.99, sum by (le, route) "
            "(rate(http_seconds_bucket{a='b'}[$__rate_interval])))",
            {"http_seconds_bucket"},
        ),
        ("a_total / on (instance) group_left (node) b_info", {"a_total", "b_info"}),
        ("count(x == 0) or vector(0)", {"x"}),
        ("rate(x[1m] offset 5m) > bool 1e3", {"x"}),
        ("max without (worker) (agora_hub_connections)", {"agora_hub_connections"}),
    ],
)
def test_metric_names_of_an_expression(expr, names):
    assert metric_names(expr) == names


def test_the_dashboard_is_importable_json():
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "agora-hub" and dashboard["title"]
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"datasource", "job", "instance"} <= variables
    ids = []
    for panel in dashboard["panels"]:
        ids.append(panel["id"])
        assert {"h", "w", "x", "y"} <= set(panel["gridPos"]), panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        for target in panel["targets"]:
            assert "$job" in target["expr"], target
    assert len(ids) == len(set(ids))
    exprs = list(dashboard_expressions(dashboard))
    everything = set().union(*(metric_names(e) for e in exprs))
    # What the issue asks the dashboard to show.
    for wanted in (
        "agora_hub_connections",
        "agora_hub_deliveries_total",
        "agora_hub_slow_consumer_closes_total",
        "agora_hub_backplane_lag_seconds",
        "agora_hub_errors_total",
        "agora_hub_http_requests_total",
        "agora_hub_http_request_duration_seconds_bucket",
        "agora_hub_delivery_latency_seconds_bucket",
    ):
        assert wanted in everything, wanted
