"""Every shared vector verifies, canonicalises byte for byte, and no tampered copy passes."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from nacl.signing import SigningKey

from protocol.envelope import EnvelopeError, Format, Reason, detect, sign_agentprotocol, verify
from protocol.envelope.agentprotocol import signing_form as ap_signing_form
from protocol.envelope.agora import signing_form as agora_signing_form
from protocol.envelope.canonical import jcs, js_canonical
from protocol.envelope.verification import parse_timestamp
from protocol.identity import (
    agentprotocol_agent_id,
    b64,
    b64_decode_strict,
    did_key,
    public_key_from_id,
    public_key_from_spki_b64,
    spki_der,
)
from tests.support.vectors import cases, load_json, vectors_dir

AGORA = vectors_dir("agora-1.0")
AP = vectors_dir("agentprotocol-0.1")
AGORA_CASES = cases(AGORA)
AP_CASES = cases(AP)
AP_KEY = load_json(AP / "key.json")
AP_PUBLIC = public_key_from_spki_b64(AP_KEY["publicKey_spki_der_b64"])
AP_KEYS = {AP_KEY["agentId_from_getAgentId"]: AP_PUBLIC}


def ids(paths: list[Path]) -> list[str]:
    return [p.name for p in paths]


def when(envelope: dict[str, Any]) -> float:
    return parse_timestamp(envelope["timestamp"]) + 1.0


# ── agora/1.0 ───────────────────────────────────────────────────────────────


@pytest.mark.parametrize("case", AGORA_CASES, ids=ids(AGORA_CASES))
def test_agora_vector_canonical_form_is_exact(case: Path) -> None:
    envelope = load_json(case / "input.json")
    expected = (case / "canonical.json").read_bytes().rstrip(b"\n")
    assert jcs(agora_signing_form(envelope)) == expected


@pytest.mark.parametrize("case", AGORA_CASES, ids=ids(AGORA_CASES))
def test_agora_vector_verifies(case: Path) -> None:
    envelope = load_json(case / "input.json")
    public = (case / "publicKey.txt").read_text().strip()
    assert envelope["sender"]["id"] == public
    assert envelope["sender"]["signature"] == (case / "signature.txt").read_text().strip()
    v = verify(envelope, now=when(envelope))
    assert v.format is Format.AGORA
    assert v.id == envelope["id"]
    assert v.type == envelope["type"]
    assert v.public_key == public_key_from_id(public)
    assert v.signer == v.did == did_key(v.public_key)


@pytest.mark.parametrize("case", AGORA_CASES, ids=ids(AGORA_CASES))
def test_agora_vector_with_signature_removed_instead_of_blanked_does_not_match(
    case: Path,
) -> None:
    envelope = load_json(case / "input.json")
    removed = copy.deepcopy(envelope)
    del removed["sender"]["signature"]
    assert jcs(removed) != (case / "canonical.json").read_bytes().rstrip(b"\n")


def test_the_other_agora_format_file_is_canonicalised_but_is_not_an_agora_envelope() -> None:
    # A later envelope layout (version/ts, no "protocol") with placeholder
    # signatures: its canonical strings still pin RFC 8785, nothing verifies.
    entries = load_json(AGORA / "envelope.valid.json")
    assert entries
    for entry in entries:
        assert jcs(entry["envelope"]).decode() == entry["canonical"]
        assert detect(entry["envelope"]) is None
        with pytest.raises(EnvelopeError) as err:
            verify(entry["envelope"], now=0.0)
        assert err.value.reason is Reason.MALFORMED


# ── agentprotocol/0.1 ───────────────────────────────────────────────────────


def test_agentprotocol_key_file_formats_agree() -> None:
    seed = bytes.fromhex(AP_KEY["seed_hex"])
    public = bytes(SigningKey(seed).verify_key)
    assert public == AP_PUBLIC
    assert b64(public) == AP_KEY["publicKey_raw_b64"]
    assert b64(spki_der(public)) == AP_KEY["publicKey_spki_der_b64"]
    assert (
        agentprotocol_agent_id(AP_KEY["publicKey_spki_der_b64"])
        == AP_KEY["agentId_from_getAgentId"]
    )
    # PKCS8-DER of the seed: a fixed 16-byte header, then the seed.
    assert b64_decode_strict(AP_KEY["privateKey_pkcs8_der_b64"])[16:] == seed


@pytest.mark.parametrize("case", AP_CASES, ids=ids(AP_CASES))
def test_agentprotocol_vector_canonical_form_is_exact(case: Path) -> None:
    message = load_json(case / "signed.json")
    expected = (case / "canonical.txt").read_bytes()
    assert js_canonical(ap_signing_form(message)) == expected


@pytest.mark.parametrize("case", AP_CASES, ids=ids(AP_CASES))
def test_agentprotocol_vector_verifies_with_the_known_key(case: Path) -> None:
    message = load_json(case / "signed.json")
    assert message["signature"] == (case / "signature.txt").read_text().strip()
    v = verify(message, now=when(message), keys=AP_KEYS)
    assert v.format is Format.AGENTPROTOCOL
    assert v.signer == AP_KEY["agentId_from_getAgentId"]
    assert v.public_key == AP_PUBLIC


@pytest.mark.parametrize("case", AP_CASES, ids=ids(AP_CASES))
def test_agentprotocol_vector_signature_is_reproduced_exactly(case: Path) -> None:
    # Ed25519 is deterministic: signing the same bytes gives the same signature.
    message = load_json(case / "signed.json")
    key = SigningKey(bytes.fromhex(AP_KEY["seed_hex"]))
    resigned = sign_agentprotocol(ap_signing_form(message), key)
    assert resigned["signature"] == (case / "signature.txt").read_text().strip()


@pytest.mark.parametrize("case", AP_CASES, ids=ids(AP_CASES))
def test_agentprotocol_vector_without_a_known_key_is_refused(case: Path) -> None:
    # The vectors carry only the derived agentId, which does not contain the key.
    message = load_json(case / "signed.json")
    with pytest.raises(EnvelopeError) as err:
        verify(message, now=when(message))
    assert err.value.reason is Reason.UNKNOWN_KEY


# ── tampering ───────────────────────────────────────────────────────────────


def _changed(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value * 2 + 1
    if isinstance(value, str):
        return value + "x" if value else "x"
    return 0  # null


def tampered(doc: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[str, Any]]:
    """Every single-edit variant of ``doc``: each leaf changed, each key
    removed or renamed, a key or element added to each container."""

    def at(p: tuple[Any, ...]) -> tuple[Any, Any]:
        root = copy.deepcopy(doc)
        node = root
        for step in p:
            node = node[step]
        return root, node

    def walk(node: Any, p: tuple[Any, ...]) -> Iterator[tuple[str, Any]]:
        if isinstance(node, dict):
            root, target = at(p)
            target["tamper"] = 1
            yield f"{p} add key", root
            for key, value in node.items():
                root, target = at(p)
                del target[key]
                yield f"{(*p, key)} removed", root
                root, target = at(p)
                target[key + "x"] = target.pop(key)
                yield f"{(*p, key)} renamed", root
                yield from walk(value, (*p, key))
        elif isinstance(node, list):
            root, target = at(p)
            target.append("tamper")
            yield f"{p} append", root
            for i, value in enumerate(node):
                yield from walk(value, (*p, i))
        else:
            root = copy.deepcopy(doc)
            parent = root
            for step in p[:-1]:
                parent = parent[step]
            parent[p[-1]] = _changed(node)
            yield f"{p} changed", root

    yield from walk(doc, path)


def _all_tampered() -> list[tuple[str, str, Any, float]]:
    out = []
    for case in AGORA_CASES:
        envelope = load_json(case / "input.json")
        for what, copy_ in tampered(envelope):
            out.append((f"agora/{case.name}: {what}", "agora", copy_, when(envelope)))
    for case in AP_CASES:
        message = load_json(case / "signed.json")
        for what, copy_ in tampered(message):
            out.append((f"ap/{case.name}: {what}", "ap", copy_, when(message)))
    return out


TAMPERED = _all_tampered()


def test_there_are_many_tampered_copies() -> None:
    assert len(TAMPERED) > 300


@pytest.mark.parametrize(
    ("what", "kind", "envelope", "now"), TAMPERED, ids=[t[0] for t in TAMPERED]
)
def test_every_tampered_copy_fails(what: str, kind: str, envelope: Any, now: float) -> None:
    with pytest.raises(EnvelopeError):
        verify(envelope, now=now, keys=AP_KEYS if kind == "ap" else None)


@pytest.mark.parametrize("case", AGORA_CASES + AP_CASES, ids=ids(AGORA_CASES + AP_CASES))
def test_a_changed_payload_is_a_bad_signature(case: Path) -> None:
    doc = load_json(case / ("input.json" if (case / "input.json").exists() else "signed.json"))
    doc["payload"]["tamper"] = "x"
    with pytest.raises(EnvelopeError) as err:
        verify(doc, now=when(doc), keys=AP_KEYS)
    assert err.value.reason is Reason.BAD_SIGNATURE
