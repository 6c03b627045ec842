"""One batch op as a sequence of the model's steps, at a chosen granularity.

Models: what the model says an op may do between its call and its return.
An op is a small program over the model's ``State``: a first step, then
(while it is ``Suspended``) further steps, until one is ``Finished`` with the
model's answer. Another op's steps may run between any two of them; the
search (``linearize``) chooses the order. The value store is fixed during a
batch (its requests are setup), so a read's answer is a function of what it
asks (``answer``).

Two granularities (``Granularity``):

* ``AWAIT``: the model's own steps (``model.actions.step``): a page or
  delivery runs to its first value-store read and suspends (``Pending``), then
  a ``Resume`` per read, as ``ModelDriver._run`` drives it. Between two await
  points the op is one atomic step. This is the seed's unit of interleaving
  inside ONE process.
* ``TRANSACTION`` (the default of ``run_concurrent``): every
  ``db.transaction`` of the seed is its own step, exactly where
  ``impl.replica`` has its transactions: a page is prepare (write), then per
  key to fetch a before (read), an after (write), and a final (read); a
  delivery is prepare (write), optionally before (read) and after (write),
  and final (write); ``begin``, ``commit``, ``close`` and the reads are one
  transaction. This is the unit of interleaving between PROCESSES: another
  process may commit between any two transactions of this one (the seed has
  no lock around an operation), so a correct implementation may show
  histories that ``AWAIT`` rejects (a reader between a delivery's
  after-transaction and its final one sees the value installed and the
  cursor not yet moved). Each step runs the model's own per-transaction
  function (``model.replica._page_prepare``, ``_stage_before``,
  ``_stage_after``, ``_page_final``, ``_delivery_prepare``, ``_live_before``,
  ``_live_after``, ``_delivery_final``) composed as ``apply_page`` /
  ``apply_delivery`` / ``resume`` compose them; ``sequential_disagreement``
  checks, on any requests, that running the steps back to back gives exactly
  what the model's ``step`` gives, so this composition cannot drift from the
  model's unnoticed.

A transaction that raises (``CorruptReplica``) ends the op with that error
and leaves the state as the transactions before it left it (the model's
``committed``).

Leaves out on purpose: ops that act on one process rather than the replica
(``reset``, ``restart``, ``store.*``: setup only, ``history.BATCH_OPS``) and
``duringFetch`` (real processes run inside the windows instead).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Optional, Union, cast

from envreplica.conformance.concurrent.history import BATCH_OPS, OpKind, Response, canonical, compared_result
from envreplica.conformance.drivers import check_request, store_answer
from envreplica.model import replica as R
from envreplica.model import store as value_store
from envreplica.model.actions import Begin, CloseGate, Commit, Deliver, Page, Resume, step
from envreplica.model.state import ModelConfig, PreparedDelivery, ReadRequest, State
from envreplica.model.store import Answer
from envreplica.spec import wire
from envreplica.spec.domain import (
    ApplyFrame,
    BindingState,
    Failed,
    PageFrame,
    PageRefused,
    Pending,
    Readiness,
    ReplicaError,
)

__all__ = [
    "Granularity",
    "Finished",
    "Suspended",
    "ModelOp",
    "StoreAnswers",
    "model_response",
    "sequential_disagreement",
]


class Granularity(str, enum.Enum):
    """Where another op may run inside an op (see the module docstring)."""

    AWAIT = "await"
    TRANSACTION = "transaction"


@dataclass(frozen=True)
class Finished:
    """The op has returned: the model's answer."""

    response: Response


@dataclass(frozen=True)
class Suspended:
    """The op has more steps; ``cont`` says where it resumes (hashable: part of the search state)."""

    cont: Hashable


Outcome = Union[Finished, Suspended]


def model_response(result: Any) -> Response:
    """The model's result as compared (``Failed``: its error type; else the result's wire JSON)."""
    if isinstance(result, Failed):
        return Response(False, result.kind)
    return Response(True, canonical(compared_result(wire.encode(result))))


class StoreAnswers:
    """What each value-store read answers: the model driver's store after the setup (fixed in a batch)."""

    def __init__(self, store: dict) -> None:
        self._store = dict(store)

    def __call__(self, request: ReadRequest) -> Answer:
        return store_answer(self._store, request)


# ---------------------------------------------------------------------------
# Continuations (where a suspended op resumes)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Awaiting:
    """AWAIT: suspended in a read; ``entry`` is its in-flight record in ``State.inflight``."""

    entry: Any


@dataclass(frozen=True)
class _PageNext:
    """TRANSACTION: the page's next transaction is the before of ``keys[0]``, or its final read."""

    keys: tuple[str, ...]
    reader_on: bool


@dataclass(frozen=True)
class _PageAfter:
    """TRANSACTION: the page's next transaction is the after of ``key`` (its read answered ``fetched``)."""

    key: str
    rest: tuple[str, ...]
    reader_on: bool
    before: BindingState
    fetched: value_store.Fetched


@dataclass(frozen=True)
class _DeliveryBefore:
    prepared: PreparedDelivery
    reader_on: bool


@dataclass(frozen=True)
class _DeliveryAfter:
    prepared: PreparedDelivery
    before: BindingState
    fetched: value_store.Fetched


@dataclass(frozen=True)
class _DeliveryFinal:
    prepared: PreparedDelivery


# ---------------------------------------------------------------------------
# One op
# ---------------------------------------------------------------------------


class ModelOp:
    """A batch op as model steps: ``first(state)``, then ``next(state, cont)`` while suspended.

    Each returns ``(next state, Outcome, label)``; ``label`` names the step
    for a witness (``"prepare"``, ``"before A"``, ``"resume"``, ...).
    """

    # Set by ``_parse`` according to ``kind``.
    _action: Union[Begin, Page, Deliver, Commit, CloseGate]  # a transaction's, or a page's or delivery's
    frame: Union[PageFrame, ApplyFrame]  # a page's or a delivery's
    project_ids: tuple[str, ...]  # a snapshot's or diagnostics'

    def __init__(self, request: dict, cfg: ModelConfig, answer: Callable[[ReadRequest], Answer],
                 granularity: Granularity) -> None:
        if request.get("op") not in BATCH_OPS:
            raise ValueError(f"op {request.get('op')!r} cannot be a concurrent op (one of "
                             f"{', '.join(sorted(BATCH_OPS))}): it acts on one process, which the model cannot "
                             f"tell from the others; put it in the setup")
        self.request = request
        self.kind = OpKind(request["op"])
        self.cfg = cfg
        self.answer = answer
        self.granularity = Granularity(granularity)
        self._invalid: Optional[Response] = None
        try:
            check_request(dict(request, id=0))  # the adapter's own checks, as the drivers make them
            self._parse()
        except ReplicaError as error:  # an invalid request or frame: answered at once, changes nothing
            self._invalid = Response(False, error.wire_type)

    def _parse(self) -> None:
        r, k = self.request, self.kind
        if k is OpKind.BEGIN:
            self._action = Begin(wire.parse_begin(r["frame"]), wire.parse_policy_epochs(r["keptPolicyEpochs"]),
                                 wire.parse_org_id(r["orgId"]))
        elif k is OpKind.PAGE:
            self.frame = wire.parse_page(r["frame"])
            self._action = Page(self.frame)
        elif k is OpKind.DELIVERY:
            self.frame = wire.parse_apply(r["frame"])
            self._action = Deliver(self.frame)
        elif k is OpKind.COMMIT:
            self._action = Commit(wire.parse_commit(r["frame"]))
        elif k is OpKind.CLOSE:
            self._action = CloseGate()
        elif k in (OpKind.SNAPSHOT, OpKind.DIAGNOSTICS):
            self.project_ids = wire.parse_project_ids(r["projectIds"])

    @property
    def _page_frame(self) -> PageFrame:
        """A page's frame: only a page's steps ask (``_parse`` set it by ``kind``)."""
        return cast(PageFrame, self.frame)

    @property
    def _apply_frame(self) -> ApplyFrame:
        """A delivery's frame: only a delivery's steps ask (``_parse`` set it by ``kind``)."""
        return cast(ApplyFrame, self.frame)

    # -- steps ---------------------------------------------------------------

    def first(self, st: State) -> tuple[State, Outcome, str]:
        if self._invalid is not None:
            return st, Finished(self._invalid), "invalid"
        k = self.kind
        if k is OpKind.STATUS:
            return st, Finished(model_response(R.read_status(st))), "read"
        if k is OpKind.SNAPSHOT:
            return st, Finished(model_response(R.read_snapshot(st, self.project_ids, self.cfg))), "read"
        if k is OpKind.RECEIPTS:
            return st, Finished(model_response(list(R.list_receipts(st)))), "read"
        if k is OpKind.READY:  # true at a moment it is ready, false at one it is not (its deadline's)
            return st, Finished(model_response(Readiness(R.is_ready(st)))), "read"
        if k is OpKind.DIAGNOSTICS:
            return st, Finished(model_response(R.diagnose(st, self.project_ids, self.cfg))), "read"
        if k in (OpKind.BEGIN, OpKind.COMMIT, OpKind.CLOSE):
            st, result = step(self.cfg, st, self._action)
            return st, Finished(model_response(result)), "transaction"
        if self.granularity is Granularity.AWAIT:
            return self._await_outcome(*step(self.cfg, st, self._action), label="start")
        if k is OpKind.PAGE:
            return self._guard(st, self._page_prepare, "prepare")
        return self._guard(st, self._delivery_prepare, "prepare")

    def next(self, st: State, cont: Hashable) -> tuple[State, Outcome, str]:
        if isinstance(cont, _Awaiting):
            slot = st.inflight.index(cont.entry)  # equal entries are interchangeable: resuming either is the same
            return self._await_outcome(*step(self.cfg, st, Resume(slot, self.answer(cont.entry.read.request))),
                                       label="resume")
        if isinstance(cont, _PageNext):
            if not cont.keys:
                return self._guard(st, self._page_final, "final")
            return self._guard(st, lambda s: self._page_before(s, cont), f"before {cont.keys[0]}")
        if isinstance(cont, _PageAfter):
            return self._guard(st, lambda s: self._page_after(s, cont), f"after {cont.key}")
        if isinstance(cont, _DeliveryBefore):
            return self._guard(st, lambda s: self._delivery_before(s, cont), "before")
        if isinstance(cont, _DeliveryAfter):
            return self._guard(st, lambda s: self._delivery_after(s, cont), "after")
        if isinstance(cont, _DeliveryFinal):
            return self._guard(st, lambda s: self._delivery_final(s, cont), "final")
        raise TypeError(f"unknown continuation {cont!r}")

    # -- AWAIT ---------------------------------------------------------------

    @staticmethod
    def _await_outcome(st: State, result: Any, *, label: str) -> tuple[State, Outcome, str]:
        if isinstance(result, Pending):
            return st, Suspended(_Awaiting(st.inflight[result.slot])), label
        return st, Finished(model_response(result)), label

    # -- TRANSACTION ---------------------------------------------------------

    @staticmethod
    def _guard(st: State, transaction: Callable[[State], tuple[State, Outcome]], label: str
               ) -> tuple[State, Outcome, str]:
        """One transaction: an error ends the op and rolls back this transaction only."""
        try:
            st2, outcome = transaction(st)
        except ReplicaError as error:
            return st, Finished(Response(False, error.wire_type)), label
        return st2, outcome, label

    def _fetched(self, project: str, state: BindingState, org: str, reader_on: bool) -> value_store.Fetched:
        planned = value_store.plan(self.cfg.prefix, project, state, reader_on)
        if isinstance(planned, ReadRequest):
            return value_store.interpret(org, project, state, planned, self.answer(planned))
        return planned

    def _page_prepare(self, st: State) -> tuple[State, Outcome]:
        st, prepared = R._page_prepare(self.cfg, st, self._page_frame)
        if isinstance(prepared, PageRefused):
            return st, Finished(model_response(prepared))
        return st, Suspended(_PageNext(tuple(prepared), st.store_on))

    def _page_before(self, st: State, cont: _PageNext) -> tuple[State, Outcome]:
        frame = self._page_frame
        key, rest = cont.keys[0], cont.keys[1:]
        before = R._stage_before(st, frame.attempt_id, frame.project_id, key)
        if before is None:
            return st, Suspended(_PageNext(rest, cont.reader_on))
        state, org = before
        fetched = self._fetched(frame.project_id, state, org, cont.reader_on)
        return st, Suspended(_PageAfter(key, rest, cont.reader_on, state, fetched))

    def _page_after(self, st: State, cont: _PageAfter) -> tuple[State, Outcome]:
        frame = self._page_frame
        st = R._stage_after(self.cfg, st, frame.attempt_id, frame.project_id, cont.key, cont.before, cont.fetched)
        return st, Suspended(_PageNext(cont.rest, cont.reader_on))

    def _page_final(self, st: State) -> tuple[State, Outcome]:
        st, result = R._page_final(st, self._page_frame)
        return st, Finished(model_response(result))

    def _delivery_prepare(self, st: State) -> tuple[State, Outcome]:
        reader_on = st.store_on
        st, prepared = R._delivery_prepare(self.cfg, st, self._apply_frame)
        if not isinstance(prepared, PreparedDelivery):
            return st, Finished(model_response(prepared))
        if prepared.fetch:
            return st, Suspended(_DeliveryBefore(prepared, reader_on))
        return st, Suspended(_DeliveryFinal(prepared))

    def _delivery_before(self, st: State, cont: _DeliveryBefore) -> tuple[State, Outcome]:
        frame = self._apply_frame
        prepared = cont.prepared
        key = frame.state.key
        if prepared.attempt_id is None:
            before = R._live_before(st, frame.project_id, key)
        else:
            before = R._stage_before(st, prepared.attempt_id, frame.project_id, key)
        if before is None:
            return st, Suspended(_DeliveryFinal(prepared))
        state, org = before
        fetched = self._fetched(frame.project_id, state, org, cont.reader_on)
        return st, Suspended(_DeliveryAfter(prepared, state, fetched))

    def _delivery_after(self, st: State, cont: _DeliveryAfter) -> tuple[State, Outcome]:
        frame = self._apply_frame
        prepared = cont.prepared
        key = frame.state.key
        if prepared.attempt_id is None:
            st = R._live_after(self.cfg, st, frame.project_id, key, cont.before, cont.fetched)
        else:
            st = R._stage_after(self.cfg, st, prepared.attempt_id, frame.project_id, key, cont.before, cont.fetched)
        return st, Suspended(_DeliveryFinal(prepared))

    def _delivery_final(self, st: State, cont: _DeliveryFinal) -> tuple[State, Outcome]:
        st, result = R._delivery_final(st, self._apply_frame, cont.prepared)
        return st, Finished(model_response(result))

    # -- all steps at once -----------------------------------------------------

    def run_alone(self, st: State) -> tuple[State, Response, int]:
        """Every step of this op back to back: (state, answer, steps)."""
        st, outcome, _ = self.first(st)
        steps = 1
        while isinstance(outcome, Suspended):
            st, outcome, _ = self.next(st, outcome.cont)
            steps += 1
        return st, outcome.response, steps


def sequential_disagreement(driver: Any, request: dict, granularity: Granularity) -> Optional[str]:
    """Send ``request`` to ``driver`` (a ``ModelDriver``: it advances) and hold ``ModelOp``'s steps to it.

    The steps, run back to back from the driver's state before the request,
    must give the driver's answer and its state after: this holds the
    ``TRANSACTION`` composition of the model's per-transaction functions (and
    ``AWAIT``'s use of ``step``) to ``ModelDriver._run``. None when they agree.
    """
    st = driver.state
    op = ModelOp(request, driver.cfg, StoreAnswers(driver.store), granularity)
    got_state, got, steps = op.run_alone(st)
    want = Response.of(driver.handle(dict(request, id=0)))
    if got != want:
        return (f"{request['op']} at {granularity.value} granularity: its {steps} steps answer {got.text()}, "
                f"the model driver answers {want.text()}")
    if got_state != driver.state:
        return (f"{request['op']} at {granularity.value} granularity: its {steps} steps leave another state "
                f"than the model driver")
    return None
