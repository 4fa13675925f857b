"""adapters.kit.stored: how adapters key their records and read them back."""

from __future__ import annotations

import pytest

from adapters.kit.stored import hashed_key, json_object


def test_keys_are_the_ones_earlier_versions_wrote():
    # Nodes of two versions share the store during a rolling upgrade.
    assert hashed_key("agora-http:out:", "bridge", "lab", "alice", "c1") == (
        "agora-http:out:954434bbaa3126aab5311953c04c71185511ae503fa7c172687b019f2f4f692f"
    )


def test_parts_are_hashed_as_a_tuple_not_joined():
    assert hashed_key("p:", "a:b", "c") != hashed_key("p:", "a", "b:c")


@pytest.mark.parametrize("raw", [None, b"", b"{", b"[1]", b'"text"', b"null", b"\xff"])
def test_what_is_not_a_stored_object_reads_as_absent(raw):
    assert json_object(raw) is None


def test_a_stored_object_reads_back():
    assert json_object(b'{"space": "lab", "expires": 1.5}') == {"space": "lab", "expires": 1.5}
