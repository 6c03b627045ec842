"""Whether the implementation answers, and ends up, as the model does.

``compare_responses`` holds one response against the model's;
``_check_state`` runs the checks after a step (the implementation's state,
read back into the model's shape, against the model's; then the invariants
on both), ``state_difference`` says where two states differ. ``_roundtrip``
is a request as the wire carries it, so both sides get the same JSON.
Rendering steps for people is in ``traces``; sending requests is in
``machine`` and ``run`` (``replay_steps``).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Collection, Optional, Sequence

from envreplica.conformance.drivers import Driver
from envreplica.conformance.external import AdapterError, AdapterFailure, ProtocolBreak, StateProbe
from envreplica.conformance.replica.domains import FINDING_VIOLATIONS, KNOWN_VIOLATIONS
from envreplica.conformance.replica.text import text_difference, values_shown
from envreplica.model.state import State
from envreplica.spec import properties as P
from envreplica.spec.variants import Variant

# ---------------------------------------------------------------------------
# Comparing responses
# ---------------------------------------------------------------------------


def _canon(value: Any) -> str:
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError):
        return repr(value)


def _short(value: Any, width: int = 160) -> str:
    text = value if isinstance(value, str) else _canon(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def _plain(text: str) -> bool:
    """A short string of printable ASCII (a code, an id, a short key): shown as it is."""
    return len(text) <= 40 and text.isascii() and text.isprintable()


def _first_difference(a: Any, b: Any, path: str) -> str:
    """The path of the first place where two JSON values differ, and both values there."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if key not in a:
                return f"{path}.{key}: model has no such key, implementation {_short(b[key])}"
            if key not in b:
                return f"{path}.{key}: model {_short(a[key])}, implementation has no such key"
            if _canon(a[key]) != _canon(b[key]):
                return _first_difference(a[key], b[key], f"{path}.{key}")
    if isinstance(a, str) and isinstance(b, str) and not (_plain(a) and _plain(b)):
        return f"{path}: {text_difference(a, b)}"  # a value, a long key: where it differs, escaped
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path}: model has {len(a)} items, implementation {len(b)}: model {_short(a)}, implementation {_short(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            if _canon(x) != _canon(y):
                return _first_difference(x, y, f"{path}[{i}]")
    return f"{path}: model {_short(a)}, implementation {_short(b)}"


_DIAGNOSIS_KEYS = frozenset({"reason", "message"})


def _is_diagnosis(result: Any) -> bool:
    """A ``diagnostics`` result that is not null: the only result shaped ``{"reason", "message"}``."""
    return isinstance(result, dict) and set(result) == _DIAGNOSIS_KEYS


def _diagnosis_difference(model: dict, impl: Any, path: str) -> Optional[str]:
    """A diagnosis is held by its ``reason`` only: its ``message`` is free text for people."""
    if not isinstance(impl, dict) or set(impl) != _DIAGNOSIS_KEYS or not isinstance(impl.get("message"), str):
        return (f"{path}: model diagnosis {_short(model)}, implementation {_short(impl)} "
                f"(a diagnosis is exactly {{\"reason\", \"message\": str}})")
    if _canon(model["reason"]) != _canon(impl["reason"]):
        return (f"{path}.reason: model {_short(model['reason'])} ({_short(model['message'], 100)}), "
                f"implementation {_short(impl['reason'])} ({_short(impl['message'], 100)})")
    return None


def diverging(broke: ProtocolBreak, model_response: Any) -> Optional[dict]:
    """The answer that broke its definition (``broke``), when it also differs from the model's ``model_response``:
    the lockstep then shows it as that divergence, the model's answer beside it; None when the break is all that
    is wrong with it."""
    response = broke.response
    differs = isinstance(response, dict) and compare_responses(model_response, response) is not None
    return response if differs else None


def compare_responses(model: Any, impl: Any, path: str = "response") -> Optional[str]:
    """None when ``impl`` answers as ``model`` does; else where and how they differ.

    Equal means: the same keys; ``id`` and ``ok`` equal; ``result`` equal as
    JSON (``true`` is not ``1``), except a ``diagnostics`` diagnosis, held by
    its ``reason`` only (its ``message`` is free text); for errors the same
    ``type`` and section 5's shape ``{"type", "message": str}`` (messages may
    differ); ``nested`` responses equal one by one.
    """
    if not isinstance(impl, dict):
        return f"{path}: the implementation answered {_short(impl)}, not a JSON object"
    if not isinstance(model, dict):  # pragma: no cover - the model always answers an object
        return f"{path}: the model answered {_short(model)}"
    if set(model) != set(impl):
        return (f"{path}: keys differ: model {sorted(model)}, implementation {sorted(impl)}"
                f" (implementation answered {_short(impl)})")
    for key in ("id", "ok"):
        m, i = model[key], impl[key]
        if not (type(m) is type(i) and m == i) and _canon(m) != _canon(i):  # scalars: no JSON text needed
            detail = (f"; implementation error {_short(impl.get('error'))}" if impl.get("ok") is False
                      else f"; model error {_short(model.get('error'))}" if model.get("ok") is False else "")
            return f"{path}.{key}: model {_short(model[key])}, implementation {_short(impl[key])}{detail}"
    if model["ok"] is True:
        if _is_diagnosis(model["result"]):
            diff = _diagnosis_difference(model["result"], impl["result"], f"{path}.result")
            if diff:
                return diff
        elif _canon(model["result"]) != _canon(impl["result"]):
            return _first_difference(model["result"], impl["result"], f"{path}.result")
    else:
        m_err: Any  # the model's error object: it always answers one with ok false
        m_err, i_err = model.get("error"), impl.get("error")
        if not isinstance(i_err, dict) or i_err.get("type") != m_err.get("type"):
            return (f"{path}.error.type: model {_short(m_err.get('type'))} ({_short(m_err.get('message'), 100)}), "
                    f"implementation {_short(i_err)}")
        if set(i_err) != {"type", "message"} or not isinstance(i_err["message"], str):
            return (f"{path}.error: section 5's error is exactly {{\"type\", \"message\": str}}; "
                    f"the implementation answered {_short(i_err)}")
    if "nested" in model:
        m_nested, i_nested = model["nested"], impl["nested"]
        if not isinstance(i_nested, list) or len(i_nested) != len(m_nested):
            return f"{path}.nested: model {len(m_nested)} responses, implementation {_short(i_nested)}"
        for i, (m, n) in enumerate(zip(m_nested, i_nested)):
            diff = compare_responses(m, n, f"{path}.nested[{i}]")
            if diff:
                return diff
    return None


def _roundtrip(request: Any) -> Any:
    return json.loads(json.dumps(request))


def _check_tables(model: Any, impl: Any, probe: Any) -> Optional[str]:
    """An external implementation's tables (its ``state`` answer) against the model's, table by table.

    ``probe`` is the run's ``external.StateProbe`` (None: not an external
    implementation, or state checks off). An adapter that does not answer
    with one JSON object line (``external.AdapterError``: it died, stalled,
    wrote a line it should not) raises it, for the caller to stop the run
    (``external.AdapterFailure``); any other failure of the read is a
    divergence, not a harness crash.
    """
    if probe is None:
        return None
    try:
        return probe.check(model, impl)
    except AdapterError:
        raise
    except Exception as error:
        return f"state request failed: {type(error).__name__}: {error}"


# ---------------------------------------------------------------------------
# State read back from the implementation
# ---------------------------------------------------------------------------


def _readback(impl: Any):
    """(replica, sealer) when ``impl`` exposes a replica that reads its tables back (``export_state``), else None."""
    replica = getattr(impl, "replica", None)
    sealer = getattr(impl, "sealer", None)
    if replica is None or sealer is None or not callable(getattr(replica, "export_state", None)):
        return None
    return replica, sealer


def change_mark(impl: Any) -> Optional[tuple]:
    """What must stay the same for the implementation's tables to be unchanged since it was taken; None: unknown.

    For a replica read back in process (``_readback``): the replica, its sealer and value store, and
    SQLite's count of rows its connection changed (``SqliteReplica.rows_changed``, rolled-back writes
    included). Equal marks around a step mean no row was written: the tables are the ones last read.
    """
    rb = _readback(impl)
    changed = getattr(rb[0], "rows_changed", None) if rb is not None else None
    if changed is None:
        return None
    replica, sealer = rb
    return id(replica), id(sealer), replica.reader is not None, changed


_STATE_FIELDS = tuple(f.name for f in dataclasses.fields(State))


def state_difference(model: State, impl: State, show_values: bool = True) -> str:
    """Which tables differ, with the first differing rows.

    A row's value is written by its length in the row; with ``show_values``, two values that differ are
    then shown where they differ, escaped (``text.text_difference``); without (a real value store,
    ``text.values_shown``), by length only."""
    parts = []
    for name in _STATE_FIELDS:
        a, b = getattr(model, name), getattr(impl, name)
        if a == b:
            continue
        if hasattr(a, "items") and hasattr(b, "items"):
            keys = sorted(set(a) | set(b), key=repr)
            rows = []
            for k in keys:
                if a.get(k) != b.get(k):
                    row = f"{k}: model {_short(_hide(a.get(k)), 200)} / implementation {_short(_hide(b.get(k)), 200)}"
                    m_value, i_value = getattr(a.get(k), "value", None), getattr(b.get(k), "value", None)
                    if show_values and isinstance(m_value, str) and isinstance(i_value, str) and m_value != i_value:
                        row += f" — value: {text_difference(m_value, i_value)}"
                    rows.append(row)
                if len(rows) == 3:
                    break
            parts.append(f"{name} differs: " + "; ".join(rows))
        else:
            parts.append(f"{name} differs: model {_short(repr(a), 200)} / implementation {_short(repr(b), 200)}")
    return " | ".join(parts) or "states differ"


def _hide(row: Any) -> str:
    if row is None:
        return "absent"
    text = repr(row)
    value = getattr(row, "value", None)
    if isinstance(value, str):
        text = text.replace(repr(value), f"<value of {len(value)} chars>")
    return text


def broken_invariant(state: State, variant: Variant, left_out: Collection = ()):
    """The first invariant of ``spec.properties`` that ``state`` breaks, beyond the variant's known findings (and
    those of the fixes ``left_out`` of the model: ``ModelConfig.left_out``)."""
    known = KNOWN_VIOLATIONS.get(variant, frozenset()).union(*(FINDING_VIOLATIONS[f] for f in left_out))
    return next((p for p in P.INVARIANTS if p.name not in known and not p.check(state)), None)


def _check_state(model: Any, impl: Any, variant: Variant, state_check: bool) -> Optional[str]:
    """The state checks after a step: readback equality, then invariants on both sides."""
    st_model = getattr(model, "state", None)
    left_out = getattr(model, "left_out", ())  # a model driver naming a finding: ModelDriver(left_out=...)
    if isinstance(st_model, State):
        prop = broken_invariant(st_model, variant, left_out)
        if prop is not None:
            return f"invariant {prop.name} fails on the MODEL's state: {prop.statement}"
    rb = _readback(impl) if state_check else None
    if rb is None:
        return None
    replica, sealer = rb
    from envreplica.conformance.readback import impl_model_state, mac_of, with_macs

    try:
        impl_state = impl_model_state(replica)
    except Exception as error:  # a corrupt file is a divergence, not a harness crash
        return f"state readback failed: {type(error).__name__}: {error}"
    if isinstance(st_model, State):
        expected = with_macs(st_model, mac_of(sealer))
        if expected != impl_state:
            difference = state_difference(expected, impl_state, show_values=values_shown(impl))
            return f"state after the step differs from the model's: {difference}"
    prop = broken_invariant(impl_state, variant, left_out)
    if prop is not None:
        return f"invariant {prop.name} fails on the implementation's state: {prop.statement}"
    return None


def replay_steps(requests: Sequence[Any], impl: Driver, model: Driver, *, variant: Optional[Variant] = None,
                 state_check: bool = True, stop: bool = True,
                 probe: Optional[StateProbe] = None, defer: Collection = (),
                 adapter_failures: Optional[str] = None) -> tuple[list[dict], Optional[dict]]:
    """Send each request to both drivers; (steps so far, first divergence or None).

    The state checks after a request whose ``id`` is in ``defer`` (a fast-forward's deliveries) wait
    for the next request checked; the last request always is.

    An external adapter that breaks (``external.AdapterError``, not a ``ProtocolBreak``) is a divergence
    (its step answered ``driver-error``), unless ``adapter_failures`` names the replay (``"saved trace
    x.jsonl"``): it then raises ``external.AdapterFailure`` naming the step of that replay.

    An external implementation (``state_by_request``) has its tables read with
    the ``state`` op after each step and held table by table against the
    model's (``probe``, a fresh ``StateProbe`` unless given; off without
    ``state_check``).
    """
    variant = Variant(variant or getattr(model, "variant", Variant.FIXED))
    if probe is None and state_check and getattr(impl, "state_by_request", False):
        probe = StateProbe()
    steps: list[dict] = []
    first = None
    for index, request in enumerate(requests, 1):
        m = model.handle(_roundtrip(request))
        op = request.get("op") if isinstance(request, dict) else None
        try:
            i = impl.handle(_roundtrip(request))
        except ProtocolBreak as broke:  # an answer that breaks its definition: a divergence from the model's first
            i = diverging(broke, m) or {"driver-error": f"{type(broke).__name__}: {broke}"}
        except AdapterError as error:
            if adapter_failures:
                raise AdapterFailure(f"step #{index} (`{op}`) of {adapter_failures}", str(error),
                                     error.request) from None
            i = {"driver-error": f"{type(error).__name__}: {error}"}
        except Exception as error:
            i = {"driver-error": f"{type(error).__name__}: {error}"}
        steps.append({"request": request, "model": m, "impl": i})
        if probe is not None:
            probe.observe(request, m)
        reason = compare_responses(m, i)
        checked = not (defer and isinstance(request, dict) and request.get("id") in defer) or index == len(requests)
        if reason is None and checked:
            reason = _check_state(model, impl, variant, state_check)
        if reason is None and checked and "driver-error" not in i:
            try:
                reason = _check_tables(model, impl, probe)
            except AdapterError as error:
                if adapter_failures:
                    raise AdapterFailure(f"the `state` read after step #{index} (`{op}`) of {adapter_failures}",
                                         str(error), error.request) from None
                reason = f"state request failed: {type(error).__name__}: {error}"
        if reason is not None and first is None:
            first = {"index": index, "request": request, "model": m, "impl": i, "reason": reason}
            if stop:
                break
    return steps, first
