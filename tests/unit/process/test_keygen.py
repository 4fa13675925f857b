import orjson
from nacl.signing import SigningKey

from hub.process.cli import main
from protocol.identity import b58decode, b58encode, b64url_decode, did_key, public_key_from_did


def test_base58_round_trip_and_leading_zeros():
    for data in [b"", b"\0", b"\0\0abc", bytes(range(40))]:
        assert b58decode(b58encode(data)) == data
    assert b58encode(b"hello world") == "StV1DL6CwTryKyV"


def test_did_key_of_the_spec_example():
    # did:key spec example: Ed25519 keys start with z6Mk
    key = bytes(SigningKey.generate().verify_key)
    did = did_key(key)
    assert did.startswith("did:key:z6Mk")
    assert public_key_from_did(did) == key


def test_keygen_writes_a_private_file(tmp_path, capsys):
    out = tmp_path / "hub.key"
    assert main(["keygen", "--out", str(out)]) == 0
    doc = orjson.loads(out.read_bytes())
    assert capsys.readouterr().out.strip() == doc["did"]
    assert out.stat().st_mode & 0o777 == 0o600
    key = SigningKey(b64url_decode(doc["private_key"]))
    assert did_key(bytes(key.verify_key)) == doc["did"]
    assert main(["keygen", "--out", str(out)]) == 1  # refuses to overwrite


def test_keygen_refuses_to_overwrite_and_leaves_the_file_alone(tmp_path, capsys):
    out = tmp_path / "hub.key"
    assert main(["keygen", "--out", str(out)]) == 0
    before = out.read_bytes()
    capsys.readouterr()
    assert main(["keygen", "--out", str(out)]) == 1
    assert "--force" in capsys.readouterr().err
    assert out.read_bytes() == before


def test_keygen_force_overwrites_with_a_new_private_key(tmp_path, capsys):
    out = tmp_path / "hub.key"
    out.write_text("an old world-readable file")
    out.chmod(0o644)
    assert main(["keygen", "--out", str(out), "--force"]) == 0
    doc = orjson.loads(out.read_bytes())
    assert capsys.readouterr().out.strip() == doc["did"]
    assert out.stat().st_mode & 0o777 == 0o600  # tightened, not inherited
    assert main(["keygen", "--out", str(out), "--force"]) == 0
    assert orjson.loads(out.read_bytes())["did"] != doc["did"]


def test_keygen_to_a_path_it_cannot_write_says_why(tmp_path, capsys):
    for out, why in [
        (tmp_path / "no" / "such" / "dir.key", "No such file"),
        (tmp_path, "directory"),
    ]:
        assert main(["keygen", "--out", str(out), "--force"]) == 1
        captured = capsys.readouterr()
        assert f"cannot write {out}" in captured.err and why in captured.err
        assert "Traceback" not in captured.err and captured.out == ""
