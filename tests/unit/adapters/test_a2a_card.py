"""Agent cards: the hub's (what A2A 1.0 clients need to find the JSON-RPC
interface and the skills) and a remote's, as the outbound bridge reads it."""

from __future__ import annotations

import pytest

from protocol.a2a.card import CardError, agent_card, parse_card, skills


def test_the_hub_card_has_what_a_1_0_client_needs():
    card = agent_card(
        name="Lab", description="d", url="http://h/a2a/lab", version="1",
        skill_list=skills({"urn:x:translate": ["b", "a"], "plain": ["c"]}), bearer=False,
    )  # fmt: skip
    assert card["supportedInterfaces"] == [
        {"url": "http://h/a2a/lab", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
    ]
    assert "url" not in card  # a top-level url makes 1.0 clients treat the card as 0.3
    assert card["capabilities"]["streaming"] is True
    assert [s["id"] for s in card["skills"]] == ["plain", "urn:x:translate"]
    assert card["skills"][1]["name"] == "translate" and card["skills"][1]["tags"] == ["a", "b"]
    assert "securitySchemes" not in card
    secured = agent_card(name="n", description="d", url="u", version="1", skill_list=[],
                         bearer=True)  # fmt: skip
    scheme = secured["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]
    assert scheme["scheme"] == "Bearer"
    assert secured["securityRequirements"] == [{"schemes": {"bearer": {"list": []}}}]


def test_a_remote_card_is_read():
    card = parse_card({
        "name": "Remote", "description": "r",
        "supportedInterfaces": [
            {"url": "http://r/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
            {"url": "http://r/rpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        ],
        "capabilities": {"streaming": True},
        "skills": [{"id": "a"}, {"id": "a"}, {"id": "x" * 500}, {"name": "no id"}, "junk"],
    })  # fmt: skip
    assert (card.name, card.rpc_url, card.streaming, card.skills) == (
        "Remote",
        "http://r/rpc",
        True,
        ("a",),
    )
    plain = parse_card({"supportedInterfaces": [{"url": "u", "protocolBinding": "JSONRPC"}]})
    assert not plain.streaming and plain.name == "A2A agent"


@pytest.mark.parametrize(
    "card",
    [
        [],
        {"name": "x"},
        {"url": "http://old", "name": "0.3 card"},
        {"supportedInterfaces": [{"url": "u", "protocolBinding": "HTTP+JSON"}]},
        {"supportedInterfaces": [{"url": "u", "protocolBinding": "JSONRPC",
                                  "protocolVersion": "0.3"}]},
    ],
)  # fmt: skip
def test_cards_the_bridge_cannot_use(card):
    with pytest.raises(CardError):
        parse_card(card)
