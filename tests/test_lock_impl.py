"""The projection lock (``impl.lock``): its contract, on real directories and real processes, counted in steps.

* the calls it makes are the design's (the model's ``fixed`` steps), in its order (the uncontended path; a
  takeover);
* a stale lock is taken over at the first try (``max_tries=0``: no wait allowed): a dead owner, a pid reused by
  another process (another start time), a zombie owner (a real child that exited and is not reaped), and a real
  holder killed with SIGKILL before each of its calls in turn;
* a live owner's lock is never taken over; nor one whose owner is in another PID namespace (a ``Calls`` whose
  namespace differs): ``LockBusy`` names it and why;
* a release never removes another's lock: ``LockLost``, their lock intact (even after a hand removed the lock
  and another process took it: the hole of the design before this one, now closed);
* the ticket order: a waiter is not overtaken by a later arrival (three lock users in threads, each paused
  before every call; a schedule that favours the later one, and seeded random schedules: counted in steps);
* the operation's own error propagates unchanged;
* each bad input of issue 42 is one clear error (``LockPathError``; at the command line, exit 2 and one line),
  nothing is taken over and nothing is left beside it;
* ``envreplica lock PATH -- COMMAND``: the command's exit status; busy and lost as one line; the command never
  outlives its lock's owner (SIGTERM passed on, Ctrl-C through the terminal, SIGKILL through PR_SET_PDEATHSIG);
* the tests catch each mutant of ``tests/lock_mutants.py`` (one run of this file per mutant).
"""

from __future__ import annotations

import json
import os
import random
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Optional

import pytest

from envreplica.impl.lock import (
    Call,
    Calls,
    Identity,
    Judgement,
    LockBusy,
    LockLost,
    LockNotUnderstood,
    LockPathError,
    Owner,
    ProcStat,
    Probe,
    Step,
    projection_lock,
    with_projection_lock,
)

PY = sys.executable
MUTANT = os.environ.get("ENVREPLICA_LOCK_MUTANT")  # test_each_mutant_is_caught runs this file with one installed
SAFETY = 120.0  # seconds: a safety net against a hung thread or child, never what a test asserts


@pytest.fixture(autouse=True)
def _mutant(monkeypatch):
    """The mutant of ``tests/lock_mutants.py`` named by ``ENVREPLICA_LOCK_MUTANT``, installed (none normally)."""
    if MUTANT:
        from lock_mutants import BY_NAME, install

        install(BY_NAME[MUTANT], monkeypatch)


class Recorder(Calls):
    """The real calls, each step recorded after it ran: ``(step, args, outcome)``."""

    def __init__(self) -> None:
        super().__init__(on_call=self._record)
        self.log: list[tuple[Step, tuple, object]] = []

    def _record(self, step: Step, args: tuple, outcome: object) -> None:
        if outcome is not None:
            self.log.append((step, args, outcome))

    def names(self) -> list[str]:
        return [step.call.value for step, _, _ in self.log]

    def steps(self) -> list[str]:
        return [step.name for step, _, _ in self.log]

    def count(self, call: Call) -> int:
        return sum(1 for s, _, _ in self.log if s.call is call)


def me() -> Identity:
    return Calls().identity()


def start_of(pid: int) -> int:
    stat_line = Path(f"/proc/{pid}/stat").read_text()
    return int(stat_line[stat_line.rindex(")") + 2:].split()[19])


def ticket_of(owner: Owner, seq: int = 1, base: str = "lock") -> str:
    """The name of ``owner``'s ticket of ``seq``."""
    return f"{base}.t.{seq:08d}.{owner.nonce}.{owner.pid}.{owner.started_at}.{owner.pidns}"


def owner_file(lock: Path, owner: Owner) -> Path:
    return lock / f"owner-{owner.nonce}.json"


def plant(lock: Path, owner: Owner, seq: int = 1) -> None:
    """The names a holder leaves (TICKET_MKDIR, TEMP_MKDIR, TEMP_WRITE, PUBLISH): its ticket, and ``lock`` with its
    owner file."""
    parent, base = lock.parent, lock.name
    (parent / ticket_of(owner, seq, base)).mkdir()
    temp = parent / f"{base}.n.{owner.nonce}"
    temp.mkdir()
    owner_file(temp, owner).write_bytes(owner.record())
    os.rename(temp, lock)


def record_of(lock: Path) -> dict:
    """The one owner file's record in ``lock``."""
    (name,) = os.listdir(lock)
    return json.loads((lock / name).read_text())


def listing(path: Path) -> list[str]:
    return sorted(os.listdir(path))


def leftovers(path: Path) -> list[str]:
    """What is left that matters: the lock itself and tickets (orphan temps and graves are garbage)."""
    return [n for n in listing(path) if n == "lock" or ".t." in n]


@pytest.fixture
def children():
    """Child processes a test starts; killed and reaped after it (a zombie is left only as long as a test wants)."""
    procs: list[subprocess.Popen] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def sleeper(children) -> subprocess.Popen:
    proc = subprocess.Popen(["sleep", "600"])
    children.append(proc)
    return proc


def zombie(children) -> tuple[int, int]:
    """A real zombie: a child that exited and is not reaped (the ``Popen`` is kept, not polled). Its pid, start."""
    proc = subprocess.Popen([PY, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    children.append(proc)
    started = start_of(proc.pid)
    proc.stdin.close()  # it exits; nobody waits for it
    for _ in range(10_000):
        if Path(f"/proc/{proc.pid}/stat").read_text().split(")")[-1].split()[0] == "Z":
            return proc.pid, started
        time.sleep(0.01)
    raise AssertionError("the child did not become a zombie")


def nonce(i: int) -> str:
    return f"{i:016x}"


# ---------------------------------------------------------------------------
# The calls, in the design's order


def test_the_uncontended_path_takes_the_designs_calls_in_order(tmp_path):
    calls = Recorder()
    with projection_lock(tmp_path / "lock", calls=calls) as held:
        assert listing(tmp_path / "lock") == [f"owner-{held.owner.nonce}.json"]
        record = record_of(tmp_path / "lock")
        assert record == {"version": 2, "pid": os.getpid(), "started_at": me().started_at, "pidns": me().pidns,
                          "nonce": held.owner.nonce}
        assert list(record) == ["version", "pid", "started_at", "pidns", "nonce"]
    assert calls.steps() == ["INSPECT", "TICKET_READDIR", "TICKET_MKDIR", "TEMP_MKDIR", "TEMP_WRITE", "QUEUE_READDIR",
                             "PUBLISH", "ENTER", "LEAVE", "RELEASE_CLAIM", "RELEASE_RMDIR", "RELEASE_UNLINK",
                             "TICKET_RMDIR"]
    assert calls.names() == ["inspect", "readdir", "mkdir", "mkdir", "write", "readdir", "rename", "enter",
                             "leave", "rename", "rmdir", "unlink", "rmdir"]
    assert listing(tmp_path) == []
    ticket = calls.log[2][1][0]
    assert os.path.basename(ticket) == ticket_of(held.owner)
    # the release claims our own owner file by its name
    assert calls.log[9][1][0] == str(owner_file(tmp_path / "lock", held.owner))


def test_a_ticket_takes_one_more_than_the_largest_there(tmp_path):
    dead = Owner(pid=2**22 + 1, started_at=1, pidns=me().pidns, nonce=nonce(1))  # above pid_max: no such process
    (tmp_path / ticket_of(dead, 41)).mkdir()
    calls = Recorder()
    with projection_lock(tmp_path / "lock", max_tries=0, calls=calls) as held:
        tickets = [n for n in listing(tmp_path) if n.startswith("lock.t.")]
    assert tickets == [ticket_of(held.owner, 42)]
    # the dead ticket ahead was probed and removed, then the lock taken
    assert calls.steps()[5:10] == ["QUEUE_READDIR", "QUEUE_KILL", "QUEUE_RMDIR", "QUEUE_READDIR", "PUBLISH"]


# ---------------------------------------------------------------------------
# A stale lock is taken over at the first try


def _taken_over_at_first_try(lock: Path, owner: Owner) -> Recorder:
    calls = Recorder()
    ran = []
    with projection_lock(lock, max_tries=0, calls=calls) as held:  # max_tries=0: a single wait would be LockBusy
        ran.append(record_of(lock)["nonce"])
        assert held.waits == 0
    assert ran == [held.owner.nonce]
    claims = [(args, outcome) for step, args, outcome in calls.log if step is Step.CLAIM]
    assert claims == [((str(owner_file(lock, owner)), str(lock.parent / f"lock.g.{held.owner.nonce}.0")), "ok")]
    assert calls.count(Call.WAIT) == 0
    assert listing(lock.parent) == []  # the grave unlinked, the emptied lock removed
    return calls


def test_a_dead_owners_lock_is_taken_over_at_the_first_try(tmp_path, children):
    proc = subprocess.Popen(["true"])
    started = start_of(proc.pid) if Path(f"/proc/{proc.pid}").exists() else 1
    proc.wait()  # reaped: no such process
    owner = Owner(proc.pid, started, me().pidns, nonce(7))
    plant(tmp_path / "lock", owner)
    calls = _taken_over_at_first_try(tmp_path / "lock", owner)
    assert (Step.KILL, (proc.pid,), Probe.ESRCH) in calls.log
    assert calls.count(Call.PROC) == 0  # ESRCH is proof enough


class NoProc(Calls):
    """``kill(pid, 0)`` answers ok (the process seems there), and ``/proc/PID`` is gone (it ended between)."""

    def kill_probe(self, pid: int) -> Probe:
        return Probe.OK

    def proc_stat(self, pid: int) -> Optional[ProcStat]:
        return None


def test_an_owner_gone_from_proc_is_dead_and_the_hook_says_enoent(tmp_path):
    owner = Owner(2**22 + 7, 1, me().pidns, nonce(18))
    plant(tmp_path / "lock", owner)
    seen = []
    calls = NoProc(on_call=lambda step, args, outcome: seen.append((step, outcome)) if outcome is not None else None)
    with projection_lock(tmp_path / "lock", max_tries=0, calls=calls):
        pass
    assert (Step.PROC, "ENOENT") in seen


def test_a_reused_pids_lock_is_taken_over_at_the_first_try(tmp_path, children):
    other = sleeper(children)  # alive, but not the process that took the lock: another start time
    owner = Owner(other.pid, start_of(other.pid) - 1, me().pidns, nonce(8))
    plant(tmp_path / "lock", owner)
    calls = _taken_over_at_first_try(tmp_path / "lock", owner)
    assert (Step.KILL, (other.pid,), Probe.OK) in calls.log
    assert other.poll() is None  # and it is left alone


def test_a_zombie_owners_lock_is_taken_over_at_the_first_try(tmp_path, children):
    pid, started = zombie(children)
    owner = Owner(pid, started, me().pidns, nonce(9))
    plant(tmp_path / "lock", owner)
    calls = _taken_over_at_first_try(tmp_path / "lock", owner)
    assert (Step.KILL, (pid,), Probe.OK) in calls.log  # a zombie answers kill(pid, 0)
    assert (Step.PROC, (pid,), ProcStat(started, "Z")) in calls.log


HOLDER = textwrap.dedent("""
    import os, signal, sys
    from envreplica.impl.lock import Calls, projection_lock
    kill_at, seen = int(sys.argv[2]), [0]
    def hook(step, args, outcome):
        if outcome is None:
            if seen[0] == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            seen[0] += 1
    with projection_lock(sys.argv[1], calls=Calls(on_call=hook)):
        pass
    print(seen[0])
""")


def test_a_holder_killed_before_any_of_its_calls_leaves_a_lock_taken_at_the_first_try(tmp_path, children):
    """SIGKILL before each call of an acquisition and release in turn (the child is left a zombie): the next
    acquisition never waits, and nothing that matters is left (no lock, no ticket; temps and graves are garbage)."""
    lock = tmp_path / "lock"
    whole = subprocess.run([PY, "-c", HOLDER, str(lock), "-1"], capture_output=True, text=True, timeout=SAFETY)
    calls_in_all = int(whole.stdout)
    assert calls_in_all == 13  # the uncontended path's calls, enter and leave included
    for kill_at in range(calls_in_all):
        child = subprocess.Popen([PY, "-c", HOLDER, str(lock), str(kill_at)])
        children.append(child)
        for _ in range(int(SAFETY * 100)):
            if child.poll() is not None or Path(f"/proc/{child.pid}/stat").read_text().split(")")[-1].split()[0] == "Z":
                break
            time.sleep(0.01)
        with projection_lock(lock, max_tries=0) as held:  # any wait would be LockBusy
            assert held.waits == 0
        assert leftovers(tmp_path) == [], f"killed before call {kill_at}"
        assert child.wait() == -signal.SIGKILL


# ---------------------------------------------------------------------------
# Never a live owner's lock, never one it cannot judge


def test_a_live_owners_lock_is_never_taken_over(tmp_path, children):
    holder = sleeper(children)
    owner = Owner(holder.pid, start_of(holder.pid), me().pidns, nonce(10))
    lock = tmp_path / "lock"
    plant(lock, owner)
    before = listing(tmp_path)
    calls = Recorder()
    with pytest.raises(LockBusy) as busy:
        with projection_lock(lock, max_tries=3, wait=0, calls=calls):
            pytest.fail("entered a live owner's lock")
    assert busy.value.judgement is Judgement.ALIVE and busy.value.owner == owner
    assert f"pid {holder.pid}" in str(busy.value) and "alive" in str(busy.value) and "\n" not in str(busy.value)
    assert calls.count(Call.WAIT) == 3
    assert not [args for s, args, _ in calls.log if s is Step.CLAIM]
    assert owner_file(lock, owner).read_bytes() == owner.record()
    assert listing(tmp_path) == before  # our ticket and temp removed on the way out


def test_an_owner_that_dies_while_we_wait_is_judged_afresh_and_taken_over(tmp_path, children):
    """Judged alive at the first tries, killed after our third wait: the next probe (no cache) proves it dead."""
    holder = sleeper(children)
    owner = Owner(holder.pid, start_of(holder.pid), me().pidns, nonce(16))
    plant(tmp_path / "lock", owner)
    waits = []

    def hook(step: Step, args: tuple, outcome: object) -> None:
        if step is Step.WAIT and outcome is not None:
            waits.append(1)
            if len(waits) == 3:
                holder.kill()
                holder.wait()

    with projection_lock(tmp_path / "lock", max_tries=10, wait=0, calls=Calls(on_call=hook)) as held:
        assert held.waits == 3
    assert leftovers(tmp_path) == []


class ProbeSays(Calls):
    """Real calls, except ``kill(pid, 0)``, which answers ``answer`` for ``pid``."""

    def __init__(self, pid: int, answer: Probe) -> None:
        super().__init__()
        self.pid, self.answer = pid, answer

    def kill_probe(self, pid: int) -> Probe:
        return self.answer if pid == self.pid else super().kill_probe(pid)


def test_eperm_is_not_proof_of_death(tmp_path, children):
    holder = sleeper(children)
    owner = Owner(holder.pid, start_of(holder.pid), me().pidns, nonce(11))
    plant(tmp_path / "lock", owner)
    with pytest.raises(LockBusy) as busy:
        with projection_lock(tmp_path / "lock", max_tries=1, wait=0, calls=ProbeSays(holder.pid, Probe.EPERM)):
            pytest.fail("entered")
    assert busy.value.judgement is Judgement.ALIVE


class OtherNamespace(Calls):
    """This process as if it ran in another PID namespace than the one it does."""

    def identity(self) -> Identity:
        real = super().identity()
        return Identity(real.pid, real.started_at, real.pidns + 1)


def test_an_owner_in_another_pid_namespace_is_never_taken_over(tmp_path, children):
    proc = subprocess.Popen(["true"])
    proc.wait()  # dead here; but the record says our namespace, and we are in "another" one
    owner = Owner(proc.pid, 1, me().pidns, nonce(12))
    lock = tmp_path / "lock"
    plant(lock, owner)
    (tmp_path / ticket_of(owner)).rmdir()  # only the lock: no ticket ahead to wait behind
    calls = OtherNamespace()
    seen: list[Call] = []
    calls.on_call = lambda step, args, outcome: seen.append(step.call) if outcome is not None else None
    with pytest.raises(LockBusy) as busy:
        with projection_lock(lock, max_tries=2, wait=0, calls=calls):
            pytest.fail("entered")
    assert busy.value.judgement is Judgement.OTHER_NAMESPACE and busy.value.owner == owner
    assert busy.value.ticket is None
    message = str(busy.value)
    assert "another PID namespace" in message and f"pid {owner.pid}" in message and str(lock) in message
    assert Call.KILL not in seen and Call.PROC not in seen  # its pid means nothing here: not even probed
    assert owner_file(lock, owner).read_bytes() == owner.record()


def test_a_ticket_ahead_from_another_pid_namespace_is_waited_for_and_named(tmp_path):
    owner = Owner(2**22 + 3, 1, me().pidns, nonce(13))
    ticket = ticket_of(owner)
    (tmp_path / ticket).mkdir()
    with pytest.raises(LockBusy) as busy:
        with projection_lock(tmp_path / "lock", max_tries=1, wait=0, calls=OtherNamespace()):
            pytest.fail("entered")
    assert busy.value.judgement is Judgement.OTHER_NAMESPACE and busy.value.ticket == ticket
    assert ticket in str(busy.value)
    assert listing(tmp_path) == [ticket]


# ---------------------------------------------------------------------------
# A release never removes another's lock


def test_a_release_after_a_takeover_does_not_touch_the_new_holders_lock(tmp_path):
    """We hold; another user, whose probe wrongly says we are dead, takes the lock over (removes our ticket, claims
    our owner file, publishes its own) and holds it. Our release's claim finds nothing: LockLost, theirs intact."""
    lock = tmp_path / "lock"
    theirs_inside, ours_released = threading.Event(), threading.Event()
    result: dict[str, object] = {}

    def other(our_pid: int) -> None:
        try:
            with projection_lock(lock, wait=0, max_tries=10_000, calls=ProbeSays(our_pid, Probe.ESRCH)) as held:
                result["theirs"] = held.owner.nonce
                theirs_inside.set()
                ours_released.wait(SAFETY)
                result["at_release"] = record_of(lock)["nonce"]
        except BaseException as error:  # reported to the test
            result["error"] = error
            theirs_inside.set()

    thread = threading.Thread(target=other, args=(os.getpid(),), daemon=True)
    try:
        with pytest.raises(LockLost) as lost:
            with projection_lock(lock) as ours:
                thread.start()
                assert theirs_inside.wait(SAFETY)
    finally:
        ours_released.set()
    thread.join(SAFETY)
    assert "error" not in result, result.get("error")
    assert result["at_release"] == result["theirs"] != ours.owner.nonce  # their lock stood through our release
    assert f"owner-{ours.owner.nonce}.json" in str(lost.value) and "\n" not in str(lost.value)
    assert leftovers(tmp_path) == []


def test_a_release_after_a_hand_removed_the_lock_leaves_the_next_holders(tmp_path):
    """The hole of the design before this one: an operator removes the held lock, the next process takes it; the first
    holder's release claims its own owner file only, finds it gone: LockLost, the next holder's lock intact."""
    lock = tmp_path / "lock"
    stranger = Owner(os.getpid(), me().started_at, me().pidns, nonce(17))
    with pytest.raises(LockLost):
        with projection_lock(lock):
            import shutil

            shutil.rmtree(lock)  # an operator's hand
            (tmp_path / "next").mkdir()  # the next holder's rename(T, L)
            owner_file(tmp_path / "next", stranger).write_bytes(stranger.record())
            os.rename(tmp_path / "next", lock)
    assert listing(lock) == [f"owner-{stranger.nonce}.json"]
    assert owner_file(lock, stranger).read_bytes() == stranger.record()


def test_a_lost_lock_after_a_failed_operation_keeps_the_operations_error(tmp_path):
    lock = tmp_path / "lock"
    boom = ValueError("the operation's own failure")
    with pytest.raises(ValueError) as raised:
        with projection_lock(lock):
            os.rename(lock, tmp_path / "moved")  # someone moved our lock away
            raise boom
    assert raised.value is boom and raised.value.args == ("the operation's own failure",)
    assert any("lock lost" in note for note in getattr(boom, "__notes__", []))


def test_the_operations_error_propagates_unchanged(tmp_path):
    lock = tmp_path / "lock"

    class Failure(Exception):
        pass

    failure = Failure("changed nothing")
    with pytest.raises(Failure) as raised:
        with_projection_lock(lock, lambda: (_ for _ in ()).throw(failure))
    assert raised.value is failure and not getattr(failure, "__notes__", None)
    assert listing(tmp_path) == []
    assert with_projection_lock(lock, lambda: 42) == 42


def test_with_projection_lock_hands_the_result_to_a_lock_lost(tmp_path):
    lock = tmp_path / "lock"

    def operation() -> str:
        os.rename(lock, tmp_path / "moved")
        return "done"

    with pytest.raises(LockLost) as lost:
        with_projection_lock(lock, operation)
    assert lost.value.result == "done"


# ---------------------------------------------------------------------------
# The ticket order, step by step


class FixedNonce(Calls):
    """The real calls; the acquisition's nonce chosen by the test (None: a fresh one)."""

    def __init__(self, on_call, fixed: Optional[str]) -> None:
        super().__init__(on_call)
        self.fixed = fixed

    def nonce(self) -> str:
        return self.fixed or super().nonce()


class Stepper:
    """Lock users in threads, each paused before every step until the test lets it take that one step."""

    def __init__(self, lock: Path) -> None:
        self.lock = lock
        self.cv = threading.Condition()
        self.pending: dict[str, Step] = {}
        self.go: set[str] = set()
        self.finished: dict[str, object] = {}
        self.events: list[tuple[str, Step, object]] = []
        self.steps = 0

    def start(self, name: str, nonce: Optional[str] = None) -> None:
        """A lock user ``name`` in a thread of its own (``nonce``: its call's, to fix the ticket order)."""
        def hook(step: Step, args: tuple, outcome: object) -> None:
            with self.cv:
                if outcome is not None:
                    self.events.append((name, step, outcome))
                    return
                self.pending[name] = step
                self.cv.notify_all()
                if not self.cv.wait_for(lambda: name in self.go, timeout=SAFETY):
                    raise RuntimeError(f"{name}: no step granted")
                self.go.discard(name)
                del self.pending[name]

        def run() -> None:
            outcome: object = "done"
            try:
                with projection_lock(self.lock, max_tries=100_000, wait=0, calls=FixedNonce(hook, nonce)):
                    pass
            except BaseException as error:
                outcome = error
            with self.cv:
                self.finished[name] = outcome
                self.cv.notify_all()

        threading.Thread(target=run, daemon=True).start()
        assert self._settled(name)

    def _settled(self, name: str) -> bool:
        with self.cv:
            return self.cv.wait_for(lambda: name not in self.go and (name in self.pending or name in self.finished),
                                    timeout=SAFETY)

    def step(self, name: str) -> Step:
        """Let ``name`` take the step it waits at; return that step once it ran (and ``name`` waits again or
        ended)."""
        with self.cv:
            step = self.pending[name]
            self.go.add(name)
            self.cv.notify_all()
        assert self._settled(name)
        self.steps += 1
        return step

    def until(self, name: str, step: Step) -> None:
        """Step ``name`` until it waits at ``step``."""
        for _ in range(10_000):
            if self.pending.get(name) is step:
                return
            self.step(name)
        raise AssertionError(f"{name} never reached {step}")

    def entered(self) -> list[str]:
        return [who for who, step, _ in self.events if step is Step.ENTER]

    def overlaps(self) -> int:
        inside: set[str] = set()
        overlaps = 0
        for who, step, _ in self.events:
            if step is Step.ENTER:
                overlaps += bool(inside)
                inside.add(who)
            elif step is Step.LEAVE:
                inside.discard(who)
        return overlaps


def test_a_waiter_is_not_overtaken_by_a_later_arrival_that_the_schedule_favours(tmp_path):
    s = Stepper(tmp_path / "lock")
    s.start("A")
    s.until("A", Step.LEAVE)  # A inside
    s.start("B")
    s.until("B", Step.WAIT)  # B has its ticket and waits behind A's
    s.start("C")
    s.until("C", Step.WAIT)  # C, the later arrival, waits too
    while "A" not in s.finished:
        s.step("A")
    # C gets seven steps for each of B's: it still cannot go first
    while len(s.finished) < 3 and s.steps < 20_000:
        for _ in range(7):
            if "C" in s.pending:
                s.step("C")
        if "B" in s.pending:
            s.step("B")
    assert s.finished == {"A": "done", "B": "done", "C": "done"}
    assert s.entered() == ["A", "B", "C"]
    assert s.overlaps() == 0
    waits_of_c = sum(1 for who, step, _ in s.events if who == "C" and step is Step.WAIT)
    assert waits_of_c > 7  # C did try, and was kept behind B's ticket


@pytest.mark.parametrize("seed", range(12))
def test_random_schedules_keep_the_ticket_order_and_one_holder(tmp_path, seed):
    """Three users arrive in turn (each takes its ticket after the previous one's stands), then a seeded random
    schedule interleaves their calls: they enter in arrival order, one at a time."""
    rng = random.Random(seed)
    s = Stepper(tmp_path / "lock")
    for name in "ABC":
        s.start(name)
        while not any(who == name and step is Step.TICKET_MKDIR for who, step, _ in s.events):
            s.step(name)  # its ticket made
    while len(s.finished) < 3:
        assert s.steps < 50_000, "a schedule that never ends"
        s.step(rng.choice(sorted(s.pending)))
    assert all(outcome == "done" for outcome in s.finished.values())
    assert s.entered() == ["A", "B", "C"]
    assert s.overlaps() == 0
    assert listing(tmp_path) == []


def test_a_stale_belief_moves_nothing_but_the_dead_holder_it_was_about(tmp_path):
    """C and B both judge the dead R; C stops just before its claim; B claims R's owner file, publishes its own
    lock and is inside; then C's claim (a belief that L is R's, now stale) finds nothing to move: B keeps the lock,
    nobody loses it."""
    lock = tmp_path / "lock"
    dead = Owner(2**22 + 5, 1, me().pidns, nonce(20))  # above any pid_max: no such process
    plant(lock, dead)
    s = Stepper(lock)
    s.start("B", nonce=nonce(1))  # B orders before C: the same seq, a smaller nonce
    s.until("B", Step.TICKET_MKDIR)  # B has read the directory, its ticket not yet made
    s.start("C", nonce=nonce(2))
    s.until("C", Step.TICKET_MKDIR)
    s.step("C")  # C's ticket
    while s.events[-1][:2] != ("C", Step.KILL):
        s.step("C")  # C: removes R's ticket, is refused the lock, reads R, proves it dead
    s.until("B", Step.LEAVE)  # B: claims R's file, publishes its own, enters
    while not any(who == "C" and step is Step.CLAIM for who, step, _ in s.events):
        s.step("C")  # C's stale claim
    assert [out for who, step, out in s.events if who == "C" and step is Step.CLAIM] == ["ENOENT"]  # nothing moved
    assert record_of(lock)["nonce"] == nonce(1)  # B's lock stands
    while len(s.finished) < 2:
        s.step(sorted(s.pending)[0])
    assert s.finished == {"B": "done", "C": "done"}
    assert s.entered() == ["B", "C"] and s.overlaps() == 0


# ---------------------------------------------------------------------------
# Bad input: one clear error, nothing taken over, nothing left


def _refused(lock: Path, kind: type[Exception]) -> str:
    parent = lock.parent
    before = listing(parent) if parent.is_dir() and os.access(parent, os.R_OK) else None
    with pytest.raises(kind) as refused:
        with projection_lock(lock, max_tries=2, wait=0):
            pytest.fail("entered")
    message = str(refused.value)
    assert "\n" not in message and str(lock) in message
    if before is not None:
        assert listing(parent) == before  # nothing made, or all of it removed
    return message


@pytest.fixture
def read_only(tmp_path):
    """A directory this process cannot create names in: the immutable flag as root (modes do not stop root)."""
    path = tmp_path / "ro"
    path.mkdir()
    if os.geteuid() == 0:
        if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
            pytest.skip("root, and the immutable flag does not work here")
        yield path
        subprocess.run(["chattr", "-i", str(path)], check=True)
    else:
        path.chmod(0o555)
        yield path
        path.chmod(0o755)


def test_a_parent_that_cannot_be_written_is_refused(read_only):
    message = _refused(read_only / "lock", LockPathError)
    assert "cannot be written" in message


def test_a_parent_that_is_missing_or_a_file_is_refused(tmp_path):
    assert "does not exist" in _refused(tmp_path / "missing" / "lock", LockPathError)
    (tmp_path / "file").write_text("x")
    assert "is a regular file" in _refused(tmp_path / "file" / "lock", LockPathError)


def test_a_lock_path_that_is_a_file_a_symlink_or_a_fifo_is_refused(tmp_path):
    (tmp_path / "lock").write_text("not a lock")
    assert "is a regular file" in _refused(tmp_path / "lock", LockPathError)
    (tmp_path / "target").mkdir()
    os.symlink(tmp_path / "target", tmp_path / "link")
    assert "symbolic link" in _refused(tmp_path / "link", LockPathError)
    os.symlink(tmp_path / "nowhere", tmp_path / "dangling")
    assert "symbolic link" in _refused(tmp_path / "dangling", LockPathError)
    os.mkfifo(tmp_path / "fifo")
    assert "special file" in _refused(tmp_path / "fifo", LockPathError)


FOREIGN = "owner-00000000000000aa.json"  # an owner file's name, with a record this version would not write


@pytest.mark.parametrize("content,words", [
    (b"", "is empty"),
    (b"\x00garbage{", "not JSON"),
    (b'{"pid": 1234567, "started_at": "99"}', "not a version-2 lock record"),
    (b'{"version": 3, "pid": 1}', "not a version-2 lock record"),
    (b'{"version": 2, "pid": -1, "started_at": 1, "pidns": 1, "nonce": "00000000000000aa"}', "malformed field"),
    (b'{"version": 2, "pid": 5, "started_at": 1, "pidns": 1, "nonce": "00000000000000bb"}', "another nonce"),
    (b"[]", "not a version-2 lock record"),
])
def test_an_owner_record_that_is_not_understood_is_refused_never_taken_over(tmp_path, content, words):
    lock = tmp_path / "lock"
    lock.mkdir()
    (lock / FOREIGN).write_bytes(content)
    message = _refused(lock, LockNotUnderstood)
    assert words in message and f"remove {lock}" in message
    assert (lock / FOREIGN).read_bytes() == content


def test_an_owner_record_that_cannot_be_read_is_refused(tmp_path):
    lock = tmp_path / "lock"
    (lock / FOREIGN).mkdir(parents=True)
    assert "cannot be read (EISDIR" in _refused(lock, LockNotUnderstood)


def test_a_lock_left_by_an_older_version_is_refused_never_taken_over(tmp_path):
    """The seed's layout: ``L/owner.json`` (its ``{pid, started_at}``, or empty: killed before it wrote it)."""
    lock = tmp_path / "lock"
    lock.mkdir()
    for content in (b'{"pid": 1234567, "started_at": "99"}', b""):
        (lock / "owner.json").write_bytes(content)
        message = _refused(lock, LockNotUnderstood)
        assert "older version" in message and f"remove {lock}" in message
        assert listing(lock) == ["owner.json"]


def test_a_lock_holding_names_this_version_never_makes_is_refused(tmp_path):
    lock = tmp_path / "lock"
    lock.mkdir()
    (lock / "notes.txt").write_text("x")
    (lock / FOREIGN).write_bytes(Owner(2**22 + 9, 1, me().pidns, "00000000000000aa").record())
    message = _refused(lock, LockNotUnderstood)
    assert "never holds" in message and "notes.txt" in message
    assert listing(lock) == sorted([FOREIGN, "notes.txt"])


def test_an_empty_lock_directory_is_replaced_at_the_first_try(tmp_path):
    """An empty ``L`` (a claim's ``rmdir`` not yet made when its process was killed, or an older version killed
    between its ``mkdir`` and its ``owner.json``) holds no lock: ``rename(T, L)`` replaces it."""
    (tmp_path / "lock").mkdir()
    calls = Recorder()
    with projection_lock(tmp_path / "lock", max_tries=0, calls=calls) as held:
        assert listing(tmp_path / "lock") == [f"owner-{held.owner.nonce}.json"]
    assert calls.steps()[5:8] == ["QUEUE_READDIR", "PUBLISH", "ENTER"]
    assert listing(tmp_path) == []


# ---------------------------------------------------------------------------
# The command line: envreplica lock PATH -- COMMAND


def cli(*args: str, cwd: Optional[Path] = None) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "envreplica.cli.main", "lock", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=SAFETY)


def one_line(proc: subprocess.CompletedProcess, *words: str) -> None:
    assert proc.returncode == 2, proc
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("envreplica lock: "), proc.stderr
    assert "Traceback" not in proc.stderr
    for word in words:
        assert word in lines[0]


def test_the_command_runs_holding_the_lock_and_its_status_is_the_exit_status(tmp_path):
    lock = tmp_path / "lock"
    done = cli(str(lock), "--", "sh", "-c", 'cat "$0"/owner-*.json; exit 7', str(lock))
    assert done.returncode == 7, done.stderr
    assert json.loads(done.stdout)["version"] == 2
    killed = cli(str(lock), "--max-tries", "1", "--", "sh", "-c", "kill -9 $$")
    assert killed.returncode == 128 + signal.SIGKILL
    assert listing(tmp_path) == []


@pytest.mark.parametrize("case", ["file", "symlink", "garbage", "empty", "older", "read_only"])
def test_each_bad_input_is_exit_2_and_one_line_at_the_command_line(tmp_path, case, request):
    lock = tmp_path / "lock"
    if case == "file":
        lock.write_text("x")
    elif case == "symlink":
        os.symlink(tmp_path, lock)
    elif case in ("garbage", "empty"):
        lock.mkdir()
        (lock / FOREIGN).write_bytes({"garbage": b"{{{", "empty": b""}[case])
    elif case == "older":
        lock.mkdir()
        (lock / "owner.json").write_bytes(b'{"pid": 1234567, "started_at": "1"}')
    else:
        lock = request.getfixturevalue("read_only") / "lock"
    marker = tmp_path / "ran"
    proc = cli(str(lock), "--", "touch", str(marker))
    one_line(proc, str(lock))
    assert not marker.exists()


def test_busy_and_lost_are_exit_2_and_one_line(tmp_path, children):
    holder = sleeper(children)
    lock = tmp_path / "lock"
    plant(lock, Owner(holder.pid, start_of(holder.pid), me().pidns, nonce(15)))
    marker = tmp_path / "ran"
    one_line(cli(str(lock), "--max-tries", "1", "--wait", "0", "--", "touch", str(marker)), "lock busy", "alive")
    assert not marker.exists()
    holder.kill()
    holder.wait()
    lost = cli(str(lock), "--", "mv", str(lock), str(tmp_path / "moved"))  # the command moves the lock away
    one_line(lost, "lock lost", "the command exited 0")


def test_a_missing_command_is_exit_2_and_one_line(tmp_path):
    one_line(cli(str(tmp_path / "lock")), "no command")
    one_line(cli(str(tmp_path / "lock"), "--", str(tmp_path / "no-such-program")), "no-such-program")
    assert listing(tmp_path) == []


# ---------------------------------------------------------------------------
# The tests above catch each mutant of tests/lock_mutants.py


def _mutant_names() -> list[str]:
    from lock_mutants import MUTANTS

    return [m.name for m in MUTANTS]


@pytest.mark.skipif(bool(MUTANT), reason="the mutants' own runs")
@pytest.mark.parametrize("name", _mutant_names())
def test_each_mutant_is_caught(name):
    from lock_mutants import BY_NAME

    mutant = BY_NAME[name]
    plugins_off = ["-p", "no:randomly", "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:hypothesispytest",
                   "-p", "no:envreplica", "--noconftest"]  # this file needs none of them (2 s of start-up each run)
    run = subprocess.run([PY, "-m", "pytest", "-q", "-x", *plugins_off, __file__, "-k", mutant.caught_by],
                         capture_output=True, text=True, timeout=SAFETY * 5,
                         env={**os.environ, "ENVREPLICA_LOCK_MUTANT": name}, cwd=Path(__file__).parent)
    assert run.returncode == 1, f"{name} ({mutant.summary}) was not caught by -k {mutant.caught_by!r}:\n{run.stdout[-2000:]}"
    assert " failed" in run.stdout


def _state(pid: int) -> Optional[str]:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return None


def _wait_for(predicate, what: str) -> None:
    for _ in range(int(SAFETY * 100)):
        if predicate():
            return
        time.sleep(0.01)
    raise AssertionError(f"never: {what}")


def test_the_command_dies_with_a_killed_envreplica_lock_so_a_takeover_never_meets_it(tmp_path):
    """The lock's owner is ``envreplica lock``, not its command: SIGKILL it and its command is killed too
    (PR_SET_PDEATHSIG), so taking the dead owner's lock over never lets a second command in beside the first."""
    lock, pidfile = tmp_path / "lock", tmp_path / "child.pid"
    holder = subprocess.Popen([PY, "-m", "envreplica.cli.main", "lock", str(lock), "--", "sh", "-c",
                               f'echo $$ > {pidfile}; exec sleep 600'])
    try:
        _wait_for(lambda: pidfile.exists() and pidfile.read_text().strip() and _state(int(pidfile.read_text()))
                  in ("S", "R") and Path(f"/proc/{pidfile.read_text().strip()}/cmdline").read_bytes()
                  .startswith(b"sleep"), "the command runs")
        child = int(pidfile.read_text())
        holder.kill()
        holder.wait()
        _wait_for(lambda: _state(child) in (None, "Z"), "the command died with its lock's owner")
        with projection_lock(lock, max_tries=0) as held:  # the dead owner's lock, at the first try
            assert held.waits == 0
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def test_a_sigterm_to_envreplica_lock_ends_the_command_then_releases(tmp_path):
    lock, pidfile = tmp_path / "lock", tmp_path / "child.pid"
    holder = subprocess.Popen([PY, "-m", "envreplica.cli.main", "lock", str(lock), "--", "sh", "-c",
                               f'echo $$ > {pidfile}; exec sleep 600'], stderr=subprocess.PIPE, text=True)
    _wait_for(lambda: pidfile.exists() and pidfile.read_text().strip() and Path(
        f"/proc/{pidfile.read_text().strip()}/cmdline").read_bytes().startswith(b"sleep"), "the command runs")
    holder.terminate()
    assert holder.wait(timeout=SAFETY) == 128 + signal.SIGTERM  # the command's end, passed on
    assert holder.stderr.read() == ""
    assert listing(tmp_path) == ["child.pid"]  # released: nothing left


def test_a_sigint_reaches_the_command_which_ends_then_the_lock_is_released(tmp_path):
    """As a terminal's Ctrl-C does: SIGINT to the whole process group. The command (not made to ignore it) ends
    on it; ``envreplica lock`` waits for it, releases, and exits with its status."""
    lock, pidfile = tmp_path / "lock", tmp_path / "child.pid"
    holder = subprocess.Popen([PY, "-m", "envreplica.cli.main", "lock", str(lock), "--", "sh", "-c",
                               f'echo $$ > {pidfile}; exec sleep 600'], stderr=subprocess.PIPE, text=True,
                              start_new_session=True)
    _wait_for(lambda: pidfile.exists() and pidfile.read_text().strip() and Path(
        f"/proc/{pidfile.read_text().strip()}/cmdline").read_bytes().startswith(b"sleep"), "the command runs")
    os.killpg(holder.pid, signal.SIGINT)
    assert holder.wait(timeout=SAFETY) == 128 + signal.SIGINT
    assert holder.stderr.read() == ""
    assert listing(tmp_path) == ["child.pid"]
