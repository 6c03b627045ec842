"""The value store as an explicit input: what a read asks, and what its answer means.

Models: the seed's ``readMaterializedValue`` split at its ``await``: ``plan``
is everything before the read (a tombstone, no store, or an unusable legacy
name answer at once, with no read and so no await window), ``interpret`` is
everything after it (envelope checks, version check, failures). An answer is
what the store returned for the reference: a raw text (and, for a legacy
read, the version it reports), nothing, or an exception. The checker
enumerates answers (``answers``); the adapter looks them up in a store it
keeps. Both run the same ``interpret``.

Leaves out on purpose: the transport (boto3, retries, timeouts: ``impl``).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Optional, TypeGuard, Union

from envreplica.model.state import ReadRequest
from envreplica.spec.domain import (
    BindingState,
    LegacyRef,
    StagedRef,
    UnavailableReason,
)
from envreplica.spec.frozen import Frozen, HashOnce

_SEGMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


@dataclass(frozen=True, slots=True, eq=False)
class Found(HashOnce):
    """The store holds the reference: its raw text, and the version it reports (legacy)."""

    raw: str  # the parameter's text
    version: Optional[int] = None  # the version the store says it returned (legacy only)


@dataclass(frozen=True, slots=True)
class Missing(Frozen):
    """The store has no such parameter or version (``null`` in the seed)."""


@dataclass(frozen=True, slots=True)
class Raises(Frozen):
    """The read threw (network, throttling, decryption): ``value_unavailable``."""


Answer = Union[Found, Missing, Raises]


@dataclass(frozen=True, slots=True)
class Fetched(Frozen):
    """A read's outcome: a value, or the unavailable reason."""

    value: Optional[str]  # the plaintext, when the read succeeded
    reason: Optional[UnavailableReason]  # why not, otherwise


def staged_parameter_name(prefix: str, project_id: str, key: str, staging_id: str) -> str:
    """``{prefix}/projects/{projectId}/env-values/{sha256_hex(key)}/{stagingId}``."""
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()
    return f"{prefix}/projects/{project_id}/env-values/{digest}/{staging_id}"


def legacy_parameter_name(prefix: str, project_id: str, key: str) -> Optional[str]:
    """``{prefix}/projects/{projectId}/env/{key}``, or None when ``key`` is not a path segment.

    The seed's ``projectEnvParameterName`` returns null for a key that is not a
    parameter path segment (``isParameterPathSegment``, the ``Segment`` rule of
    docs/protocol.md): a valid env-var key such as ``_TOKEN`` or one longer than
    64 characters has no legacy name, and reads as ``value_reference_invalid``.
    """
    if not _SEGMENT.match(key):
        return None
    return f"{prefix}/projects/{project_id}/env/{key}"


def plan(prefix: str, project_id: str, state: BindingState, reader_on: bool) -> Union[ReadRequest, Fetched]:
    """The synchronous part of ``readMaterializedValue``: a read to make, or an answer now."""
    ref = state.head.value_ref
    if state.head.tombstone or ref is None:
        return Fetched(None, UnavailableReason.TOMBSTONE)
    if not reader_on:
        return Fetched(None, UnavailableReason.CREDENTIAL_STORE_UNAVAILABLE)
    if isinstance(ref, StagedRef):
        return ReadRequest(ref, staged_parameter_name(prefix, project_id, state.key, ref.staging_id))
    name = legacy_parameter_name(prefix, project_id, state.key)
    if name is None:
        return Fetched(None, UnavailableReason.VALUE_REFERENCE_INVALID)
    return ReadRequest(ref, name)


def _exact(value: object, keys: tuple[str, ...]) -> TypeGuard[dict[str, object]]:
    """``value`` is a JSON object with exactly ``keys``."""
    return isinstance(value, dict) and len(value) == len(keys) and all(k in value for k in keys)


_STAGED_KEYS = ("v", "kind", "orgId", "projectId", "key", "stagingId", "value")
_LEGACY_KEYS = ("v", "kind", "projectId", "key", "value")


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


def js_json_parse(raw: str) -> object:
    """``JSON.parse``: every number is a double (a 5000-digit integer is Infinity), ``NaN`` throws."""
    return json.loads(raw, parse_int=lambda text: float(text), parse_constant=_reject_constant)


def _json_number_equals(value: object, expected: int) -> bool:
    """JavaScript ``===`` on a parsed JSON number: 2 and 2.0 are equal; true is not 2."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and value == expected


@lru_cache(maxsize=4096)
def interpret(org_id: str, project_id: str, state: BindingState, request: ReadRequest, answer: Answer) -> Fetched:
    """The part of ``readMaterializedValue`` after its ``await``: what the answer means.

    A function of its arguments only, kept for the checker (which asks the same few answers again and again;
    4,096 entries, so that the lockstep's long drawn values cannot pile up)."""
    if isinstance(answer, Raises):
        return Fetched(None, UnavailableReason.VALUE_UNAVAILABLE)
    if isinstance(answer, Missing):
        return Fetched(None, UnavailableReason.VALUE_MISSING)
    ref = request.ref
    if isinstance(ref, LegacyRef):
        # The seed compares the reported version before it parses the text.
        version = ref.ssm_version if answer.version is None else answer.version
        if version != ref.ssm_version:
            return Fetched(None, UnavailableReason.VALUE_VERSION_MISMATCH)
    try:
        parsed = js_json_parse(answer.raw)
    except (ValueError, RecursionError):
        return Fetched(None, UnavailableReason.VALUE_UNAVAILABLE)
    if isinstance(ref, StagedRef):
        if (
            not _exact(parsed, _STAGED_KEYS)
            or not _json_number_equals(parsed["v"], 2)
            or parsed["kind"] != "project-env"
            or parsed["orgId"] != org_id
            or parsed["projectId"] != project_id
            or parsed["key"] != state.key
            or parsed["stagingId"] != ref.staging_id
            or not isinstance(parsed["value"], str)
        ):
            return Fetched(None, UnavailableReason.VALUE_ENVELOPE_MISMATCH)
        return Fetched(parsed["value"], None)
    assert isinstance(ref, LegacyRef)
    # parseStoredProjectEnv throws on anything but an exact v1 envelope: the
    # seed's catch turns that into value_unavailable.
    if (
        not _exact(parsed, _LEGACY_KEYS)
        or not _json_number_equals(parsed["v"], 1)
        or parsed["kind"] != "project-env"
        or not isinstance(parsed["projectId"], str)
        or not isinstance(parsed["key"], str)
        or not isinstance(parsed["value"], str)
    ):
        return Fetched(None, UnavailableReason.VALUE_UNAVAILABLE)
    if parsed["projectId"] != project_id or parsed["key"] != state.key:
        return Fetched(None, UnavailableReason.VALUE_ENVELOPE_MISMATCH)
    return Fetched(parsed["value"], None)


def staged_envelope(org_id: str, project_id: str, key: str, staging_id: str, value: str) -> str:
    """The raw text of a well-formed staged (v2) envelope."""
    return json.dumps(
        {"v": 2, "kind": "project-env", "orgId": org_id, "projectId": project_id,
         "key": key, "stagingId": staging_id, "value": value},
        separators=(",", ":"),
    )


def legacy_envelope(project_id: str, key: str, value: str) -> str:
    """The raw text of a well-formed legacy (v1) envelope."""
    return json.dumps(
        {"v": 1, "kind": "project-env", "projectId": project_id, "key": key, "value": value},
        separators=(",", ":"),
    )


@lru_cache(maxsize=4096)
def answers(org_id: str, project_id: str, state: BindingState, request: ReadRequest,
            values: tuple[str, ...]) -> tuple[Answer, ...]:
    """Every answer class a store can give for ``request``, one representative each.

    A correct envelope for each value in ``values``; an envelope naming another
    organisation (staged) or key (legacy): ``value_envelope_mismatch``; a legacy
    version other than asked: ``value_version_mismatch``; nothing:
    ``value_missing``; a throw: ``value_unavailable``. (Malformed text also
    means ``value_unavailable``; the tests cover it, the checker needs one.)
    Kept per arguments, like ``interpret``.
    """
    ref = request.ref
    out: list[Answer] = []
    if isinstance(ref, StagedRef):
        out += [Found(staged_envelope(org_id, project_id, state.key, ref.staging_id, v)) for v in values]
        out.append(Found(staged_envelope(org_id + "x", project_id, state.key, ref.staging_id, values[0])))
    else:
        out += [Found(legacy_envelope(project_id, state.key, v), ref.ssm_version) for v in values]
        out.append(Found(legacy_envelope(project_id, state.key + "X", values[0]), ref.ssm_version))
        out.append(Found(legacy_envelope(project_id, state.key, values[0]), ref.ssm_version + 1))
    out += [Missing(), Raises()]
    return tuple(out)
