"""The client address behind trusted proxies (hub.net.proxies), header by header."""

import pytest
from websockets.datastructures import Headers

from hub.net.proxies import ClientAddress, TrustedProxies, parse_networks

PEER = ("127.0.0.1", 40000)
PROXIES = TrustedProxies(["127.0.0.1", "10.0.0.0/8"])


def address(headers: list[tuple[str, str]], peer=PEER, proxies=PROXIES) -> ClientAddress:
    return proxies.client_address(peer, Headers(headers))


def test_no_trusted_proxies_means_the_peer_whatever_the_headers_say():
    got = address([("X-Forwarded-For", "203.0.113.9")], proxies=TrustedProxies())
    assert got == ClientAddress("127.0.0.1", 40000) and str(got) == "127.0.0.1:40000"


def test_an_untrusted_peer_is_the_client():
    got = address([("X-Forwarded-For", "203.0.113.9")], peer=("192.0.2.1", 5000))
    assert got == ClientAddress("192.0.2.1", 5000)


def test_a_trusted_peer_forwards_its_client():
    got = address([("X-Forwarded-For", "203.0.113.9")])
    assert got == ClientAddress("203.0.113.9", None, via="127.0.0.1:40000")
    assert str(got) == "203.0.113.9"


def test_a_trusted_peer_without_headers_is_the_client():
    assert address([]) == ClientAddress("127.0.0.1", 40000)


def test_the_rightmost_untrusted_hop_wins_over_what_the_client_wrote():
    # The client sent "X-Forwarded-For: 198.51.100.66" itself; the trusted
    # proxies appended the real address, then their own.
    headers = [("X-Forwarded-For", "198.51.100.66, 203.0.113.9, 10.1.2.3")]
    assert address(headers).ip == "203.0.113.9"


def test_several_headers_are_one_list_in_order():
    headers = [("X-Forwarded-For", "198.51.100.66"), ("X-Forwarded-For", "203.0.113.9")]
    assert address(headers).ip == "203.0.113.9"


def test_all_hops_trusted_gives_the_leftmost():
    assert address([("X-Forwarded-For", "10.0.0.5, 10.0.0.6")]).ip == "10.0.0.5"


@pytest.mark.parametrize("junk", ["unknown", "_hidden", "not an address", "", "300.1.1.1"])
def test_a_hop_that_is_not_an_address_stops_at_the_last_vouched_one(junk):
    assert address([("X-Forwarded-For", junk)]) == ClientAddress("127.0.0.1", 40000)
    got = address([("X-Forwarded-For", f"203.0.113.9, {junk}, 10.0.0.7")])
    assert got == ClientAddress("10.0.0.7", None, via="127.0.0.1:40000")


@pytest.mark.parametrize(
    ("hop", "ip"),
    [
        ("203.0.113.9:5555", "203.0.113.9"),
        ("2001:db8::1", "2001:db8::1"),
        ("[2001:db8::1]:4711", "2001:db8::1"),
        ("::ffff:203.0.113.9", "203.0.113.9"),
    ],
)
def test_address_forms(hop, ip):
    assert address([("X-Forwarded-For", hop)]).ip == ip


def test_forwarded_rfc7239():
    headers = [("Forwarded", 'for=198.51.100.66, for="[2001:db8:cafe::17]:4711";proto=https')]
    assert address(headers).ip == "2001:db8:cafe::17"
    headers = [("Forwarded", "for=203.0.113.9;by=10.0.0.1, For=10.0.0.2")]
    assert address(headers).ip == "203.0.113.9"
    # An element without for= tells nothing: stop at the proxy.
    assert address([("Forwarded", "proto=https")]) == ClientAddress("127.0.0.1", 40000)
    assert address([("Forwarded", 'for="_gazonk"')]) == ClientAddress("127.0.0.1", 40000)
    # A quoted comma does not split an element.
    assert address([("Forwarded", 'for=203.0.113.9;x="a,b"')]).ip == "203.0.113.9"


def test_x_forwarded_for_wins_over_forwarded():
    headers = [("Forwarded", "for=198.51.100.66"), ("X-Forwarded-For", "203.0.113.9")]
    assert address(headers).ip == "203.0.113.9"


def test_ipv6_peer_and_dual_stack_peer():
    proxies = TrustedProxies(["::1"])
    got = proxies.client_address(("::1", 4000, 0, 0), Headers([("X-Forwarded-For", "192.0.2.7")]))
    assert got == ClientAddress("192.0.2.7", None, via="[::1]:4000")
    mapped = PROXIES.client_address(("::ffff:127.0.0.1", 4000, 0, 0), Headers([]))
    assert str(mapped) == "127.0.0.1:4000"


def test_aiohttp_headers_work_too():
    from multidict import CIMultiDict, CIMultiDictProxy

    headers = CIMultiDictProxy(CIMultiDict([("x-forwarded-for", "203.0.113.9")]))
    assert PROXIES.client_address(PEER, headers).ip == "203.0.113.9"
    assert PROXIES.client_address(PEER, CIMultiDictProxy(CIMultiDict())).ip == "127.0.0.1"


def test_a_huge_header_is_cut_keeping_the_end_the_proxies_wrote():
    hops = "198.51.100.66, " * 5000 + "203.0.113.9, 10.0.0.1"
    assert address([("X-Forwarded-For", hops)]).ip == "203.0.113.9"
    trusted = "10.0.0.1, " * 5000 + "10.0.0.2"
    # Only the last few thousand characters are read: the leftmost of those.
    assert address([("X-Forwarded-For", trusted)]).ip == "10.0.0.1"


def test_parse_networks():
    assert [str(n) for n in parse_networks(["10.0.0.0/8", " 127.0.0.1 ", "", "::1"])] == [
        "10.0.0.0/8",
        "127.0.0.1/32",
        "::1/128",
    ]
    assert str(parse_networks(["10.1.2.3/8"])[0]) == "10.0.0.0/8"  # host bits allowed
    with pytest.raises(ValueError, match=r"'proxy\.internal'"):
        parse_networks(["proxy.internal"])


def test_without_trusted_proxies_peers_come_out_as_with_them():
    """IPv4 peers skip the address parse when no proxy is trusted; the result
    is the same, and other forms are still normalised."""
    plain = TrustedProxies()
    assert plain.client_address(("192.0.2.7", 5), Headers([])) == ClientAddress("192.0.2.7", 5)
    mapped = plain.client_address(("::ffff:192.0.2.7", 5, 0, 0), Headers([]))
    assert mapped == ClientAddress("192.0.2.7", 5)
    v6 = plain.client_address(("2001:db8::1", 5, 0, 0), Headers([]))
    assert str(v6) == "[2001:db8::1]:5"
