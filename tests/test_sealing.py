"""envreplica.impl.sealing: values sealed to their records, receipt MACs, the master key."""

from __future__ import annotations

import os
import pickle
import secrets

import pytest
from hypothesis import given
from hypothesis import strategies as st

from envreplica.impl import sealing
from envreplica.impl.sealing import (
    GENERATE_HINT,
    RECEIPT_HMAC_DOMAIN,
    RECEIPT_MAC_INFO,
    VALUE_SEAL_INFO,
    KeyConfigError,
    SealError,
    Sealer,
    TextEncoding,
    _hkdf,
    load_master_key,
    node_utf8,
)

MASTER = bytes(range(32))
SECRET = "s3cr3t-Plaintext-\u00e9\U0001f511"
RECORD = dict(
    project_id="proj-1",
    key="DATABASE_URL",
    revision=3,
    generation=2,
    value_ref={"kind": "staged", "stagingId": "stg-abc"},
)


@pytest.fixture(scope="module")
def sealer() -> Sealer:
    return Sealer(MASTER)


# ---------------------------------------------------------------------------
# Sealing.
# ---------------------------------------------------------------------------


def test_round_trip(sealer):
    blob = sealer.seal(SECRET, **RECORD)
    assert sealer.open(blob, **RECORD) == SECRET


def test_blob_layout(sealer):
    blob = sealer.seal("abc", **RECORD)
    assert blob[0] == 0x01
    assert len(blob) == 1 + 12 + len(b"abc") + 16


@pytest.mark.parametrize(
    "field, other",
    [
        ("project_id", "proj-2"),
        ("key", "DATABASE_URL2"),
        ("revision", 4),
        ("generation", 1),
        ("value_ref", {"kind": "staged", "stagingId": "stg-abd"}),
        ("value_ref", {"kind": "legacy", "ssmVersion": 3}),
    ],
)
def test_every_bound_field_changed_fails(sealer, field, other):
    blob = sealer.seal(SECRET, **RECORD)
    with pytest.raises(SealError) as info:
        sealer.open(blob, **{**RECORD, field: other})
    assert SECRET not in str(info.value)


def test_field_boundaries_are_unambiguous(sealer):
    # With concatenation "ab"+"c" and "a"+"bc" would collide; the JSON AAD does not.
    blob = sealer.seal(SECRET, **{**RECORD, "project_id": "ab", "key": "c"})
    with pytest.raises(SealError):
        sealer.open(blob, **{**RECORD, "project_id": "a", "key": "bc"})


def test_other_master_key_fails(sealer):
    blob = sealer.seal(SECRET, **RECORD)
    with pytest.raises(SealError):
        Sealer(bytes(32)).open(blob, **RECORD)


def _flip(blob: bytes, index: int, bit: int = 0) -> bytes:
    b = bytearray(blob)
    b[index] ^= 1 << bit
    return bytes(b)


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param(lambda b: _flip(b, -1), id="tag-bit"),
        pytest.param(lambda b: _flip(b, 1), id="nonce-bit"),
        pytest.param(lambda b: _flip(b, 13), id="ciphertext-bit"),
        pytest.param(lambda b: _flip(b, 0), id="version-byte"),
        pytest.param(lambda b: b[:-1], id="truncated-by-one"),
        pytest.param(lambda b: b[:20], id="truncated-short"),
        pytest.param(lambda b: b"", id="empty"),
        pytest.param(lambda b: b + b"\x00", id="extended"),
    ],
)
def test_tampered_blob_fails(sealer, tamper):
    blob = sealer.seal(SECRET, **RECORD)
    with pytest.raises(SealError) as info:
        sealer.open(tamper(blob), **RECORD)
    msg = str(info.value)
    assert "does not belong to this record" in msg
    assert "fails closed" in msg
    assert SECRET not in msg
    # No chained InvalidTag / decode error in the traceback.
    assert info.value.__cause__ is None
    assert info.value.__context__ is None or info.value.__suppress_context__


def test_two_seals_differ(sealer):
    a = sealer.seal(SECRET, **RECORD)
    b = sealer.seal(SECRET, **RECORD)
    assert a != b
    assert a[1:13] != b[1:13]  # nonces
    assert sealer.open(a, **RECORD) == sealer.open(b, **RECORD) == SECRET


def test_plaintext_not_in_blob(sealer):
    value = "PLAINTEXT-MARKER-" * 4
    blob = sealer.seal(value, **RECORD)
    assert value.encode() not in blob
    assert b"PLAINTEXT-MARKER" not in blob


def test_seal_error_message_never_contains_value(sealer):
    value = "hunter2-very-secret"
    blob = sealer.seal(value, **RECORD)
    with pytest.raises(SealError) as info:
        sealer.open(blob, **{**RECORD, "revision": 99})
    assert value not in str(info.value)
    assert value not in repr(info.value)


# Every string the wire allows: lone surrogates (JavaScript's JSON.stringify writes them), NUL, non-BMP,
# empty, large. EXACT gives back exactly what was sealed; NODE_UTF8 is the seed's Node encoding.
ANY_TEXT = ["", "\x00", "a\x00b", "\ud800", "bad\ud800", "\udc00x\ud83d", "\U0001F600", "\ud83d\ude00",
            "é\u2028\ufeff", "x" * 300_000, "\U0001F600\ud800" * 1000]


@pytest.mark.parametrize("value", ANY_TEXT, ids=lambda v: repr(v)[:20])
def test_exact_text_round_trips_every_string(sealer, value):
    blob = sealer.seal(value, **RECORD, text=TextEncoding.EXACT)
    assert sealer.open(blob, **RECORD) == value


@pytest.mark.parametrize("value, served", [
    ("bad\ud800", "bad\ufffd"),              # Buffer.from("bad\ud800", "utf8") is 62 61 64 ef bf bd
    ("\udc00x\ud83d", "\ufffdx\ufffd"),
    ("\ud83d\ude00", "\U0001F600"),          # a surrogate pair is one character, in JavaScript too
    ("plain \x00 é \U0001F600", "plain \x00 é \U0001F600"),
])
def test_node_utf8_is_what_the_seed_serves(sealer, value, served):
    assert node_utf8(value) == served.encode("utf-8")
    blob = sealer.seal(value, **RECORD, text=TextEncoding.NODE_UTF8)
    assert sealer.open(blob, **RECORD) == served


def test_node_utf8_matches_buffer_from_bytes():
    # Measured with Node (library-notes.md): Buffer.from("bad\ud800", "utf8") -> 626164efbfbd.
    assert node_utf8("bad\ud800").hex() == "626164efbfbd"


def test_bound_field_types_checked(sealer):
    with pytest.raises(TypeError):
        sealer.seal("v", **{**RECORD, "revision": True})
    with pytest.raises(TypeError):
        sealer.seal("v", **{**RECORD, "generation": "2"})
    with pytest.raises(TypeError):
        sealer.seal(b"v", **RECORD)


def test_associated_data_is_canonical_json():
    aad = sealing.associated_data(**RECORD)
    assert aad == (
        b'{"generation":2,"key":"DATABASE_URL","projectId":"proj-1","revision":3,'
        b'"v":1,"valueRef":{"kind":"staged","stagingId":"stg-abc"}}'
    )
    # ensure_ascii=False: non-ASCII is UTF-8, not \u escapes.
    assert "é".encode() in sealing.associated_data(**{**RECORD, "key": "é"})


def test_repr_and_pickle_hide_keys(sealer):
    assert repr(sealer) == "Sealer(<keys hidden>)"
    assert MASTER.hex() not in repr(sealer)
    with pytest.raises(TypeError):
        pickle.dumps(sealer)


def test_sealer_rejects_wrong_key_length():
    with pytest.raises(ValueError):
        Sealer(bytes(31))
    with pytest.raises(TypeError):
        Sealer(MASTER.hex())


@given(st.text())
def test_property_round_trip_text(value):
    s = Sealer(MASTER)
    assert s.open(s.seal(value, **RECORD), **RECORD) == value


@given(
    value=st.one_of(
        st.just(""),
        st.text(alphabet=st.characters(min_codepoint=0x10000)),  # astral plane
        st.text(alphabet=st.characters(codec="utf-8"), max_size=200),
    ),
    project_id=st.text(),
    key=st.text(min_size=1),
    revision=st.integers(min_value=0),
    generation=st.integers(min_value=0),
)
def test_property_round_trip_any_record(value, project_id, key, revision, generation):
    s = Sealer(MASTER)
    rec = dict(
        project_id=project_id,
        key=key,
        revision=revision,
        generation=generation,
        value_ref={"kind": "legacy", "ssmVersion": revision},
    )
    assert s.open(s.seal(value, **rec), **rec) == value


def test_empty_and_astral_explicitly(sealer):
    for value in ("", "\U0001f600\U00010348", "\x00"):
        assert sealer.open(sealer.seal(value, **RECORD), **RECORD) == value


# ---------------------------------------------------------------------------
# Subkeys and MACs.
# ---------------------------------------------------------------------------


def test_hkdf_subkeys_differ():
    seal_key = _hkdf(MASTER, VALUE_SEAL_INFO)
    mac_key = _hkdf(MASTER, RECEIPT_MAC_INFO)
    assert len(seal_key) == len(mac_key) == 32
    assert seal_key != mac_key
    assert seal_key != MASTER and mac_key != MASTER
    assert VALUE_SEAL_INFO == b"envreplica/value-seal/v1"
    assert RECEIPT_MAC_INFO == b"envreplica/receipt-mac/v1"


def test_mac_uses_mac_subkey_and_domain(sealer):
    import hashlib
    import hmac

    msg = b'{"kind":"apply"}'
    expected = hmac.new(_hkdf(MASTER, RECEIPT_MAC_INFO), RECEIPT_HMAC_DOMAIN + msg, hashlib.sha256).hexdigest()
    assert sealer.mac(msg) == expected
    assert RECEIPT_HMAC_DOMAIN == b"envreplica.replica_receipt.v1\0"
    # Neither the raw master key nor the seal subkey is the MAC key.
    for k in (MASTER, _hkdf(MASTER, VALUE_SEAL_INFO)):
        assert sealer.mac(msg) != hmac.new(k, RECEIPT_HMAC_DOMAIN + msg, hashlib.sha256).hexdigest()


def test_mac_deterministic_and_distinct(sealer):
    m1 = sealer.mac(b"message one")
    assert m1 == sealer.mac(b"message one") == Sealer(MASTER).mac(b"message one")
    assert len(m1) == 64 and m1 == m1.lower()
    assert m1 != sealer.mac(b"message two")
    assert m1 != Sealer(bytes(32)).mac(b"message one")


def test_same_mac(sealer):
    m = sealer.mac(b"x")
    other = sealer.mac(b"y")
    assert Sealer.same_mac(m, m)
    assert sealer.same_mac(m, str(m))
    assert not sealer.same_mac(m, other)


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "0" * 63,
        "0" * 65,
        "A" * 64,  # uppercase
        "g" * 64,  # not hex
        "0" * 63 + "\n",
        "0" * 64 + "\n",  # trailing newline: fullmatch, not `$`
        " " + "0" * 63,
        None,
        b"0" * 64,
    ],
)
def test_same_mac_rejects_malformed(sealer, bad):
    good = sealer.mac(b"x")
    assert not Sealer.same_mac(bad, bad)
    assert not Sealer.same_mac(good, bad)
    assert not Sealer.same_mac(bad, good)


def test_same_mac_rejects_uppercase_of_equal_mac(sealer):
    m = sealer.mac(b"x")
    assert m != m.upper()  # deterministic: this MAC has hex letters
    assert not Sealer.same_mac(m, m.upper())


# ---------------------------------------------------------------------------
# load_master_key.
# ---------------------------------------------------------------------------


def _key_file(tmp_path, content: str, mode: int):
    p = tmp_path / "master.key"
    p.write_text(content)
    os.chmod(p, mode)
    return p


def test_env_hex(monkeypatch):
    hexkey = secrets.token_hex(32)
    assert load_master_key({"ENVREPLICA_MASTER_KEY": hexkey}) == bytes.fromhex(hexkey)
    assert load_master_key({"ENVREPLICA_MASTER_KEY": hexkey.upper()}) == bytes.fromhex(hexkey)


def test_default_env_is_os_environ(monkeypatch):
    hexkey = secrets.token_hex(32)
    monkeypatch.delenv("ENVREPLICA_MASTER_KEY_FILE", raising=False)
    monkeypatch.setenv("ENVREPLICA_MASTER_KEY", hexkey)
    assert load_master_key() == bytes.fromhex(hexkey)


@pytest.mark.parametrize("content_suffix", ["", "\n", "\r\n"])
def test_file_0600(tmp_path, content_suffix):
    hexkey = secrets.token_hex(32)
    p = _key_file(tmp_path, hexkey + content_suffix, 0o600)
    assert load_master_key({"ENVREPLICA_MASTER_KEY_FILE": str(p)}) == bytes.fromhex(hexkey)


def test_file_0400(tmp_path):
    hexkey = secrets.token_hex(32)
    p = _key_file(tmp_path, hexkey, 0o400)
    assert load_master_key({"ENVREPLICA_MASTER_KEY_FILE": str(p)}) == bytes.fromhex(hexkey)


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_file_group_or_world_access_rejected(tmp_path, mode):
    hexkey = secrets.token_hex(32)
    p = _key_file(tmp_path, hexkey, mode)
    with pytest.raises(KeyConfigError) as info:
        load_master_key({"ENVREPLICA_MASTER_KEY_FILE": str(p)})
    msg = str(info.value)
    assert f"chmod 600 {p}" in msg
    assert "ENVREPLICA_MASTER_KEY_FILE" in msg
    assert f"{mode:04o}" in msg
    assert hexkey not in msg


def test_file_missing(tmp_path):
    p = tmp_path / "nope.key"
    with pytest.raises(KeyConfigError) as info:
        load_master_key({"ENVREPLICA_MASTER_KEY_FILE": str(p)})
    assert str(p) in str(info.value)


def test_file_is_directory(tmp_path):
    d = tmp_path / "dir"
    d.mkdir(mode=0o700)
    with pytest.raises(KeyConfigError) as info:
        load_master_key({"ENVREPLICA_MASTER_KEY_FILE": str(d)})
    assert "regular file" in str(info.value)


@pytest.mark.parametrize(
    "content",
    [
        "ab" * 31,  # too short
        "ab" * 33,  # too long
        "zz" * 32,  # not hex
        "ab" * 32 + "\n\n",  # two newlines
        " " + "ab" * 32,
        "",
    ],
)
def test_file_bad_content_not_echoed(tmp_path, content):
    p = _key_file(tmp_path, content, 0o600)
    with pytest.raises(KeyConfigError) as info:
        load_master_key({"ENVREPLICA_MASTER_KEY_FILE": str(p)})
    msg = str(info.value)
    assert "ENVREPLICA_MASTER_KEY_FILE" in msg
    assert "64 hexadecimal characters" in msg
    if content.strip():
        assert content.strip() not in msg
    assert info.value.__cause__ is None


def test_file_non_ascii_content(tmp_path):
    p = tmp_path / "master.key"
    p.write_bytes(b"\xff" * 64)
    os.chmod(p, 0o600)
    with pytest.raises(KeyConfigError):
        load_master_key({"ENVREPLICA_MASTER_KEY_FILE": str(p)})


def test_both_set_rejected(tmp_path):
    hexkey = secrets.token_hex(32)
    p = _key_file(tmp_path, hexkey, 0o600)
    with pytest.raises(KeyConfigError) as info:
        load_master_key({"ENVREPLICA_MASTER_KEY": hexkey, "ENVREPLICA_MASTER_KEY_FILE": str(p)})
    msg = str(info.value)
    assert "ENVREPLICA_MASTER_KEY " in msg and "ENVREPLICA_MASTER_KEY_FILE" in msg
    assert "both" in msg
    assert hexkey not in msg


def test_none_set_rejected_with_hint():
    with pytest.raises(KeyConfigError) as info:
        load_master_key({})
    msg = str(info.value)
    assert "ENVREPLICA_MASTER_KEY" in msg and "ENVREPLICA_MASTER_KEY_FILE" in msg
    assert 'python -c "import secrets; print(secrets.token_hex(32))"' in msg
    assert GENERATE_HINT in msg
    assert "chmod 600" in msg


@pytest.mark.parametrize(
    "bad",
    [
        "deadbeef",  # too short
        "ab" * 33,  # too long
        "zq" * 32,  # right length, not hex
        "ab" * 32 + "\n",  # trailing newline in the env var
        "0x" + "ab" * 31,
        "",
        "my-passphrase-not-hex-0123456789-my-passphrase-not-hex-012345678",
    ],
)
def test_env_bad_hex_rejected_without_echo(bad):
    with pytest.raises(KeyConfigError) as info:
        load_master_key({"ENVREPLICA_MASTER_KEY": bad})
    msg = str(info.value)
    assert "ENVREPLICA_MASTER_KEY" in msg
    assert "64 hexadecimal characters" in msg
    assert GENERATE_HINT in msg
    if bad:
        assert bad not in msg and bad.strip() not in msg
    assert info.value.__cause__ is None


def test_empty_file_var_rejected():
    with pytest.raises(KeyConfigError) as info:
        load_master_key({"ENVREPLICA_MASTER_KEY_FILE": ""})
    assert "empty" in str(info.value)


def test_loaded_key_builds_a_working_sealer(tmp_path):
    p = _key_file(tmp_path, secrets.token_hex(32) + "\n", 0o600)
    s = Sealer(load_master_key({"ENVREPLICA_MASTER_KEY_FILE": str(p)}))
    assert s.open(s.seal(SECRET, **RECORD), **RECORD) == SECRET
