"""Sealing secret values at rest, and MACs for replica receipts.

What it does:

* ``load_master_key`` reads the 32-byte master key from exactly one of
  ``ENVREPLICA_MASTER_KEY`` (64 hex characters) or
  ``ENVREPLICA_MASTER_KEY_FILE`` (a path to an owner-only file holding 64 hex
  characters and an optional trailing newline). Every problem is a
  ``KeyConfigError`` that states the rule, names the source, and says what to
  do, without ever echoing key material.
* ``Sealer`` derives two independent subkeys from the master key with
  HKDF-SHA256 (distinct ``info`` labels): one for AES-256-GCM value sealing,
  one for HMAC-SHA256 receipt MACs. The master key itself is never used
  directly and is not kept.
* ``Sealer.seal`` encrypts one value with a fresh random 96-bit nonce and binds
  it to its record: the associated data is the canonical JSON of
  ``{"v", "projectId", "key", "revision", "generation", "valueRef"}`` (sorted
  keys, compact, UTF-8). A blob copied onto another record, another revision or
  generation, or another value reference does not open. Blob layout:
  ``0x01 || nonce (12 bytes) || ciphertext || tag (16 bytes)``.
* ``Sealer.open`` fails closed with ``SealError`` on any mismatch (version,
  length, authentication) and never says what the value was.
* ``Sealer.mac`` / ``Sealer.same_mac``: a domain-separated HMAC-SHA256 in hex,
  and its constant-time comparison that accepts only well-formed MACs.
* ``Sealer.rows``: the row tags, set digests and key check of integrity at
  rest (``impl.integrity``), from their own HKDF subkeys.
* The text of a value (``TextEncoding``). Any JSON string can arrive,
  including one with a lone surrogate (``"\\ud800"``, which JavaScript's
  ``JSON.stringify`` writes). ``NODE_UTF8`` is what the seed's Node does:
  ``cipher.update(value, "utf8")`` encodes each lone surrogate as U+FFFD, so
  the value served is not the value fetched (finding F3, variant ``seed``).
  ``EXACT`` (variant ``fixed``) keeps every code point: UTF-8 with lone
  surrogates encoded as themselves (Python's ``surrogatepass``), so opening
  gives back exactly the string sealed. Either way nothing raises, so no
  value can leave a delivery half-applied.

What it leaves out on purpose:

* Key rotation or key identifiers in the blob: one master key per replica;
  rotating it means re-fetching values (the blob's version byte leaves room).
* Storing the record fields in the blob: the caller supplies them on open,
  from the row the blob is read with; that is what makes a moved blob fail.
* Wiping keys from memory: Python cannot do it reliably, so it is not pretended.
* Checking the key file's owner uid, or the mode on non-POSIX systems: only the
  permission bits (``st_mode & 0o077``) are checked.
* Canonicalising what ``mac`` covers: the caller passes the exact bytes (for
  receipts, the canonical JSON of the semantic request).
* Logging: nothing here logs. No exception message, and no ``repr``, contains a
  plaintext value or key material.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import json
import os
import re
import secrets
import stat
from collections.abc import Mapping
from typing import Any, NoReturn, Optional

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from envreplica.impl.integrity import RowAuthenticator
from envreplica.impl.integrity import hkdf as _hkdf  # the one HKDF of every envreplica subkey

__all__ = [
    "ENV_KEY",
    "ENV_KEY_FILE",
    "GENERATE_HINT",
    "KeyConfigError",
    "RECEIPT_HMAC_DOMAIN",
    "SEAL_VERSION",
    "SealError",
    "Sealer",
    "TextEncoding",
    "node_utf8",
    "associated_data",
    "load_master_key",
]

ENV_KEY = "ENVREPLICA_MASTER_KEY"
ENV_KEY_FILE = "ENVREPLICA_MASTER_KEY_FILE"
GENERATE_HINT = 'python -c "import secrets; print(secrets.token_hex(32))"'

MASTER_KEY_BYTES = 32
SEAL_VERSION = 0x01
NONCE_BYTES = 12
TAG_BYTES = 16

VALUE_SEAL_INFO = b"envreplica/value-seal/v1"
RECEIPT_MAC_INFO = b"envreplica/receipt-mac/v1"
RECEIPT_HMAC_DOMAIN = b"envreplica.replica_receipt.v1\0"

_KEY_HEX = re.compile(r"[0-9a-fA-F]{64}")
_MAC_HEX = re.compile(r"[0-9a-f]{64}")
_MAX_KEY_FILE_BYTES = 4096


class TextEncoding(str, enum.Enum):
    """How a value's text becomes the bytes that are sealed."""

    NODE_UTF8 = "node-utf8"  # the seed (Node's Buffer.from(s, "utf8")): lone surrogates become U+FFFD
    EXACT = "exact"  # every code point kept; lone surrogates round-trip (FIX(F3))


def node_utf8(value: str) -> bytes:
    """``Buffer.from(value, "utf8")`` of Node: UTF-8 with each lone surrogate as U+FFFD (EF BF BD).

    A high surrogate followed by a low one is a pair (one non-BMP character),
    as in JavaScript's UTF-16 strings.
    """
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError:
        pass
    return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace").encode("utf-8")


def _plaintext(value: str, text: "TextEncoding") -> bytes:
    if text is TextEncoding.EXACT:
        return value.encode("utf-8", "surrogatepass")
    return node_utf8(value)


class KeyConfigError(Exception):
    """The master key is not configured correctly (the message says how to fix it)."""


class SealError(Exception):
    """A sealed value does not open for the record it was read with."""


# ---------------------------------------------------------------------------
# The master key.
# ---------------------------------------------------------------------------


def _parse_key_hex(text: str, source: str) -> bytes:
    """64 hex characters -> 32 bytes; the error names ``source``, never the text."""
    if _KEY_HEX.fullmatch(text) is None:
        raise KeyConfigError(
            f"{source} must be exactly 64 hexadecimal characters (0-9, a-f or A-F) encoding "
            f"a {MASTER_KEY_BYTES}-byte key; the value given is not (it has "
            f"{len(text)} characters; its content is not shown). "
            f"Generate a key with: {GENERATE_HINT}"
        )
    return bytes.fromhex(text)


def _read_key_file(path: str) -> bytes:
    source = f"{ENV_KEY_FILE} ({path!r})"
    try:
        # O_NONBLOCK: a FIFO opens at once (and is refused below) instead of waiting for a writer forever.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise KeyConfigError(
            f"{source} must name a readable file holding the master key; opening it "
            f"failed: {exc.strerror or type(exc).__name__}. Point {ENV_KEY_FILE} at an "
            f"existing owner-only file, or set {ENV_KEY} instead."
        ) from None
    try:
        # fstat on the open descriptor: the file checked is the file read.
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise KeyConfigError(
                f"{source} must be a regular file holding the master key; it is not. "
                f"Point {ENV_KEY_FILE} at a file containing 64 hex characters."
            )
        if st.st_mode & 0o077:
            raise KeyConfigError(
                f"{source} must be readable by its owner only (no group or other "
                f"permission bits), but its mode is {stat.S_IMODE(st.st_mode):04o}. "
                f"Run: chmod 600 {path}"
            )
        raw = os.read(fd, _MAX_KEY_FILE_BYTES + 1)
    finally:
        os.close(fd)
    if len(raw) > _MAX_KEY_FILE_BYTES:
        raise KeyConfigError(
            f"{source} must hold only 64 hex characters and an optional trailing "
            f"newline; it is far larger. Point {ENV_KEY_FILE} at the key file itself."
        )
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        text = None
    if text is not None:
        if text.endswith("\r\n"):
            text = text[:-2]
        elif text.endswith("\n"):
            text = text[:-1]
    if text is None or _KEY_HEX.fullmatch(text) is None:
        n = len(raw)
        raise KeyConfigError(
            f"{source} must contain exactly 64 hexadecimal characters (0-9, a-f or A-F) and "
            f"an optional trailing newline (\\n or \\r\\n); it does not ({n} bytes; the content is "
            f"not shown). Generate a key with: {GENERATE_HINT} > {path} && chmod 600 {path}"
        )
    return bytes.fromhex(text)


def master_key_if_set(env: Mapping[str, str] = os.environ) -> Optional[bytes]:
    """``load_master_key`` when either variable is set (``KeyConfigError`` as it raises); None when neither is:
    a command that can run without the key (``migrate`` refuses only a step that needs it) reads it so."""
    return load_master_key(env) if (ENV_KEY in env or ENV_KEY_FILE in env) else None


def load_master_key(env: Mapping[str, str] = os.environ) -> bytes:
    """The 32-byte master key from ``ENVREPLICA_MASTER_KEY`` or ``..._FILE``.

    Exactly one of the two must be set (an empty value counts as set, and then
    fails validation: misconfiguration fails closed). Raises ``KeyConfigError``.
    """
    has_key = ENV_KEY in env
    has_file = ENV_KEY_FILE in env
    if has_key and has_file:
        raise KeyConfigError(
            f"Set exactly one of {ENV_KEY} and {ENV_KEY_FILE}; both are set, so it is "
            f"ambiguous which key to use. Unset one of them."
        )
    if has_key:
        return _parse_key_hex(env[ENV_KEY], ENV_KEY)
    if has_file:
        path = env[ENV_KEY_FILE]
        if not path:
            raise KeyConfigError(
                f"{ENV_KEY_FILE} must be a path to the key file; it is set but empty. "
                f"Set it to a path, or unset it and set {ENV_KEY}."
            )
        return _read_key_file(path)
    raise KeyConfigError(
        f"No master key configured: set {ENV_KEY} to 64 hex characters, or "
        f"{ENV_KEY_FILE} to the path of an owner-only (chmod 600) file containing "
        f"them. Generate a key with: {GENERATE_HINT}"
    )


# ---------------------------------------------------------------------------
# Sealing and MACs.
# ---------------------------------------------------------------------------


def associated_data(
    *, project_id: str, key: str, revision: int, generation: int, value_ref: Mapping[str, Any]
) -> bytes:
    """The canonical JSON that binds a sealed value to its record (UTF-8 bytes)."""
    if not isinstance(project_id, str):
        raise TypeError("project_id must be a str")
    if not isinstance(key, str):
        raise TypeError("key must be a str")
    for name, n in (("revision", revision), ("generation", generation)):
        if not isinstance(n, int) or isinstance(n, bool):
            raise TypeError(f"{name} must be an int")
    if not isinstance(value_ref, Mapping):
        raise TypeError("value_ref must be a mapping")
    doc = {
        "v": 1,
        "projectId": project_id,
        "key": key,
        "revision": revision,
        "generation": generation,
        "valueRef": dict(value_ref),
    }
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("the record fields are not valid Unicode (lone surrogate)") from None


class Sealer:
    """Seals values to their records and MACs receipts, with HKDF subkeys of one master key."""

    __slots__ = ("_aead", "_mac_key", "rows")

    def __init__(self, master_key: bytes) -> None:
        if not isinstance(master_key, (bytes, bytearray)):
            raise TypeError("master_key must be bytes")
        if len(master_key) != MASTER_KEY_BYTES:
            raise ValueError(f"master_key must be {MASTER_KEY_BYTES} bytes, got {len(master_key)}")
        master = bytes(master_key)
        self._aead = AESGCM(_hkdf(master, VALUE_SEAL_INFO))
        self._mac_key = _hkdf(master, RECEIPT_MAC_INFO)
        self.rows = RowAuthenticator(master)

    def __repr__(self) -> str:
        return "Sealer(<keys hidden>)"

    def __reduce__(self) -> NoReturn:
        raise TypeError("Sealer holds key material and cannot be pickled")

    def seal(
        self,
        value: str,
        *,
        project_id: str,
        key: str,
        revision: int,
        generation: int,
        value_ref: Mapping[str, Any],
        text: TextEncoding = TextEncoding.EXACT,
    ) -> bytes:
        """``0x01 || nonce || AES-256-GCM(value)``, bound to the record's fields; ``text`` as above."""
        if not isinstance(value, str):
            raise TypeError("value must be a str")
        plaintext = _plaintext(value, TextEncoding(text))
        aad = associated_data(
            project_id=project_id, key=key, revision=revision, generation=generation, value_ref=value_ref
        )
        nonce = secrets.token_bytes(NONCE_BYTES)
        return bytes([SEAL_VERSION]) + nonce + self._aead.encrypt(nonce, plaintext, aad)

    def open(
        self,
        blob: bytes,
        *,
        project_id: str,
        key: str,
        revision: int,
        generation: int,
        value_ref: Mapping[str, Any],
    ) -> str:
        """The value sealed in ``blob`` for exactly this record, or ``SealError``."""
        aad = associated_data(
            project_id=project_id, key=key, revision=revision, generation=generation, value_ref=value_ref
        )
        if not isinstance(blob, (bytes, bytearray, memoryview)):
            raise SealError(_refusal("it is not bytes"))
        blob = bytes(blob)
        if len(blob) < 1 + NONCE_BYTES + TAG_BYTES:
            raise SealError(_refusal("it is too short to be a sealed value"))
        if blob[0] != SEAL_VERSION:
            raise SealError(_refusal(f"its format version {blob[0]} is not {SEAL_VERSION}"))
        nonce = blob[1 : 1 + NONCE_BYTES]
        try:
            plaintext = self._aead.decrypt(nonce, blob[1 + NONCE_BYTES :], aad)
        except InvalidTag:
            raise SealError(_refusal("it does not authenticate")) from None
        try:
            # Lone surrogates were sealed as themselves (TextEncoding.EXACT): they come back as such.
            return plaintext.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:  # authenticated but not ours: never expected
            raise SealError(_refusal("its content is not UTF-8")) from None

    def mac(self, message: bytes) -> str:
        """Hex HMAC-SHA256 of ``RECEIPT_HMAC_DOMAIN || message`` under the MAC subkey."""
        if not isinstance(message, (bytes, bytearray, memoryview)):
            raise TypeError("message must be bytes")
        return hmac.new(self._mac_key, RECEIPT_HMAC_DOMAIN + bytes(message), hashlib.sha256).hexdigest()

    @staticmethod
    def same_mac(a: str, b: str) -> bool:
        """True iff both are 64 lowercase hex characters and equal (constant time)."""
        if not isinstance(a, str) or not isinstance(b, str):
            return False
        if _MAC_HEX.fullmatch(a) is None or _MAC_HEX.fullmatch(b) is None:
            return False
        return hmac.compare_digest(bytes.fromhex(a), bytes.fromhex(b))


def _refusal(why: str) -> str:
    return (
        f"sealed value does not belong to this record ({why}); "
        "the read fails closed and the value is treated as unavailable"
    )
