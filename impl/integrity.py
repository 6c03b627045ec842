"""Integrity at rest: every stored fact that decides what is served is authenticated.

The threat (docs/integrity.md): someone who can write the replica's
file but does not hold the master key (a backup restored over it, a stray
tool, an attacker with the file's permissions). What they can do, and what
detects it:

* **Edit a row, or write one row's contents into another.** Every row of every
  replica table carries a ``tag``: HMAC-SHA512 under a subkey of the master
  key over the row's table name and every column (primary key included), in
  an unambiguous length-prefixed encoding (``row_message``). An edited or
  swapped row does not verify. Receipts also bind the stream incarnation
  (``authority.stream_epoch``), so a receipt from an earlier run of a stream
  with the same id does not verify either.
* **Delete, insert or individually roll back rows.** A tag proves a row was
  written by the key holder once, not that it is current. Each row also
  yields a secret 256-bit *element* (the second half of the same HMAC), and
  each set of rows is summed into a *set digest* modulo 2**256 (AdHash,
  Bellare and Micciancio 1997): a project's records and values into its
  ``projects`` row, a staged project's rows into its ``stage_projects`` row,
  the project rows and the staged project rows and the receipts into the
  authority row, which is the root. A row deleted, inserted, or replaced by an
  older version of itself changes the sum. The elements never leave the
  process, and each stored digest is masked (XOR with a PRF of its scope and
  the write counter), so the file reveals neither elements nor their
  differences: forging a set means predicting PRF outputs.
* **Roll back the whole file.** Nothing inside the file can tell an older copy
  of itself from the current one. ``authority.write_counter`` counts committed
  write transactions; an optional anchor outside the file (``impl.anchor``)
  keeps the highest counter seen, and a replica whose counter is below it is
  refused. Without an anchor, whole-file rollback is not detected (docs/integrity.md).

Updates are incremental (``Digest`` arithmetic on the elements of the rows a
transaction changed), so a write costs a few HMACs however large the
replica. Verification of a whole set (every tag and the sum) happens where the
set is served or copied: a snapshot, a commit's promotion, a page that
re-stages a project, ``list_receipts``, ``verify``. A row whose tag fails is
never re-tagged: the write that meets it fails, so a tamper is never laundered.

Leaves out on purpose: hiding which keys, projects and revisions exist (only
values are secret, sealed by ``impl.sealing``), key rotation, and protection
against someone who holds the master key.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any, Iterable, NoReturn, Sequence

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from envreplica.spec.domain import CorruptReplica

__all__ = [
    "DIGEST_BYTES",
    "add",
    "hkdf",
    "masked",
    "sub",
    "total",
    "unmasked",
    "TAG_BYTES",
    "ZERO_DIGEST",
    "RowAuthenticator",
    "TamperDetected",
    "row_message",
]

ROW_TAG_INFO = b"envreplica/row-tag/v2"
DIGEST_MASK_INFO = b"envreplica/digest-mask/v2"
KEY_CHECK_INFO = b"envreplica/key-check/v2"
_ROW_DOMAIN = b"envreplica.row.v2\0"
_MASK_DOMAIN = b"envreplica.digest-mask.v2\0"
_KEY_CHECK_MESSAGE = b"envreplica.key-check.v2"

TAG_BYTES = 32
DIGEST_BYTES = 32
_MODULUS = 1 << (8 * DIGEST_BYTES)
#: The digest of the empty set.
ZERO_DIGEST = 0


class TamperDetected(CorruptReplica):
    """A stored fact does not authenticate: the file was changed outside envreplica.

    The message names the table and the row (primary key), never a value.
    """


def _field(value: Any) -> bytes:
    # Booleans are stored as integers; they encode as the integer they are.
    kind = type(value)
    if value is None:
        return b"n"
    if kind is bool:
        return b"i1;" if value else b"i0;"
    if kind is int:
        return b"i%d;" % value
    if kind is str:
        data: bytes = value.encode("utf-8", "surrogatepass")
        return b"s%d:" % len(data) + data
    if kind is bytes or kind is bytearray or kind is memoryview:
        data = bytes(value)
        return b"b%d:" % len(data) + data
    raise TypeError(f"a stored column holds a {kind.__name__}, which no envreplica row holds")


def row_message(table: str, values: Iterable[Any]) -> bytes:
    """The bytes a row's tag covers: domain, table name, then each column (type, length, bytes)."""
    return _ROW_DOMAIN + table.encode("ascii") + b"\0" + b"".join([_field(v) for v in values])


#: A verified row as remembered: (table, its stored columns, its tag).
_MemoKey = tuple[str, tuple[Any, ...], Any]


class RowAuthenticator:
    """Row tags, set elements, digest masks and the key check, from one master key (HKDF subkeys)."""

    __slots__ = ("_tag_key", "_mask_key", "_check", "_opened", "_masks")

    #: Rows remembered as verified (a row read again, byte for byte, need not be verified again).
    MEMO_ROWS = 20_000

    def __init__(self, master_key: bytes) -> None:
        master = bytes(master_key)
        self._tag_key = hkdf(master, ROW_TAG_INFO, 64)
        self._mask_key = hkdf(master, DIGEST_MASK_INFO, 32)
        self._check = hmac.digest(hkdf(master, KEY_CHECK_INFO, 32), _KEY_CHECK_MESSAGE, "sha256").hex()
        self._opened: dict[_MemoKey, int] = {}  # (table, stored columns, tag) -> element, for rows that verified
        self._masks: dict[tuple[bytes, int, int], tuple[int, ...]] = {}  # (scope, counter, n) -> the n masks

    def __repr__(self) -> str:
        return "RowAuthenticator(<keys hidden>)"

    def __reduce__(self) -> NoReturn:
        raise TypeError("RowAuthenticator holds key material and cannot be pickled")

    @property
    def key_check(self) -> str:
        """A public check value of the master key (HMAC of a constant under its own subkey)."""
        return self._check

    def seal_row(self, table: str, values: Sequence[Any]) -> tuple[bytes, int]:
        """(tag, element) of a row: one HMAC-SHA512, the first half stored, the second kept secret.

        The row is remembered as verified: reading back exactly these columns and
        this tag (the next transaction reads what this one wrote) costs no HMAC.
        """
        tag, element = self._tag(table, values)
        self._remember((table, tuple(values), tag), element)
        return tag, element

    def _tag(self, table: str, values: Sequence[Any]) -> tuple[bytes, int]:
        out = hmac.digest(self._tag_key, row_message(table, values), "sha512")
        return out[:TAG_BYTES], int.from_bytes(out[TAG_BYTES:], "big")

    def _remember(self, memo_key: _MemoKey, element: int) -> None:
        if sum(len(v) for v in memo_key[1] if isinstance(v, (bytes, str))) > 4096:
            return  # a value row with a large blob: not worth its memory
        if len(self._opened) >= self.MEMO_ROWS:
            self._opened.clear()
        try:
            self._opened[memo_key] = element
        except TypeError:  # pragma: no cover - every column envreplica writes is hashable
            pass

    def open_row(self, table: str, values: Sequence[Any], tag: Any, ident: tuple[object, ...]) -> int:
        """The element of a stored row whose tag verifies; ``TamperDetected`` naming it (``ident``) otherwise.

        A row that verified once is remembered (its exact columns and tag): reading
        the same bytes again gives the same answer, so it is not recomputed.
        """
        memo_key = (table, tuple(values), tag)
        try:
            known = self._opened.get(memo_key)
        except TypeError:  # an unhashable stored value: never ours
            known = None
        if known is not None:
            return known
        where = f"{table} row {'/'.join(map(str, ident))}"
        try:
            expected, element = self._tag(table, values)
        except (TypeError, UnicodeError, ValueError):
            raise TamperDetected(f"{where}: a column holds a value of a type envreplica never writes; "
                                 f"the file was changed outside envreplica") from None
        if type(tag) is not bytes or not hmac.compare_digest(expected, tag):
            raise TamperDetected(f"{where}: its integrity tag does not verify (the row was edited, moved or "
                                 f"written by something other than envreplica with this key)")
        self._remember(memo_key, element)
        return element

    def masks(self, scope: bytes, counter: int, n: int = 1) -> tuple[int, ...]:
        """``n`` masks for the stored digests of ``scope`` written at write ``counter`` (never reused).

        One keyed SHAKE-256 output (a PRF, as KMAC is) cut into ``n`` 256-bit masks.
        """
        k = (scope, counter, n)
        found = self._masks.get(k)
        if found is None:
            if len(self._masks) >= 4096:
                self._masks.clear()
            out = hashlib.shake_256(self._mask_key + _MASK_DOMAIN + scope + b"\0%d" % counter).digest(32 * n)
            found = self._masks[k] = tuple(int.from_bytes(out[i:i + 32], "big") for i in range(0, 32 * n, 32))
        return found

    def mask(self, scope: bytes, counter: int) -> int:
        """The mask of one stored digest of ``scope`` written at write ``counter``."""
        return self.masks(scope, counter, 1)[0]

    def store_digest(self, digest: int, scope: bytes, counter: int) -> bytes:
        """``digest`` masked for storage (one digest of ``scope``)."""
        return masked(digest, self.mask(scope, counter))

    def load_digest(self, stored: Any, scope: bytes, counter: int, where: str) -> int:
        """The digest behind a stored (already tag-verified) masked digest."""
        return unmasked(stored, self.mask(scope, counter), where)


def masked(digest: int, mask: int) -> bytes:
    """A digest as stored: XOR its mask."""
    return ((digest ^ mask) % _MODULUS).to_bytes(DIGEST_BYTES, "big")


def unmasked(stored: Any, mask: int, where: str) -> int:
    """The digest behind ``stored``, masked with ``mask``."""
    if type(stored) is not bytes or len(stored) != DIGEST_BYTES:
        raise TamperDetected(f"{where}: its set digest is malformed")
    return int.from_bytes(stored, "big") ^ mask


def add(digest: int, element: int) -> int:
    """``digest`` with one more row."""
    return (digest + element) % _MODULUS


def sub(digest: int, element: int) -> int:
    """``digest`` with one row fewer."""
    return (digest - element) % _MODULUS


def total(elements: Iterable[int]) -> int:
    """The digest of a set of rows."""
    return sum(elements) % _MODULUS


def hkdf(master: bytes, info: bytes, length: int = 32) -> bytes:
    """A subkey of ``master`` for ``info`` (HKDF-SHA256, no salt): every key envreplica uses comes from one."""
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=None, info=info).derive(master)
