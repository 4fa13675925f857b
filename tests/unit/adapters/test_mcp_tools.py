"""protocol.mcp.tools and .results: tool names, schemas, arguments, results."""

from __future__ import annotations

import orjson
import pytest

from protocol.mcp import results
from protocol.mcp.tools import (
    AgentsList,
    SpaceAsk,
    SpaceHistory,
    SpacePublish,
    SpacesList,
    ToolArgumentError,
    agent_tool_name,
    hub_tools,
    offered_tools,
    parse_arguments,
)


def test_the_hub_tools_have_the_contracts_names_and_schemas():
    tools = {t["name"]: t for t in hub_tools(max_wait=60)}
    assert list(tools) == [
        "spaces_list", "agents_list", "space_publish", "space_history", "space_ask",
    ]  # fmt: skip
    props = {name: set(t["inputSchema"]["properties"]) for name, t in tools.items()}
    assert props == {
        "spaces_list": set(),
        "agents_list": {"capability", "space"},
        "space_publish": {"space", "text", "data", "to"},
        "space_history": {"space", "limit"},
        "space_ask": {"space", "text", "to", "timeout"},
    }
    required = {name: t["inputSchema"].get("required", []) for name, t in tools.items()}
    assert required == {
        "spaces_list": [],
        "agents_list": [],
        "space_publish": ["space"],
        "space_history": ["space"],
        "space_ask": ["space", "text"],
    }
    for tool in tools.values():
        assert tool["inputSchema"]["type"] == "object"
        assert tool["inputSchema"]["additionalProperties"] is False
        assert tool["description"]
    assert tools["space_ask"]["inputSchema"]["properties"]["timeout"]["maximum"] == 60


def test_arguments_become_typed_calls():
    assert parse_arguments("spaces_list", {}, max_wait=60) == SpacesList()
    assert parse_arguments("agents_list", {"capability": "urn:x*"}, max_wait=60) == AgentsList(
        "urn:x*", None
    )
    assert parse_arguments(
        "space_publish", {"space": "lab", "text": "hi", "data": {"k": 1}, "to": "bob"}, max_wait=60
    ) == SpacePublish("lab", {"k": 1, "text": "hi"}, ["bob"])
    assert parse_arguments("space_publish", {"space": "lab", "data": {}}, max_wait=60) == (
        SpacePublish("lab", {}, None)
    )
    assert parse_arguments("space_history", {"space": "lab"}, max_wait=60) == SpaceHistory(
        "lab", 20
    )
    assert parse_arguments(
        "space_ask", {"space": "task.a-1", "text": "q", "to": ["a", "b", "a"], "timeout": 2},
        max_wait=60,
    ) == SpaceAsk("task.a-1", "q", ["a", "b"], 2.0)  # fmt: skip


@pytest.mark.parametrize(
    ("name", "arguments", "says"),
    [
        ("spaces_list", {"x": 1}, "unknown argument"),
        ("agents_list", {"space": 5}, "space must be a string"),
        ("agents_list", {"capability": ["a"]}, "capability must be a string"),
        ("space_publish", {"text": "hi"}, "space must be a string"),
        ("space_publish", {"space": "Bad Name", "text": "hi"}, "invalid space name"),
        ("space_publish", {"space": "lab"}, "give text, data or both"),
        ("space_publish", {"space": "lab", "data": [1]}, "data must be a JSON object"),
        ("space_publish", {"space": "lab", "text": 3}, "text must be a string"),
        ("space_publish", {"space": "lab", "data": {"from": "x"}}, "data.from"),
        ("space_publish", {"space": "lab", "text": "t", "to": []}, "to must be"),
        ("space_publish", {"space": "lab", "text": "t", "to": "no id!"}, "is not an agent id"),
        ("space_publish", {"space": "lab", "text": "t", "to": ["a"] * 101}, "to must be"),
        ("space_history", {"space": "lab", "limit": 0}, "limit must be"),
        ("space_history", {"space": "lab", "limit": 101}, "limit must be"),
        ("space_history", {"space": "lab", "limit": "5"}, "limit must be"),
        ("space_history", {"space": "lab", "limit": True}, "limit must be"),
        ("space_ask", {"space": "lab"}, "text is required"),
        ("space_ask", {"space": "lab", "text": "q", "timeout": 0}, "timeout must be above 0"),
        ("space_ask", {"space": "lab", "text": "q", "timeout": 61}, "at most 60"),
        ("space_ask", {"space": "lab", "text": "q", "timeout": "1"}, "timeout must be a number"),
        ("space_ask", {"space": "lab", "text": "q", "timeout": float("nan")}, "timeout must be"),
    ],
)
def test_wrong_arguments_say_what_is_wrong(name, arguments, says):
    with pytest.raises(ToolArgumentError) as caught:
        parse_arguments(name, arguments, max_wait=60)
    assert says in str(caught.value)


def test_agents_offer_tools_through_their_metadata():
    metadata = {
        "mcp_tools": [
            {"name": "forecast", "description": "Weather", "inputSchema": {
                "type": "object", "properties": {"city": {"type": "string"}}}},
            {"name": "plain"},
            {"name": "forecast", "description": "a repeat: ignored"},
            {"name": "has.dot"},
            {"name": "bad name"},
            {"name": "x" * 65},
            {"name": "arr", "inputSchema": {"type": "array"}},
            {"name": "nonschema", "inputSchema": "object"},
            {"name": "huge", "inputSchema": {"type": "object", "description": "x" * 20000}},
            "not an object",
        ]
    }  # fmt: skip
    tools = offered_tools("weather.bot", "tools", metadata)
    assert [t.full_name for t in tools] == ["weather.bot.forecast", "weather.bot.plain"]
    forecast, plain = tools
    assert forecast.listing() == {
        "name": "weather.bot.forecast",
        "description": "Weather",
        "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
    assert plain.input_schema == {"type": "object"} and "plain" in plain.description
    assert plain.space == "tools" and plain.agent_id == "weather.bot"
    assert agent_tool_name("a", "b") == "a.b"


def test_only_the_first_64_tools_of_an_agent_count():
    metadata = {"mcp_tools": [{"name": f"t{i}"} for i in range(100)]}
    assert len(offered_tools("a", "s", metadata)) == 64
    assert offered_tools("a", "s", {}) == [] and offered_tools("a", "s", None) == []
    assert offered_tools("a", "s", {"mcp_tools": "x"}) == []


def test_results_are_text_and_structured_content():
    assert results.json_result({"a": 1}) == {
        "content": [{"type": "text", "text": '{"a":1}'}],
        "structuredContent": {"a": 1},
        "isError": False,
    }
    failed = results.error_result("nope" * 1000)
    assert failed["isError"] is True and len(failed["content"][0]["text"]) == results.MAX_ERROR


@pytest.mark.parametrize(
    ("data", "text", "structured", "is_error"),
    [
        ({"in_reply_to": "e", "result": {"t": 21}}, '{"t":21}', {"t": 21}, False),
        ({"in_reply_to": "e", "result": [1, 2]}, "[1,2]", None, False),
        ({"in_reply_to": "e", "result": "sunny"}, "sunny", None, False),
        ({"in_reply_to": "e", "result": {"t": 1}, "text": "one"}, "one", {"t": 1}, False),
        ({"in_reply_to": "e", "text": "hello"}, "hello", None, False),
        ({"in_reply_to": "e", "status": "failure", "error": "no city"}, "no city", None, True),
        ({"in_reply_to": "e", "status": "error", "error": {"why": 1}}, '{"why":1}', None, True),
        ({"in_reply_to": "e", "status": "failure"}, "The agent reported a failure.", None, True),
        ({"in_reply_to": "e", "from": "a", "k": 1}, '{"k":1}', {"k": 1}, False),
    ],
)
def test_an_agents_reply_becomes_a_tool_result(data, text, structured, is_error):
    result = results.reply_result(data)
    assert result["content"] == [{"type": "text", "text": text}]
    assert result.get("structuredContent") == structured
    assert result["isError"] is is_error


def test_the_stateless_revision_gets_its_result_fields():
    listed = results.tools_list_result([{"name": "x"}])
    assert results.finish(listed, modern=False) == listed
    assert results.finish(listed, modern=True, ttl_ms=5) == {
        "tools": [{"name": "x"}],
        "resultType": "complete",
        "ttlMs": 5,
        "cacheScope": "private",
    }
    called = results.finish(results.text_result("t"), modern=True)
    assert called["resultType"] == "complete" and "ttlMs" not in called
    discover = results.discover_result("1.0")
    assert discover["supportedVersions"] == ["2026-07-28"]
    assert discover["resultType"] == "complete" and discover["capabilities"]["tools"]
    init = results.initialize_result("2025-06-18", "1.0")
    assert init["protocolVersion"] == "2025-06-18"
    assert init["capabilities"] == {
        "tools": {"listChanged": True},
        "resources": {"subscribe": True, "listChanged": True},
    }
    assert init["serverInfo"]["name"] == "agora-hub"
    orjson.dumps(init)
