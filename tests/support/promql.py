"""The metric names a PromQL expression reads — enough PromQL for our dashboards.

String literals, label matchers (``{…}``), range selectors (``[…]``) and the
label lists of ``by``/``without``/``on``/``ignoring``/``group_*`` are removed;
what is left that looks like an identifier, is not followed by ``(`` (a
function or aggregation) and is not a keyword, is a metric name.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

KEYWORDS = frozenset(
    {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "inf", "nan"}
)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENT = re.compile(r"(?<![\w.$])[a-zA-Z_:][a-zA-Z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    text = _STRING.sub('""', expr)
    text = _MATCHERS.sub("", text)
    text = _RANGE.sub("", text)
    text = _GROUPING.sub("", text)
    names = set()
    for match in _IDENT.finditer(text):
        if text[match.end() :].lstrip().startswith("("):
            continue  # a function or an aggregation
        if match.group().lower() in KEYWORDS:
            continue
        names.add(match.group())
    return names


def dashboard_expressions(dashboard: dict[str, Any]) -> Iterator[str]:
    """Every PromQL expression of a Grafana dashboard: panel targets (rows'
    nested panels too) and query variables."""
    stack = list(dashboard.get("panels", []))
    while stack:
        panel = stack.pop()
        stack.extend(panel.get("panels", []))
        for target in panel.get("targets", []):
            if target.get("expr"):
                yield target["expr"]
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") != "query":
            continue
        query = variable.get("query")
        text = query.get("query") if isinstance(query, dict) else query
        match = re.fullmatch(r"\s*label_values\((.*),\s*\w+\)\s*", text or "")
        if match:
            yield match.group(1)
        elif text:
            yield text
