"""The state machine: ``LockstepMachine``, its rules (``RULE_WEIGHTS``), and the tracing model driver.

Each rule draws one block of bytes (``draw.BLOCK_BYTES``), builds one
request from it (``generate._Gen``) and sends it to the model and to the
implementation; the responses must agree and the state checks pass
(``compare``). ``_TracingModel`` is the model driver reporting each gate
move for coverage. How a run is set up, shrunk, minimized and reported is
in ``run``.

An external adapter that breaks (``external.AdapterError`` other than a
``ProtocolBreak``: it died, stalled past the timeout, wrote a line that is
not a JSON object, answered another id) on a step or on the ``state`` read
after one raises ``external.AdapterFailure`` naming the step and example:
the run stops there (``run.run_lockstep``), never a divergence, and the
adapter is not restarted. An answer that breaks its op's definition
(``ProtocolBreak``) is the implementation's answer: a divergence.
"""

from __future__ import annotations

import json
import random
import time
import zlib
from typing import Any, Callable, ClassVar, Optional

import hypothesis
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from envreplica.conformance.drivers import CRASH_FIELD, OPS, ModelDriver
from envreplica.conformance.external import AdapterError, AdapterFailure, ProtocolBreak
from envreplica.conformance.replica.compare import (_check_state, _check_tables, change_mark, compare_responses,
                                                     diverging)
from envreplica.conformance.replica.context import _Run
from envreplica.conformance.replica.coverage import (
    COVERAGE,
    sequence_item,
    FAST_FORWARDED,
    RESENT_ITEM,
    input_items,
    record_items,
    sequence_items,
    value_classes,
)
from envreplica.conformance.replica.domains import (
    KINDS,
    NESTED_ID_BASE,
    ORG,
    OTHER_KEY_HEX,
    SMALL_ACK,
    draw_value,
)
from envreplica.conformance.replica.draw import BLOCK_BYTES, FFWD_SEED_BYTES, _BLOCKS, _Draw
from envreplica.conformance.replica.generate import _Gen, stored_envelope, typed_legacy_envelope
from envreplica.conformance.replica.records import _fetchable, _View
from envreplica.conformance.replica.traces import write_trace
from envreplica.model.state import State
from envreplica.spec.gate import GateEdge, Trigger
from envreplica.spec.variants import Variant

#: The ops that move the gate, and the trigger of each (``_TracingModel`` records the moves).
_TRIGGERS = {"begin": Trigger.BEGIN, "commit": Trigger.COMPLETE, "close": Trigger.CLOSE_GATE,
             "restart": Trigger.RESTART}


class _TracingModel(ModelDriver):
    """The model driver, reporting each gate move (nested requests included)."""

    def __init__(self, variant: Variant, sink: list) -> None:
        self._sink = sink
        super().__init__(variant)

    def handle(self, request: Any) -> dict:
        op = request.get("op") if isinstance(request, dict) else None
        trigger = _TRIGGERS.get(op) if isinstance(op, str) else None
        before = self.state.authority.gate if trigger is not None else None
        response = super().handle(request)
        if trigger is not None and before is not None and response.get("ok") is True:  # before: set with trigger
            result = response.get("result")
            if trigger is not Trigger.COMPLETE or (isinstance(result, dict) and result.get("ok") is True):
                self._sink.append(GateEdge(trigger, before, self.state.authority.gate))
        return response


#: Percent of pages and deliveries sent with ``crashAfterCommit`` (then without ``duringFetch``), for
#: one that will make two write commits; half that for one, one and a half times for three or more.
CRASH_PERCENT = 10


def _expected_commits(v: _View, request: dict) -> int:
    """About how many write commits a page / delivery will make (docs/protocol.md section 6):
    the prepare, one per record to fetch, and a delivery's final transaction."""
    frame = request["frame"]
    if request["op"] == "page":
        return 1 + sum(1 for r in frame.get("records") or () if _fetchable(r, v.epochs))
    return 3 if _fetchable(frame.get("state"), v.epochs) else 2


def _with_crash(crash: tuple[int, int], v: _View, request: dict) -> dict:
    """Maybe ask a page or delivery to crash after its k-th write commit (k from 1 to 3).

    ``crash`` is two choices drawn before the request was built (so it shrinks
    to no crash). Each k the operation will reach is four times likelier than
    one past its last commit (then it is answered normally).
    """
    roll, pick = crash
    if request.get("op") not in ("page", "delivery") or "duringFetch" in request:
        return request
    commits = _expected_commits(v, request)
    if roll < 100 - CRASH_PERCENT * min(commits, 3) // 2:  # likelier where later commits can be cut
        return request
    # Every k the operation reaches, and the first it does not (answered normally), alike. Drawn bytes
    # crowd at 0 and 255: the choice hashes the byte with the request, so that 255 is not always the
    # same k; a 0 byte (where shrinking goes) stays k = 1.
    choices = list(range(1, min(commits, 3) + 1)) + ([commits + 1] if commits < 3 else [])
    salt = json.dumps(request, sort_keys=True).encode()
    k = choices[zlib.crc32(salt + bytes([pick])) % len(choices)] if pick else 1
    return dict(request, **{CRASH_FIELD: k})


def _crash_draw(d: _Draw) -> tuple[int, int]:
    return d.index(100), d.index(256)


#: Ops that never change the replica (reads); an invalid request changes nothing either.
READ_OPS = frozenset({"status", "snapshot", "receipts", "ready", "diagnostics", "state"})


def op_reads_only(request: Any) -> bool:
    """The request cannot change state when the implementation is right (a read, or not a known op)."""
    op = request.get("op") if isinstance(request, dict) else None
    return op in READ_OPS or op not in OPS


class LockstepDivergence(AssertionError):
    """The implementation parted from the model (or a state check failed)."""


class LockstepMachine(RuleBasedStateMachine):
    """One example: a reset, then rules that each send one request to model and implementation.

    Bind it to an implementation and variant with ``bind``; the bare class
    runs the built-in SQLite implementation under ``fixed``
    (``TestLockstep = LockstepMachine.TestCase`` works as is).
    """

    run: ClassVar[Optional[_Run]] = None

    @classmethod
    def bind(cls, run: _Run) -> type:
        return type(f"{cls.__name__}_{run.variant.value.replace('-', '_')}", (cls,), {"run": run})

    def __init__(self) -> None:
        super().__init__()
        run = type(self).run
        if run is None:
            run = type(self).run = _Run(None, Variant.FIXED, None, True)
        self.ctx = run
        self.edges: list[GateEdge] = []
        self.model = _TracingModel(run.variant, self.edges)
        self.impl = run.driver()
        self.steps: list[dict] = []
        self.enabled: frozenset = frozenset(KINDS)
        self.interleave = True
        self.failure: Optional[str] = None
        self.impl_dead = False
        self.next_id = 1
        self.next_nested = NESTED_ID_BASE
        self.sent: list[tuple] = []
        self.max_staged = 0
        self.max_applied = 0
        self.ffwd_scales = self._ffwd_scales()
        self.seen_edges: set = set()
        self.plan: list[dict] = []  # the cloud's next requests (values first, then the frame)
        self._checked_state: Optional[State] = None  # the model state last compared with the implementation's
        self._unchecked = False  # a step since then was not checked (the model did not move)
        self._checked_mark: Optional[tuple] = None  # the implementation's change_mark at that check
        self.half_applied: Optional[dict] = None  # a delivery frame that crashed before its receipt

    # -- plumbing -------------------------------------------------------------

    def view(self) -> _View:
        return _View(self.model.state, self.sent[-12:])

    def _number(self, request: dict) -> dict:
        request = dict(request)
        if "id" not in request:
            request["id"] = self.next_id
        self.next_id += 1
        if isinstance(request.get("duringFetch"), list):
            inner = []
            for n in request["duringFetch"]:
                n = dict(n, id=self.next_nested)
                self.next_nested += 1
                inner.append(n)
            request["duringFetch"] = inner
        return request

    def _remember(self, request: dict) -> None:
        """Records sent in frames: the store rule puts values for them."""
        frame = request.get("frame")
        if request.get("op") == "page" and isinstance(frame, dict):
            for r in frame.get("records", ()):
                self.sent.append((frame.get("projectId"), r.get("key"), r))
        elif request.get("op") == "delivery" and isinstance(frame, dict):
            self.sent.append((frame.get("projectId"), frame["state"].get("key"), frame["state"]))
        for n in request.get("duringFetch") or ():
            self._remember(n)

    def _note_crash(self, request: dict, response: dict) -> None:
        """A delivery that crashed before its receipt: the cloud will send it again (``do_cloud``)."""
        result = response.get("result") if response.get("ok") is True else None
        if request.get("op") != "delivery" or not isinstance(result, dict) or "crashedAfterCommit" not in result:
            return
        frame = request["frame"]
        cursor = (frame["delivery"]["streamId"], frame["delivery"]["sequence"])
        if cursor not in self.model.state.receipts:
            self.half_applied = json.loads(json.dumps(frame))

    def _resend_half_applied(self, d: _Draw, v: _View) -> Optional[dict]:
        """The delivery that crashed before its receipt, sent again once the replica serves or stages."""
        if self.half_applied is None or not (v.gate_open or v.attempt is not None) or not d.flag(50):
            return None
        frame, self.half_applied = self.half_applied, None
        frame.pop("reconciliationAttemptId", None)
        if v.attempt is not None:
            frame["reconciliationAttemptId"] = v.attempt
        self.ctx.coverage.crashes[RESENT_ITEM] += 1
        COVERAGE.crashes[RESENT_ITEM] += 1
        return {"op": "delivery", "frame": frame}

    def _check_tables(self) -> Optional[str]:
        """An external implementation's tables against the model's (out of band: not a step)."""
        try:
            reason = _check_tables(self.model, self.impl, self.ctx.probe(self.impl))
        except AdapterError as error:
            last = self.steps[-1]["request"] if self.steps else {}
            raise self._adapter_broke(error, f"the `state` read after {self._step_name(len(self.steps), last)}")
        if reason is not None and getattr(self.impl, "alive", True) is False:
            self.impl_dead = True
        return reason

    def _step_name(self, number: int, request: Any) -> str:
        op = request.get("op") if isinstance(request, dict) else None
        return f"step #{number} (`{op}`) of example {self.ctx.examples + 1}"

    def _adapter_broke(self, error: AdapterError, where: str) -> AdapterFailure:
        """The adapter broke at ``where``: not trusted again (the run stops; the teardown asks it nothing)."""
        self.impl_dead = True
        return AdapterFailure(where, str(error), error.request)

    def _ffwd_scales(self) -> tuple[int, ...]:
        """How far this example's fast-forwards may go: past 100 and past 1,000 only while this run has
        fewer such examples than ``_Gen.FFWD_BUDGET`` (each costs ~0.2 s and ~1.3 s), so the ci budget
        reaches them, early, at a bounded cost. Once an example failed, as that example had it: the
        shrinker's replays then generate what it did."""
        if self.ctx.failure is not None and "ffwd_scales" in self.ctx.failure:
            return self.ctx.failure["ffwd_scales"]
        reached = self.ctx.coverage.inputs
        return (10,) + tuple(n for n, most in _Gen.FFWD_BUDGET.items()
                             if reached[sequence_item(n)] < most)

    def _check_now(self) -> None:
        """The state checks, now: the read-back against the model's state, the invariants, the tables.

        Skipped when neither side can have moved since the last check (the model's state is the one
        checked, and ``change_mark`` shows no row written by the implementation): both are as compared.
        """
        mark = change_mark(self.impl) if self.ctx.state_check else None
        if mark is not None and mark == self._checked_mark and self.model.state is self._checked_state:
            self.ctx.checks_skipped += 1
            self._unchecked = False
            return
        reason = _check_state(self.model, self.impl, self.ctx.variant, self.ctx.state_check)
        if reason is None:
            reason = self._check_tables()
        if reason is not None:
            self._fail(reason)
        self._checked_state, self._checked_mark, self._unchecked = self.model.state, mark, False
        self.ctx.checks += 1

    def _fail(self, reason: str) -> None:
        self.failure = reason
        raise LockstepDivergence(reason)

    def _stored_text(self, project: str, key: str, ref: dict) -> Optional[str]:
        """The text the model's value store holds for a legacy reference (None: nothing, or not text)."""
        from envreplica.model.store import Found, legacy_parameter_name

        name = legacy_parameter_name(self.model.cfg.prefix, project, key)
        if name is None:  # no parameter can hold it: the store has nothing
            return None
        answer = self.model.store.get((name, ref["ssmVersion"]))
        return answer.raw if isinstance(answer, Found) else None

    def send(self, request: dict, quiet: bool = False) -> dict:
        """One step on both sides; asserts they agree and the state checks pass.

        ``quiet`` (a fast-forwarded delivery, ``do_ffwd``): the responses are compared, the state is
        checked after the fast-forward's last delivery (``_check_now``), and only ``FAST_FORWARDED``
        counts it in the coverage. Its step is marked ``quiet`` (replays defer its state check too).
        """
        request = self._number(request)
        self._remember(request)
        wire_request = json.dumps(request)  # each side decodes its own copy, as an adapter would
        pre = self.model.state
        model_response = self.model.handle(json.loads(wire_request))
        try:
            impl_response = self.impl.handle(json.loads(wire_request))
        except ProtocolBreak as broke:  # an answer that breaks its definition: a divergence from the model's first
            answer = diverging(broke, model_response)
            self.impl_dead = self.impl_dead or answer is None
            impl_response = answer or {"driver-error": f"{type(broke).__name__}: {broke}"}
        except AdapterError as error:  # an adapter that broke: the run stops here (exit 2), not a divergence
            raise self._adapter_broke(error, self._step_name(len(self.steps) + 1, request)) from None
        except Exception as error:
            self.impl_dead = True  # a driver that raised is not trusted again: the next example starts a fresh one
            impl_response = {"driver-error": f"{type(error).__name__}: {error}"}
        self.steps.append({"request": request, "model": model_response, "impl": impl_response,
                           **({"quiet": True} if quiet else {})})
        self.ctx.steps += 1
        self.ctx.report_progress()
        probe = self.ctx.probe(self.impl)
        if probe is not None:
            probe.observe(request, model_response)
        cov = self.ctx.coverage
        if quiet:
            found = {FAST_FORWARDED: 1}
        else:
            cov.observe(request, model_response)
            COVERAGE.observe(request, model_response)
            held = value_classes(self.model.state)  # classified once, counted in both
            cov.values.update(held)
            COVERAGE.values.update(held)
            found = input_items(request, model_response, self.model.state, self.model.cfg.ack_page_bytes)
            found.update(record_items(request, model_response, pre, self._stored_text))
        cov.inputs.update(found)
        COVERAGE.inputs.update(found)
        for edge in self.edges:
            cov.observe_edge(edge)
            COVERAGE.observe_edge(edge)
        self.seen_edges.update(self.edges)
        self.edges.clear()
        reason = compare_responses(model_response, impl_response)
        if reason is not None:
            self._fail(reason)
        self._note_crash(request, model_response)
        st_ = self.model.state
        if quiet or (st_ is self._checked_state and op_reads_only(request)):
            # The model did not move (a read, an invalid request): the implementation must not
            # have either; that is checked with the next step that moves, or at teardown.
            # A fast-forward checks once, after its last delivery.
            self._unchecked = True
        else:
            self._check_now()
        self.max_staged = max(self.max_staged, len(st_.stage_records))
        self.max_applied = max(self.max_applied, st_.authority.applied_sequence)
        return model_response

    # -- rules ------------------------------------------------------------------

    @initialize(data=_BLOCKS["start"])
    def start(self, data) -> None:
        """Swarm: choose this example's rule kinds; then reset both sides."""
        d = _Draw(data)
        # Each kind four times in five; ``ffwd`` twice (its examples cost ~2.5 times the others).
        enabled = frozenset(k for k in KINDS if d.index(5) < (2 if k == "ffwd" else 4))
        self.enabled = enabled or frozenset({"read"})
        self.interleave = d.index(6) != 5
        config = d.weighted([(16, None), (3, {"ackPageBytes": SMALL_ACK}), (1, {"prefix": "/other"}),
                             (1, {"masterKeyHex": OTHER_KEY_HEX})])
        self.send({"op": "reset"} if config is None else {"op": "reset", "config": config})
        if d.flag(60):
            self.send(_Gen.fresh_begin(d, self.view()))

    def _with_nested(self, d: _Draw, v: _View, request: dict) -> dict:
        """Maybe give a page or delivery ``duringFetch`` requests; likelier when it will read a value."""
        frame = request["frame"]
        records = frame.get("records") if request["op"] == "page" else [frame.get("state")]
        reads = v.state.store_on and any(_fetchable(r, v.epochs) for r in records or ())
        if not self.interleave or not d.flag(60 if reads else 10):
            return request
        anticipate: dict = {}
        if request["op"] == "page" and frame.get("complete") is True:
            anticipate[frame["projectId"]] = frame["recordVersion"]
        elif request["op"] == "delivery" and v.attempt is not None:
            anticipate[frame["projectId"]] = frame["recordVersion"]
        request["duringFetch"] = _Gen.nested(d, v, request, anticipate)
        return request

    def _near_ack_bound(self, d: _Draw, v: _View, request: dict) -> dict:
        """Under a small ``ackPageBytes``, a page sized to its bound (``_Gen.near_ack_bound``)."""
        bound = self.model.cfg.ack_page_bytes
        if request["op"] != "page" or bound > SMALL_ACK:
            return request
        return _Gen.near_ack_bound(d, v, request, bound)

    def _missing_values(self, d: _Draw, v: _View, request: dict) -> list[dict]:
        """Store answers for each fetchable record of a frame the store has no answer for.

        Mostly a correct envelope (so values get installed); sometimes each
        other kind of answer: an envelope wrong in one field (a staged one
        in its organisation, project, key or staging id; a legacy one in
        its project or key: ``stored_envelope``), text that is
        not an envelope, a legacy version other than asked, nothing, an error.
        """
        from envreplica.model.store import legacy_parameter_name, staged_parameter_name

        frame = request["frame"]
        project = frame["projectId"]
        records = frame["records"] if request["op"] == "page" else [frame["state"]]
        prefix = self.model.cfg.prefix
        org = v.org or ORG
        puts = []
        for i, r in enumerate(records):
            ref = r["head"]["valueRef"]
            if ref is None or r["binding"] is not None or r["policyEpoch"] not in v.epochs:
                continue
            key = r["key"]
            staged = ref["kind"] == "staged"
            name: Optional[str]
            if staged:
                name, version = staged_parameter_name(prefix, project, key, ref["stagingId"]), None
            else:
                name, version = legacy_parameter_name(prefix, project, key), ref["ssmVersion"]
            if name is None or (name, version) in self.model.store:
                continue
            answer = d.weighted([(24, "correct"), (12 if staged else 6, "wrong"), (2, "garbage"),
                                 (0 if staged else 6, "version"), (0 if staged else 20, "typed"),
                                 (2, "missing"), (2, "error"), (2, "none")])
            if answer == "none":
                continue
            if answer in ("missing", "error"):
                puts.append({"op": "store.fail", "projectId": project, "key": key, "ref": ref, "mode": answer})
                continue
            value = draw_value(d, i)
            raw = stored_envelope(d, ref, org, project, key, value, wrong=answer == "wrong")
            if answer == "garbage":
                raw = d.one(["{not json", json.dumps({"v": 3, "kind": "project-env"})])
            if answer == "typed":
                raw = typed_legacy_envelope(d, project, key, value)
            put = {"op": "store.put", "projectId": project, "key": key, "ref": ref,
                   "raw": raw if answer in ("garbage", "typed") else _Gen.restyle(d, raw)}
            if answer == "version":
                put["reportedVersion"] = ref["ssmVersion"] + 1
            puts.append(put)
        return puts

    def _with_crash_or_nested(self, crash: tuple[int, int], d: _Draw, v: _View, request: dict) -> dict:
        """``crashAfterCommit`` (when the implementation offers it), or else maybe ``duringFetch``."""
        if self.ctx.offered(CRASH_FIELD):
            request = _with_crash(crash, v, request)
            if CRASH_FIELD in request:
                return request
        return self._with_nested(d, v, request)

    def do_cloud(self, data) -> None:
        d = _Draw(data)
        if self.plan and not d.flag(10):
            self.send(self.plan.pop(0))
            return
        v = self.view()
        resend = self._resend_half_applied(d, v)
        if resend is not None:
            self.send(resend)
            return
        crash = _crash_draw(d)
        request = self._near_ack_bound(d, v, _Gen.cloud(d, v))
        self.plan = []
        if request["op"] in ("page", "delivery"):
            puts = self._missing_values(d, v, request)
            request = self._with_crash_or_nested(crash, d, v, request)
            if puts and not d.flag(10):
                self.plan = puts[1:] + [request]
                request = puts[0]
        self.send(request)

    def do_begin(self, data) -> None:
        self.send(_Gen.begin(_Draw(data), self.view()))

    def do_page(self, data) -> None:
        d, v = _Draw(data), self.view()
        crash = _crash_draw(d)
        self._send_stocked(d, v, self._with_crash_or_nested(crash, d, v, self._near_ack_bound(d, v, _Gen.page(d, v))))

    def do_delivery(self, data) -> None:
        """A delivery; now and then followed by a burst of deliveries that each move a held record by
        several fields at once (``_Gen.moved_delivery``: every combination the record domain allows, drawn
        uniformly from a generator seeded with the block, where Hypothesis's own bytes would keep choosing
        the same few of the many)."""
        d, v = _Draw(data), self.view()
        crash = _crash_draw(d)
        self._send_stocked(d, v, self._with_crash_or_nested(crash, d, v, _Gen.delivery(d, v)))
        if d.flag(20):
            rng = random.Random(zlib.crc32(data))
            for _ in range(2 + d.index(8)):
                request = _Gen.moved_delivery(rng, self.view())
                if request is None:
                    break
                self.send(request)

    def _send_stocked(self, d: _Draw, v: _View, request: dict) -> None:
        """A page or delivery of the adversarial rules, half the time right after the store answers for
        the values it will read (``_missing_values``, one step each), so that what is read, and how each
        answer is judged, does not depend on the healthy cloud rule alone."""
        for put in self._missing_values(d, v, request) if d.flag(50) else ():
            self.send(put)
        self.send(request)

    def do_commit(self, data) -> None:
        self.send(_Gen.commit(_Draw(data), self.view()))

    def do_close(self, data) -> None:
        self.send({"op": "close"})

    def do_restart(self, data) -> None:
        self.send({"op": "restart"})

    def do_read(self, data) -> None:
        request = _Gen.read(_Draw(data), self.view())
        if not self.ctx.offered(request["op"]):
            request = {"op": "status"}  # an extension this adapter does not offer: a read it does
        self.send(request)

    def do_store(self, data) -> None:
        self.send(_Gen.store(_Draw(data), self.view()))

    def do_invalid(self, data) -> None:
        self.send(_Gen.invalid(_Draw(data), self.view()))

    def do_ffwd(self, data) -> None:
        """A consistent cloud's next deliveries, up to a thousand at once (``_Gen.fast_forward``), so the
        stream reaches sequences 10, 100, 1,000 and the rules after it deliver and replay around them.
        Each response is compared; the state is checked after the last one. Unless the replica serves
        or stages a complete project, a whole clean reconciliation first (``_Gen.clean_reconciliation``:
        it also makes the examples that serve installed values of every class). Often one more step
        right after: the receipts read, or a sequence at a decimal boundary sent again."""
        d, v = _Draw(data), self.view()
        # Seeded from the block's tail alone (its head makes the choices): when shrinking lowers the
        # target, the fast-forward is a head of the same deliveries, and still fails where it did.
        rng = random.Random(zlib.crc32(data[-FFWD_SEED_BYTES:]))
        scales = [n for n in self.ffwd_scales if n == 10 or self.max_applied < n - 2]
        count, mix = _Gen.fast_forward(d, scales)
        if not (v.gate_open and v.attempt is None) and not any(sp.complete for sp in v.stage.values()):
            for request in _Gen.clean_reconciliation(d, rng, v):
                request = self._near_ack_bound(d, self.view(), request)
                if request["op"] == "page" and self.ctx.offered(CRASH_FIELD) and rng.random() < 0.05:
                    # Now and then a crash after one of the page's commits (it has several: many reads).
                    request = _with_crash((99, rng.randrange(256)), self.view(), request)
                self.send(request)
        sent = 0
        for _ in range(count(self.view().applied)):
            delivery = _Gen.ffwd_delivery(rng, self.view(), mix)
            if delivery is None:
                break
            self.send(delivery, quiet=True)
            sent += 1
        if sent:
            self._check_now()
            follow = _Gen.after_fast_forward(d, self.view())
            if follow is not None:
                self.send(follow)

    # -- end of an example ----------------------------------------------------------

    def teardown(self) -> None:
        ctx = self.ctx
        late = None
        if self.failure is None and self._unchecked and not self.impl_dead:
            late = _check_state(self.model, self.impl, ctx.variant, ctx.state_check) or self._check_tables()
            if late is not None:
                self.failure = f"after the last step: {late}"
        ctx.examples += 1
        reached = sequence_items(self.max_applied)
        ctx.coverage.inputs.update(reached)
        COVERAGE.inputs.update(reached)
        ctx.last_steps = self.steps
        if self.failure is not None:
            if ctx.first_failure is None:
                ctx.first_failure = (ctx.examples, time.perf_counter() - ctx.started, len(self.steps))
                # Written once, so an interrupted run still leaves its first failure on disk;
                # run_lockstep overwrites it with the shrunk one (not rewritten per shrink attempt).
                if ctx.out_dir is not None:
                    ctx.trace_path, ctx.itf_path = write_trace(
                        ctx.out_dir, ctx.trace_name, self.steps, self.failure,
                        {"variant": ctx.variant.value, "steps": len(self.steps)})
            ctx.failure = {"steps": list(self.steps), "reason": self.failure, "ffwd_scales": self.ffwd_scales}
        if self.impl_dead:
            ctx.discard()
        ctx.report_progress()
        hypothesis.target(float(len(self.seen_edges)), label="gate transitions seen")
        hypothesis.target(float(self.max_staged), label="staged records")
        hypothesis.target(float(self.max_applied), label="consumed sequences")
        if late is not None:
            raise LockstepDivergence(self.failure)


#: How many rules of each kind the machine has. Hypothesis picks uniformly among
#: the enabled rules, so this is the step mix when every kind is enabled: the
#: constructive kinds (pages, deliveries, store answers) outweigh the ones that
#: throw an attempt away (begin, close, restart).
RULE_WEIGHTS = {"cloud": 6, "begin": 1, "page": 3, "delivery": 3, "commit": 1, "close": 1, "restart": 1,
                "read": 2, "store": 2, "invalid": 1, "ffwd": 1}


def _make_rule(kind: str, name: str):
    """A rule of ``kind``: its argument is the block of bytes its choices come from."""
    body: Callable[..., None]
    if kind in BLOCK_BYTES:
        def with_block(self: LockstepMachine, data: bytes) -> None:
            getattr(self, f"do_{kind}")(data)

        body, decorate = with_block, rule(data=_BLOCKS[kind])
    else:  # close, restart: nothing to choose
        def without_block(self: LockstepMachine) -> None:
            getattr(self, f"do_{kind}")(None)

        body, decorate = without_block, rule()
    body.__name__ = body.__qualname__ = name
    body.__doc__ = f"Send one {kind} request to both sides."
    return precondition(lambda self: kind in self.enabled)(decorate(body))


for _kind, _weight in RULE_WEIGHTS.items():
    for _n in range(_weight):
        _name = _kind if _n == 0 else f"{_kind}_{_n + 1}"
        setattr(LockstepMachine, _name, _make_rule(_kind, _name))
del _kind, _weight, _n, _name
