"""Value stores the implementation reads: an embedded one, and AWS SSM Parameter Store.

Models: the seed's ``ProjectEnvReplicaValueReader`` (docs/protocol.md section
4) as a small interface, ``ValueReader``, with two readers:

- ``EmbeddedStore``: an in-process, thread-safe store that needs no cloud
  account, so first runs and the conformance adapter (``store.put`` /
  ``store.fail``, section 5) work offline. It can also produce answers real
  SSM never gives (a legacy read reporting another version than asked).
- ``SsmStore``: SSM Parameter Store through boto3. A staged value is the
  parameter itself; a legacy value is one version of it (``name:version``).

A reader answers the value text (and, for legacy, the version the store
reports), ``None`` for "no such parameter / version", or raises
``ValueStoreError`` for any other failure. ``ask`` makes one read that
``impl.decisions`` planned and returns the answer as that module's
``StoreAnswer`` (``Answered`` / ``NotFound`` / ``ReadFailed``), so that
``Decisions.judge_answer`` alone decides what the answer means: this module
has no envelope or version logic of its own.

``put_for_ref`` writes test fixtures, naming parameters as the replica reads
them (``impl.decisions.staged_parameter_name`` / ``legacy_parameter_name``).

Leaves out on purpose: parsing or checking envelopes, and deciding whether
there is a read at all (tombstones, no store, unusable legacy names): both
are ``impl.decisions``'. Also caching, KMS key choice (SSM's default key),
pagination and batching (one ``GetParameter`` per read), and SSM's
100-version history limit (fixtures never need more). Error messages name the
operation and error code, never a value.
"""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Optional, Protocol, Sequence, Union, runtime_checkable

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from envreplica.impl.decisions import (
    Answered,
    NotFound,
    ReadFailed,
    StoreAnswer,
    StoreRead,
    legacy_parameter_name,
    staged_parameter_name,
)
from envreplica.spec.domain import LegacyRef, StagedRef, ValueRef

if TYPE_CHECKING:  # boto3-stubs: types only, not needed at run time
    from mypy_boto3_ssm import SSMClient
    from mypy_boto3_ssm.type_defs import GetParameterResultTypeDef

__all__ = [
    "ValueStoreError",
    "ValueReader",
    "EmbeddedStore",
    "SsmStore",
    "DEFAULT_SSM_CONFIG",
    "ask",
    "put_for_ref",
]


class ValueStoreError(Exception):
    """A read failed for a reason other than "not found". Never carries a value."""


@runtime_checkable
class ValueReader(Protocol):
    """What the replica asks of a value store (the seed's ``ProjectEnvReplicaValueReader``)."""

    def read_staged(self, name: str) -> Optional[str]:
        """The staged parameter's text; None when it does not exist; ValueStoreError otherwise."""
        ...

    def read_legacy(self, name: str, version: int) -> Optional[tuple[str, int]]:
        """(text, version the store reports) of ``name`` at ``version``; None when absent."""
        ...


# ---------------------------------------------------------------------------
# Embedded store.
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Value:
    raw: str
    reported_version: Optional[int] = None  # legacy only


@dataclass(frozen=True, slots=True)
class _Error:
    """Reads raise ``ValueStoreError``."""


_Entry = Union[_Value, _Error]

_FAIL_MODES = ("missing", "error")


class EmbeddedStore:
    """An in-process value store (thread-safe).

    Staged entries are keyed by name; legacy entries by (name, version). A
    name-wide failure (``fail(name, mode)`` without a version) covers the
    staged entry and every legacy version of that name; ``put`` /
    ``put_legacy`` clear the failures of what they write.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._staged: dict[str, _Entry] = {}
        self._legacy: dict[tuple[str, int], _Entry] = {}
        self._name_errors: set[str] = set()  # legacy names whose every version raises

    # -- writing ------------------------------------------------------------

    def put(self, name: str, raw: str, version: Optional[int] = None) -> None:
        """Store ``raw`` under a staged name (or, given ``version``, as ``put_legacy``)."""
        if version is not None:
            self.put_legacy(name, raw, version)
            return
        _check_text(name, raw)
        with self._lock:
            self._staged[name] = _Value(raw)

    def put_legacy(self, name: str, raw: str, version: int,
                   reported_version: Optional[int] = None) -> None:
        """Store ``raw`` as ``name`` at ``version``; reads report ``reported_version`` (default ``version``)."""
        _check_text(name, raw)
        _check_version(version)
        if reported_version is not None:
            _check_version(reported_version)
        with self._lock:
            self._legacy[(name, version)] = _Value(raw, version if reported_version is None else reported_version)
            self._name_errors.discard(name)

    def fail(self, name: str, mode: str, version: Optional[int] = None) -> None:
        """Make reads find nothing (``"missing"``) or raise (``"error"``).

        With ``version``: that legacy version only. Without: the staged entry
        and every legacy version of ``name``.
        """
        if mode not in _FAIL_MODES:
            raise ValueError(f"fail mode must be one of {_FAIL_MODES}")
        if version is not None:
            _check_version(version)
        with self._lock:
            if version is not None:
                if mode == "missing":
                    self._legacy.pop((name, version), None)
                else:
                    self._legacy[(name, version)] = _Error()
                return
            if mode == "missing":
                self._staged.pop(name, None)
                for k in [k for k in self._legacy if k[0] == name]:
                    del self._legacy[k]
                self._name_errors.discard(name)
            else:
                self._staged[name] = _Error()
                self._name_errors.add(name)

    def clear(self) -> None:
        """Forget everything (the adapter's ``reset``)."""
        with self._lock:
            self._staged.clear()
            self._legacy.clear()
            self._name_errors.clear()

    # -- reading (ValueReader) ---------------------------------------------

    def read_staged(self, name: str) -> Optional[str]:
        with self._lock:
            entry = self._staged.get(name)
        if entry is None:
            return None
        if isinstance(entry, _Error):
            raise ValueStoreError("embedded store: read_staged failed (injected error)")
        return entry.raw

    def read_legacy(self, name: str, version: int) -> Optional[tuple[str, int]]:
        with self._lock:
            name_error = name in self._name_errors
            entry = self._legacy.get((name, version))
        if name_error or isinstance(entry, _Error):
            raise ValueStoreError("embedded store: read_legacy failed (injected error)")
        if entry is None:
            return None
        assert entry.reported_version is not None
        return entry.raw, entry.reported_version


def _check_text(name: str, raw: str) -> None:
    if not isinstance(name, str) or not name:
        raise ValueError("parameter name must be a non-empty string")
    if not isinstance(raw, str):
        raise TypeError("raw must be a string")


def _check_version(version: int) -> None:
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValueError("version must be an integer >= 1")


# ---------------------------------------------------------------------------
# SSM Parameter Store.
# ---------------------------------------------------------------------------

_NOT_FOUND_STAGED = frozenset({"ParameterNotFound"})
_NOT_FOUND_LEGACY = frozenset({"ParameterNotFound", "ParameterVersionNotFound"})


DEFAULT_SSM_CONFIG = Config(connect_timeout=2, read_timeout=5, retries={"max_attempts": 3, "mode": "standard"})

Credentials = Union[Mapping[str, str], Sequence[str]]


class SsmStore:
    """AWS Systems Manager Parameter Store through a boto3 ``ssm`` client.

    Pass a ready ``client``, or let the store build one from ``region_name``,
    ``endpoint_url`` and ``credentials`` (a mapping with
    ``aws_access_key_id`` / ``aws_secret_access_key`` / optional
    ``aws_session_token``, or a tuple in that order; None: boto3's default
    chain) and ``config`` (default ``DEFAULT_SSM_CONFIG``: connect 2 s, read
    5 s, 3 attempts in standard retry mode).
    """

    def __init__(self, client: Optional[SSMClient] = None, *, region_name: Optional[str] = None,
                 endpoint_url: Optional[str] = None, credentials: Optional[Credentials] = None,
                 config: Optional[Config] = None) -> None:
        if client is None:
            # A copy: botocore rewrites a config's retries in place when it builds a client (max_attempts becomes
            # total_max_attempts), which would change DEFAULT_SSM_CONFIG, or the caller's config, for everyone.
            kwargs: dict[str, Any] = {"config": copy.deepcopy(config if config is not None else DEFAULT_SSM_CONFIG)}
            if region_name is not None:
                kwargs["region_name"] = region_name
            if endpoint_url is not None:
                kwargs["endpoint_url"] = endpoint_url
            kwargs.update(_credential_kwargs(credentials))
            client = boto3.client("ssm", **kwargs)
        elif region_name is not None or endpoint_url is not None or credentials is not None or config is not None:
            raise ValueError("pass either a client or the settings to build one, not both")
        self.client = client

    def read_staged(self, name: str) -> Optional[str]:
        response = self._get(name, "read_staged", _NOT_FOUND_STAGED)
        if response is None:
            return None
        value, _ = _parameter(response, "read_staged")
        return value

    def read_legacy(self, name: str, version: int) -> Optional[tuple[str, int]]:
        _check_version(version)
        response = self._get(f"{name}:{version}", "read_legacy", _NOT_FOUND_LEGACY)
        if response is None:
            return None
        value, reported = _parameter(response, "read_legacy")
        if reported is None:
            raise ValueStoreError("ssm read_legacy: GetParameter response has no Version")
        return value, reported

    def _get(self, name: str, op: str, not_found: frozenset[str]) -> Optional[GetParameterResultTypeDef]:
        try:
            return self.client.get_parameter(Name=name, WithDecryption=True)
        except ClientError as exc:
            code = _error_code(exc)
            if code in not_found:
                return None
            raise ValueStoreError(f"ssm {op}: GetParameter failed with {code}") from None
        except BotoCoreError as exc:  # EndpointConnectionError, timeouts, credentials, ...
            raise ValueStoreError(f"ssm {op}: GetParameter failed with {type(exc).__name__}") from None


def _credential_kwargs(credentials: Optional[Credentials]) -> dict[str, str]:
    if credentials is None:
        return {}
    names = ("aws_access_key_id", "aws_secret_access_key", "aws_session_token")
    if isinstance(credentials, Mapping):
        unknown = set(credentials) - set(names)
        if unknown:
            raise ValueError(f"unknown credential fields: {sorted(unknown)}")
        return {k: v for k, v in credentials.items() if v is not None}
    items = tuple(credentials)
    if not 2 <= len(items) <= 3:
        raise ValueError("credentials tuple must be (access key id, secret key[, session token])")
    return {k: v for k, v in zip(names, items) if v is not None}


def _error_code(exc: Any) -> str:
    code = exc.response.get("Error", {}).get("Code") if isinstance(getattr(exc, "response", None), dict) else None
    return str(code) if code else "UnknownError"


def _parameter(response: Mapping[str, Any], op: str) -> tuple[str, Optional[int]]:
    param = response.get("Parameter") if isinstance(response, Mapping) else None
    value = param.get("Value") if isinstance(param, Mapping) else None
    if not isinstance(value, str):
        raise ValueStoreError(f"ssm {op}: GetParameter response has no Parameter.Value")
    version = param.get("Version") if isinstance(param, Mapping) else None  # (a Mapping whenever Value is a str)
    if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
        raise ValueStoreError(f"ssm {op}: GetParameter response has a non-integer Version")
    return value, version


# ---------------------------------------------------------------------------
# One planned read.
# ---------------------------------------------------------------------------


def ask(reader: ValueReader, read: StoreRead) -> StoreAnswer:
    """Make the read ``impl.decisions`` planned; the outcome as its ``StoreAnswer``.

    ``ValueStoreError`` is ``ReadFailed()`` (the seed's catch); any other
    exception is a bug in a reader and propagates.
    """
    ref = read.ref
    try:
        if isinstance(ref, StagedRef):
            raw = reader.read_staged(read.name)
            return NotFound() if raw is None else Answered(raw)
        if isinstance(ref, LegacyRef):
            got = reader.read_legacy(read.name, ref.ssm_version)
            return NotFound() if got is None else Answered(got[0], got[1])
    except ValueStoreError:
        return ReadFailed()
    raise TypeError(f"not a ValueRef: {type(ref).__name__}")


_FILLER = "envreplica-fixture-filler"  # earlier legacy versions: not an envelope


def put_for_ref(store: Union[EmbeddedStore, SsmStore], prefix: str, project_id: str, key: str,
                ref: ValueRef, raw: str, reported_version: Optional[int] = None) -> str:
    """Make ``store`` answer ``ref`` (for ``project_id`` / ``key``) with ``raw``; return the parameter name.

    Staged: one put under ``staged_parameter_name``. Legacy: ``raw`` at
    ``ref.ssm_version`` of ``legacy_parameter_name`` (ValueError when the key
    has no legacy name). An ``SsmStore`` gets ``PutParameter`` (SecureString,
    Overwrite) repeated until the parameter's version reaches
    ``ref.ssm_version``, earlier versions holding a non-envelope filler;
    ``reported_version`` other than the version asked cannot be produced by
    SSM and is refused, as is a parameter already at or past that version.
    """
    if isinstance(ref, StagedRef):
        if reported_version is not None:
            raise ValueError("reported_version applies to legacy references only")
        name = staged_parameter_name(prefix, project_id, key, ref.staging_id)
        if isinstance(store, EmbeddedStore):
            store.put(name, raw)
        elif isinstance(store, SsmStore):
            _ssm_put(store, name, raw)
        else:
            raise TypeError(f"cannot write fixtures into {type(store).__name__}")
        return name
    if not isinstance(ref, LegacyRef):
        raise TypeError(f"not a ValueRef: {type(ref).__name__}")
    legacy = legacy_parameter_name(prefix, project_id, key)
    if legacy is None:
        raise ValueError("key has no legacy parameter name (not a path segment)")
    if isinstance(store, EmbeddedStore):
        store.put_legacy(legacy, raw, ref.ssm_version, reported_version)
    elif isinstance(store, SsmStore):
        if reported_version is not None and reported_version != ref.ssm_version:
            raise ValueError("SSM always reports the version asked for; reported_version cannot differ")
        _check_version(ref.ssm_version)
        current = _ssm_current_version(store, legacy)
        if current >= ref.ssm_version:
            raise ValueError("SSM parameter is already at or past the requested version")
        while current < ref.ssm_version - 1:
            current = _ssm_put(store, legacy, _FILLER)
        current = _ssm_put(store, legacy, raw)
        if current != ref.ssm_version:
            raise ValueStoreError("ssm put_for_ref: PutParameter reached an unexpected version")
    else:
        raise TypeError(f"cannot write fixtures into {type(store).__name__}")
    return legacy


def _ssm_put(store: SsmStore, name: str, raw: str) -> int:
    try:
        response = store.client.put_parameter(Name=name, Value=raw, Type="SecureString", Overwrite=True)
    except ClientError as exc:
        raise ValueStoreError(f"ssm put_for_ref: PutParameter failed with {_error_code(exc)}") from None
    except BotoCoreError as exc:
        raise ValueStoreError(f"ssm put_for_ref: PutParameter failed with {type(exc).__name__}") from None
    return int(response["Version"])


def _ssm_current_version(store: SsmStore, name: str) -> int:
    """The parameter's latest version, 0 when it does not exist."""
    try:
        response = store.client.get_parameter(Name=name, WithDecryption=False)
    except ClientError as exc:
        code = _error_code(exc)
        if code == "ParameterNotFound":
            return 0
        raise ValueStoreError(f"ssm put_for_ref: GetParameter failed with {code}") from None
    except BotoCoreError as exc:
        raise ValueStoreError(f"ssm put_for_ref: GetParameter failed with {type(exc).__name__}") from None
    return int(response["Parameter"]["Version"])
