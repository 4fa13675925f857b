"""Protocol Documents and protocolSources."""

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.agora_http import (
    MAX_SOURCE_BYTES,
    AgoraHttpError,
    ErrorLayer,
    ProtocolDocument,
    ProtocolDocumentError,
    decode_source,
    encode_source,
    hash_document,
)
from tests.support.vectors import load_vector

SPEC_LAYOUT = (
    "name: Weather Information protocol\n"
    "description: A protocol to exchange information on weather\n"
    "multiround: false\n"
    "---\n"
    "The sender sends a JSON with the following fields:\n"
    "- location (string)\n"
    "---\n"
    "a later rule is part of the specification\n"
)


def test_parses_the_spec_layout():
    doc = ProtocolDocument.parse(SPEC_LAYOUT)
    assert doc.name == "Weather Information protocol"
    assert doc.description == "A protocol to exchange information on weather"
    assert doc.multiround is False
    assert doc.specification.startswith("The sender sends")
    assert doc.specification.endswith("---\na later rule is part of the specification\n")
    assert doc.text == SPEC_LAYOUT
    assert doc.hash == hash_document(SPEC_LAYOUT)


def test_parses_the_front_matter_layout_of_the_vectors():
    text = load_vector("agora-http-0.2", "agora_protocol_0.2.0_wire.json")["hash_examples"][2][
        "text"
    ]
    doc = ProtocolDocument.parse(text)
    assert (doc.name, doc.description, doc.multiround) == ("X", "Y", False)
    assert doc.specification == "Body text ü"
    assert doc.hash == hash_document(text)


def test_yaml_features_and_extra_metadata():
    text = (
        "---\r\n"
        'name: "Quoted: name"\r\n'
        "description: >\r\n  folded\r\n  text\r\n"
        "multiround: yes\r\n"
        "version: 2\r\n"
        "---  \r\n"
        "spec\r\n"
    )
    doc = ProtocolDocument.parse(text)
    assert doc.name == "Quoted: name"
    assert doc.description == "folded text\n"
    assert doc.multiround is True
    assert doc.metadata["version"] == 2
    assert doc.specification == "spec\r\n"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "no '---' line"),
        ("name: x\ndescription: y\nmultiround: false\n", "no '---' line"),
        ("name: x ---\nspec", "no '---' line"),
        ("---\nname: x\ndescription: y\nmultiround: false\n", "never closed"),
        ("name: [unclosed\n---\nspec", "not valid YAML"),
        ("name: x\n  bad: indent\n---\n", "not valid YAML"),
        ("when: 2020-13-45\n---\n", "not valid YAML"),
        ("[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\n---\n", "not valid YAML"),
        ("!!python/object:os.system {}\n---\n", "not valid YAML"),
        ("- a\n- b\n---\nspec", "YAML mapping"),
        ("just a line\n---\nspec", "YAML mapping"),
        ("\n---\nspec", "YAML mapping"),
        ("description: y\nmultiround: false\n---\n", "'name'"),
        ("name: ''\ndescription: y\nmultiround: false\n---\n", "'name'"),
        ("name: 5\ndescription: y\nmultiround: false\n---\n", "'name'"),
        (f"name: {'n' * 257}\ndescription: y\nmultiround: false\n---\n", "longer than 256"),
        ("name: x\nmultiround: false\n---\n", "'description'"),
        ("name: x\ndescription: [1]\nmultiround: false\n---\n", "'description'"),
        ("name: x\ndescription: y\n---\n", "'multiround'"),
        ("name: x\ndescription: y\nmultiround: 'true'\n---\n", "'multiround'"),
        ("name: x\ndescription: y\nmultiround: 1\n---\n", "'multiround'"),
    ],
)
def test_malformed_documents_are_reported(text, reason):
    with pytest.raises(ProtocolDocumentError) as info:
        ProtocolDocument.parse(text)
    assert reason in info.value.reason
    assert info.value.layer is ErrorLayer.AGORA
    assert info.value.error.startswith("Invalid protocol document: ")


def test_document_size_limit():
    head = "name: x\ndescription: y\nmultiround: false\n---\n"
    fits = head + "a" * (1000 - len(head))
    assert ProtocolDocument.parse(fits, max_bytes=1000).text == fits
    with pytest.raises(ProtocolDocumentError, match="larger than 1000 bytes"):
        ProtocolDocument.parse(fits + "a", max_bytes=1000)
    with pytest.raises(ProtocolDocumentError, match="larger than"):
        ProtocolDocument.parse(head + "a" * MAX_SOURCE_BYTES)


def test_a_document_that_is_not_text_is_reported():
    with pytest.raises(ProtocolDocumentError):
        ProtocolDocument.parse(b"name: x\n---\n")  # type: ignore[arg-type]


@given(st.text(max_size=300))
def test_parse_never_raises_anything_else(text):
    try:
        doc = ProtocolDocument.parse(text)
    except ProtocolDocumentError:
        return
    assert doc.hash == hash_document(text)


# ── sources ────────────────────────────────────────────────────────────────


def test_vector_data_uris_decode_to_their_text():
    for example in load_vector("agora-http-0.2", "agora_protocol_0.2.0_wire.json")["hash_examples"]:
        assert decode_source(example["data_uri"]) == example["text"]


@pytest.mark.parametrize(
    "source",
    [
        "data:text/plain;charset=utf-8;base64," + base64.b64encode("Ünï\ncode".encode()).decode(),
        "data:;base64," + base64.b64encode("Ünï\ncode".encode()).decode(),
        "DATA:text/markdown;charset=UTF-8,%C3%9Cn%C3%AF%0Acode",
        "data:,%C3%9Cn%C3%AF%0Acode",
        "data:text/plain;base64,w5xuw68KY29kZQ%3D%3D",
    ],
)
def test_data_uri_forms(source):
    assert decode_source(source) == "Ünï\ncode"


def test_plain_text_and_other_urls_are_text_never_fetched():
    assert decode_source("name: x\n---\nspec") == "name: x\n---\nspec"
    assert decode_source("https://example.com/p.md") == "https://example.com/p.md"
    assert decode_source("") == ""


@pytest.mark.parametrize(
    ("source", "fragment"),
    [
        ("data:text/plain;charset=utf-8", "no ','"),
        ("data:image/png;base64,iVBORw0KGgo=", "must be text"),
        ("data:text/plain;charset=latin-1,caf%E9", "must be UTF-8"),
        ("data:text/plain;charset=utf-8,caf%E9", "not valid UTF-8"),
        ("data:text/plain;base64,not base64!", "invalid base64"),
        ("data:text/plain;base64,abc", "invalid base64"),
        (5, "must be a string"),
    ],
)
def test_bad_sources_are_invalid_fields(source, fragment):
    with pytest.raises(AgoraHttpError) as info:
        decode_source(source)
    assert (info.value.layer, info.value.http_status) == (ErrorLayer.TRANSPORT, 400)
    assert fragment in info.value.error


@pytest.mark.parametrize(
    "encode",
    [
        lambda text: text,
        encode_source,
        lambda text: "data:text/plain;base64," + base64.b64encode(text.encode()).decode(),
    ],
)
def test_source_size_limit_in_every_form(encode):
    fits = "é" * 50  # 100 bytes
    assert decode_source(encode(fits), max_bytes=100) == fits
    with pytest.raises(AgoraHttpError, match="exceeds 100 bytes"):
        decode_source(encode(fits + "a"), max_bytes=100)


def test_oversized_source_is_refused_before_decoding():
    with pytest.raises(AgoraHttpError, match="exceeds"):
        decode_source("data:," + "%41" * (MAX_SOURCE_BYTES + 1))


@given(st.text(max_size=200))
def test_encode_then_decode_is_identity(text):
    assert decode_source(encode_source(text)) == text
