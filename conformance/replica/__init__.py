"""Lockstep conformance: Hypothesis drives the model and an implementation with the same requests.

``LockstepMachine`` is a ``hypothesis.stateful.RuleBasedStateMachine``. Each
rule builds ONE request of the conformance adapter (docs/protocol.md section
5) and sends it to the model (``ModelDriver``) and to the implementation (any
``Driver``). The two responses must be equal: the same keys, ``id``, ``ok``
and ``result`` exactly (as JSON: ``true`` is not ``1``), the error ``type``
for errors (messages may differ), ``nested`` response by response. Then:

* when the implementation exposes its replica's state read back into the
  model's shape (``SqliteDriver``: ``driver.replica.to_model_state()`` and
  ``driver.sealer``), ``with_macs(model state, sealer)`` must equal it (a
  read or invalid request, after which the model did not move, is checked
  with the next step that moves, or at the end of the example);
* every invariant of ``spec.properties.INVARIANTS`` must hold on the model's
  state and on the read-back state, except those the variant is known to
  break (``KNOWN_VIOLATIONS``: ``seed`` and ``fix-f1`` reproduce findings F1
  and F2 of docs/findings.md on the model itself).

Every example starts with a ``reset`` of both sides (and often a first
``begin``). Generation is protocol-aware and biased toward what exists: the
strategies read the model's state (cursor and true high-water mark, the open
attempt and its staged projects, live and staged records, receipts, what
the value store holds). Rule kinds (``KINDS``, weighted by ``RULE_WEIGHTS``):

* ``cloud``: what a consistent cloud sends next (begin, the next canonical
  page, the commit with the true high-water mark and versions, the next
  delivery with a reachable record move, a snapshot read), with the value
  store stocked first (mostly correct envelopes, sometimes every other kind
  of answer), at-least-once retransmissions, lagging snapshots, a narrowed
  policy, an occasional overtaking delivery. This rule reaches deep states.
* ``begin``, ``page``, ``delivery``, ``commit``: the same frames from small
  domains with the odd ones mixed in (other attempts, stale/gapped/wrong
  versions, replays and conflicting frames at consumed sequences, gaps,
  older and conflicting records, strangers); ``close``, ``restart``;
  ``read`` (status, snapshot, receipts); ``store`` (put/fail/off); ``invalid``
  (requests and frames the wire rejects).
* ``ready`` and ``diagnostics`` (docs/protocol.md section 6) are reads;
  about 5 % of pages and deliveries carry ``crashAfterCommit`` (k = 1..3),
  after which the implementation, reopened from disk, must equal the
  model's crash successor; a delivery that crashed before its receipt is
  sent again by the cloud (coverage group ``crash``).
* ``duringFetch``: a page or delivery that will read a value often carries
  nested requests run inside its read on both sides: random ones (begin,
  commit, close, restart, deliveries, snapshots, ...) and the races that
  matter (the attempt begun again under fewer epochs and the same page
  resent; a whole reconciliation under fewer epochs inside a live delivery;
  the next delivery moving the record being read for; a commit promoting a
  record still pending).

Swarm testing: the ``@initialize`` rule draws, per example, a random subset
of ``KINDS`` (and whether interleavings are on); each rule's
``@precondition`` checks membership. ``hypothesis.target`` reports depth
(distinct gate transitions, staged records, consumed sequences); the target
phase that hill-climbs on it runs only where the budget is large
(``TARGET_PHASE_PROFILES``: measured, it costs the ``ci`` budget coverage).

Choices: each rule draws one block of bytes and makes every choice from it
(``draw._Draw``), so a step has the same shape in Hypothesis's choice sequence
whatever the state; shrinking then stays aligned when steps are deleted.
Shrinking is capped by a count of calls (``run.SHRINK_CALLS``); then the
concrete requests of the shrunk example are minimized by deleting steps and
nested requests while the divergence stays the same (``run.MINIMIZE_REPLAYS``
replays); then its data: keys, project ids and stored values are replaced
with shorter ones, consistently across the trace and inside the stored
envelopes, while it diverges at the same step the same way
(``run._shrink_data``, ``rename``; ``run.DATA_REPLAYS`` replays). Counts, not
seconds: a busy machine finds the same trace.

A divergence names where a value differs: the index, the code point of each
side there and both values escaped, cut around it (``text``); values are the
harness's own test data, so they are shown, except an in-process
implementation's on a real value store (``text.values_shown``).

Coverage: ``COVERAGE`` (process-wide: every run of the process) and each
run's ``LockstepReport.coverage`` count the ops, refusal codes,
materialization reasons (read from results, nested ones included), error
types and gate transitions (the model's gate before/after every
begin/commit/close/restart, nested ones included) reached;
``print_coverage`` prints the table, ``LockstepCoverage.unreached`` lists
what was reachable and not reached.

On a failure the example is written by ``teardown`` (and the minimized one
by ``run_lockstep``) as JSON lines of requests (replayable: ``envreplica
replay FILE.jsonl``, ``envreplica conformance --traces DIR``) and as an
ITF-style trace of (request, model response, implementation response) per
step.

Left out on purpose:

* the tables of an external implementation that does not offer the
  ``state`` op (docs/protocol.md section 6): one that does is asked for them
  out of band after each step and held table by table against the model's
  (``external.StateProbe``; receipt MACs as names); one that answers it
  ``unsupported`` is held to its responses only, and the report says so
  (``LockstepReport.tables``);
* error messages (only the error ``type`` is compared: wording is free), and
  a diagnosis's ``message`` (``diagnostics`` is compared by ``reason``);
* interleavings other than the value-store read windows the adapter exposes
  (``duringFetch``): no second writer process, no crash inside a
  transaction (``restart`` falls between requests; inside a read it is
  answered ``unsupported``);
* the SSM value store: the lockstep stocks the embedded store through
  ``store.put``; SSM is tested on its own against moto.

Entry points: ``run_lockstep`` (the CLI, ``envreplica check`` and the
mutant tests use it: keep its signature), ``replay_requests`` /
``replay_steps``, ``lockstep_settings``, ``print_coverage``.

Modules, each importing only those above it:

* ``text``: strings in messages, escaped, and where two differ
  (``text_difference``);
* ``domains``: the small domains (``KINDS``, ``STREAMS``, ``KEYS``,
  ``EPOCH_SETS``, ...) and ``KNOWN_VIOLATIONS``;
* ``rename``: a trace's literals by kind, the trace with some replaced,
  shorter names in the same order;
* ``coverage``: ``LockstepCoverage``, ``COVERAGE``, ``print_coverage``;
* ``compare``: ``compare_responses`` and the state checks after a step
  (``_check_state``, ``state_difference``), ``diverging`` (an answer that
  broke its definition, as a divergence), and ``replay_steps`` (saved
  requests sent to both drivers, compared step by step);
* ``findings``: ``finding_of``, the finding a divergence is (replayed with
  ``replay_steps`` beside the model with each fix left out);
* ``traces``: ``describe_request`` / ``describe_response`` /
  ``format_steps``, ``write_trace`` / ``read_requests``;
* ``draw``: ``BLOCK_BYTES`` and ``_Draw``; ``records``: record builders,
  ``_moved``, ``_View``; ``generate``: ``_Gen``, the request builders;
* ``context``: ``_Run``, what every example of one run shares;
* ``machine``: ``LockstepMachine``, ``RULE_WEIGHTS``, the tracing model driver;
* ``run``: ``lockstep_settings`` and the profiles, ``run_lockstep``,
  ``LockstepReport``, minimization and the data pass, ``replay_requests``
  (and ``replay_steps``, re-exported from ``compare``).

What every lockstep shares is at ``conformance``'s top: ``conformance.shrinking``
(Hypothesis's shrinking capped in calls) and ``conformance.literals`` (the
literals Hypothesis mixes into draws, pinned); ``literals`` here is only the
old name of the latter, kept for code that imports it (and, through it,
``conformance.lockstep.literals``).

This package re-exports ``__all__`` and the few other names the CLI and the
tests use. The budgets ``SHRINK_CALLS``, ``MINIMIZE_REPLAYS`` and ``DATA_REPLAYS`` are left
out on purpose: ``run`` reads them at call time, so patch them there
(a copy here would take the patch and change nothing).
"""

from envreplica.conformance.replica.compare import compare_responses
from envreplica.conformance.replica.context import _scratch_dir  # noqa: F401  (the CLI's replay)
from envreplica.conformance.replica.coverage import COVERAGE, LockstepCoverage, print_coverage
from envreplica.conformance.replica.domains import KINDS, KNOWN_VIOLATIONS
from envreplica.conformance.replica.machine import LockstepMachine
from envreplica.conformance.replica.run import (
    PROFILE_EXAMPLES,  # noqa: F401  (the tests)
    LockstepReport,
    lockstep_settings,
    replay_requests,
    replay_steps,
    run_lockstep,
)
from envreplica.conformance.replica.traces import (
    describe_request,
    describe_response,
    format_steps,
    read_requests,
)

__all__ = [
    "COVERAGE",
    "KINDS",
    "KNOWN_VIOLATIONS",
    "LockstepCoverage",
    "LockstepMachine",
    "LockstepReport",
    "compare_responses",
    "describe_request",
    "describe_response",
    "format_steps",
    "lockstep_settings",
    "print_coverage",
    "read_requests",
    "replay_requests",
    "replay_steps",
    "run_lockstep",
]
