"""Protocol hashes in both forms, checked against the real library's captures."""

import base64
import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.agora_http import (
    CONVERSATION_NOT_FOUND,
    UNSUPPORTED_PROTOCOL,
    AgoraHttpError,
    ErrorLayer,
    HashForm,
    check_conversation_id,
    encode_source,
    format_hash,
    hash_document,
    is_conversation_id,
    is_remote_conversation_id,
    new_conversation_id,
    normalise_hash,
)
from tests.support import vectors
from tests.support.vectors import load_vector

WIRE = "agora-http-0.2"


@pytest.fixture(scope="module")
def hash_examples():
    return load_vector(WIRE, "agora_protocol_0.2.0_wire.json")["hash_examples"]


def test_vectors_hash_both_forms_to_one_key(hash_examples):
    assert len(hash_examples) == 3
    for example in hash_examples:
        text, library_hash = example["text"], example["compute_hash_base64_sha1"]
        digest = hash_document(text)
        assert len(digest) == 40 and digest == digest.lower()
        assert normalise_hash(library_hash) == digest
        assert normalise_hash(digest.upper()) == digest
        assert format_hash(digest, HashForm.BASE64) == library_hash
        assert format_hash(digest) == digest


def test_vectors_data_uris_are_what_the_library_writes(hash_examples):
    for example in hash_examples:
        assert encode_source(example["text"]) == example["data_uri"]


def test_hash_is_sha1_of_the_utf8_text():
    text = "---\nname: X\n---\nü"
    assert hash_document(text) == hashlib.sha1(text.encode()).hexdigest()


def test_no_protocol_is_none():
    assert normalise_hash(None) is None


@pytest.mark.parametrize("value", [5, 1.5, True, ["a"], {"h": 1}])
def test_a_hash_of_another_type_is_an_invalid_field(value):
    with pytest.raises(AgoraHttpError) as info:
        normalise_hash(value)
    assert (info.value.layer, info.value.http_status) == (ErrorLayer.TRANSPORT, 400)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "reject-me",
        "negotiation",  # the library's own pseudo-hash for negotiation
        "a" * 39,
        "a" * 41,
        "g" * 40,
        "1bfotdllfg/C0rvMRUiHLFhoGQ4",  # base64 without its padding
        "1bfotdllfg_C0rvMRUiHLFhoGQ4=",  # urlsafe alphabet
        "1bfotdllfg/C0rvMRUiHLFhoGQ5=",  # non-zero padding bits: not canonical
        "1bfotdllfg/C0rvMRUiHLFhoGQ4==",
        " d5b7e8b5d9657e0fc2d2bbcc4548872c5868190e",
        "d5b7e8b5d9657e0fc2d2bbcc4548872c5868190e\n",
        base64.b64encode(b"x" * 21).decode(),  # base64, but not 20 bytes
    ],
)
def test_neither_form_is_an_unsupported_protocol(value):
    with pytest.raises(AgoraHttpError) as info:
        normalise_hash(value)
    err = info.value
    assert (err.layer, err.http_status, err.error) == (ErrorLayer.AGORA, 200, UNSUPPORTED_PROTOCOL)
    assert err.response() == (200, {"status": "failure", "error": "Unsupported protocol"})


@given(st.binary(min_size=20, max_size=20))
def test_any_digest_round_trips_through_both_forms(digest):
    hex_form = digest.hex()
    b64_form = base64.b64encode(digest).decode()
    assert normalise_hash(hex_form) == hex_form
    assert normalise_hash(hex_form.upper()) == hex_form
    assert normalise_hash(b64_form) == hex_form
    assert format_hash(hex_form, HashForm.BASE64) == b64_form


@given(st.text(max_size=60))
def test_normalise_hash_never_raises_anything_else(value):
    try:
        result = normalise_hash(value)
    except AgoraHttpError:
        return
    assert result is not None and len(result) == 40


def test_new_conversation_ids_are_unguessable_and_valid():
    ids = {new_conversation_id() for _ in range(200)}
    assert len(ids) == 200
    assert all(is_conversation_id(i) and len(i) == 32 for i in ids)


@pytest.mark.parametrize(
    "value",
    [
        "conv-1",
        "fdb2ff12-71c5-4669-a477-e8426a791d9d",  # the library's uuid4 ids are not ours
        "A" * 31,
        "A" * 33,
        "A" * 31 + "/",
        "A" * 31 + ".",
        None,
        32,
    ],
)
def test_a_foreign_conversation_id_is_not_found(value):
    assert not is_conversation_id(value)
    with pytest.raises(AgoraHttpError) as info:
        check_conversation_id(value)
    assert info.value.response() == (200, {"status": "failure", "error": CONVERSATION_NOT_FOUND})


def test_check_conversation_id_returns_a_valid_id():
    cid = new_conversation_id()
    assert check_conversation_id(cid) == cid


@pytest.mark.parametrize(
    ("value", "safe"),
    [
        ("fdb2ff12-71c5-4669-a477-e8426a791d9d", True),
        ("conv-1", True),
        ("a.b~c_d", True),
        ("x" * 256, True),
        ("x" * 257, False),
        ("", False),
        (".", False),
        ("..", False),
        ("a/b", False),
        ("a?b", False),
        ("a#b", False),
        ("a%2Fb", False),
        ("é", False),
        (7, False),
        (None, False),
    ],
)
def test_remote_conversation_ids_must_be_a_safe_path_segment(value, safe):
    assert is_remote_conversation_id(value) is safe


def test_missing_vectors_fail_under_ci_and_skip_elsewhere(monkeypatch, tmp_path):
    monkeypatch.setenv("AGORA_SHARED_DIR", str(tmp_path))
    monkeypatch.setattr(vectors, "IN_CI", True)
    with pytest.raises(pytest.fail.Exception, match="not found"):
        vectors.vectors_dir(WIRE)
    monkeypatch.setattr(vectors, "IN_CI", False)
    with pytest.raises(pytest.skip.Exception):
        vectors.vectors_dir(WIRE)
    (tmp_path / "vectors" / WIRE).mkdir(parents=True)
    assert vectors.vectors_dir(WIRE) == tmp_path / "vectors" / WIRE
