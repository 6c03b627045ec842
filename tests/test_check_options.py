"""``envreplica check``'s options for every protocol (issue 41, ``cli.check_options``): what each command line
makes the check run, read from the plan it parses to (``CheckPlan``), never by running the gate (about 40 s).

One form for every protocol: ``--protocol all|P[,P...]``, ``--bounds NAME`` (repeatable, each name its own
protocol's), ``--lockstep-profile [P=]PROFILE`` and ``--lockstep-examples [P=]N``. The flags before it
(``--migration-bounds``, ``--migration-lockstep``, ``--migration-lockstep-examples``, ``--lock-bounds``) make the
same plan as their new forms and print one line each naming it. A command line the check cannot run is one line
and exit 2 before any stage; which stages the gate runs for a selection is held with the stages stubbed out.
"""

from __future__ import annotations

import subprocess

import pytest

from envreplica.cli import main as cli
from envreplica.cli.check_options import (BOUNDS, DEFAULT_BOUNDS, DEFAULT_PROFILE, PROFILES, CheckPlan, Protocol,
                                          ProtocolRun, notice, plan_of)
from envreplica.model.lock import PRESETS as LOCK_PRESETS
from envreplica.model.migration import PRESETS as MIGRATION_PRESETS
from envreplica.model.presets import PRESETS

R, M, L = Protocol.REPLICA, Protocol.MIGRATION, Protocol.LOCK


def plan(*argv: str) -> CheckPlan:
    """The plan ``envreplica check ARGV`` runs with."""
    return plan_of(cli.build_parser().parse_args(["check", *argv]))


def gate(replica: str = "default", migration: str = "migration", lock: str = "lock") -> CheckPlan:
    """The whole gate's plan at these bounds, every lockstep at its default profile."""
    return CheckPlan((ProtocolRun(R, replica, "ci"), ProtocolRun(M, migration, "check"), ProtocolRun(L, lock, "check")))


def refused(capsys, *argv: str) -> str:
    """``envreplica check ARGV`` refused before any stage: exit 2, one line on stderr (its text returned)."""
    assert cli.main(["check", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # no stage ran
    (line,) = captured.err.splitlines()
    assert line.startswith("envreplica check: ") and "Traceback" not in captured.err
    return line


def test_no_bounds_name_is_two_protocols():
    """``--bounds NAME`` sets the bounds of the protocol whose name it is: that needs each name to be one
    protocol's only."""
    names = [*PRESETS, *MIGRATION_PRESETS, *LOCK_PRESETS]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    assert BOUNDS == {R: tuple(PRESETS), M: tuple(MIGRATION_PRESETS), L: tuple(LOCK_PRESETS)}
    assert all(DEFAULT_BOUNDS[p] in BOUNDS[p] and DEFAULT_PROFILE[p] in PROFILES[p] for p in Protocol)


def test_the_default_is_the_whole_gate():
    """``envreplica check`` (``make check``): every protocol's model check and lockstep at its defaults."""
    assert plan() == plan("--protocol", "all") == gate()
    assert not plan().alone


@pytest.mark.parametrize("argv, expected", [
    (["--bounds", "tiny"], gate(replica="tiny")),  # a replica's name alone: the whole gate at those bounds
    (["--bounds", "tiny", "--bounds", "lock-tiny"], gate(replica="tiny", lock="lock-tiny")),
    (["--bounds", "lock-tiny", "--bounds", "tiny"], gate(replica="tiny", lock="lock-tiny")),
    (["--protocol", "all", "--bounds", "migration-deep"], gate(migration="migration-deep")),
    (["--bounds", "cloud", "--bounds", "tiny"], gate(replica="tiny")),  # the last given stands, as before
    (["--protocol", "replica"], CheckPlan((ProtocolRun(R, "default", "ci"),))),
    (["--protocol", "lock,replica", "--bounds", "cloud"],
     CheckPlan((ProtocolRun(R, "cloud", "ci"), ProtocolRun(L, "lock", "check")))),
    (["--protocol", "migration,lock"],
     CheckPlan((ProtocolRun(M, "migration", "check"), ProtocolRun(L, "lock", "check")))),
    (["--bounds", "migration-deep", "--bounds", "lock-deep"],  # non-replica names only: those protocols
     CheckPlan((ProtocolRun(M, "migration-deep", "check"), ProtocolRun(L, "lock-deep", "check")))),
])
def test_the_protocols_and_bounds_a_check_runs(argv, expected):
    assert plan(*argv) == expected


@pytest.mark.parametrize("argv, expected", [
    (["--bounds", "migration-deep"], ProtocolRun(M, "migration-deep", None)),
    (["--protocol", "migration"], ProtocolRun(M, "migration", None)),
    (["--protocol", "lock", "--bounds", "lock-tiny"], ProtocolRun(L, "lock-tiny", None)),
    (["--bounds", "lock"], ProtocolRun(L, "lock", None)),
])
def test_a_migration_or_a_lock_alone_is_its_model_check_alone(argv, expected):
    """As before issue 41: one protocol other than the replica runs its model check, not the gate."""
    assert plan(*argv) == CheckPlan((expected,), alone=True)


def test_lockstep_options_take_a_protocol_prefix_and_a_bare_value_is_the_replicas():
    got = plan("--lockstep-profile", "dev", "--lockstep-profile", "migration=ci", "--lockstep-examples", "7",
               "--lockstep-examples", "lock=3", "--lockstep-examples", "migration=5")
    assert got == CheckPlan((ProtocolRun(R, "default", "dev", 7), ProtocolRun(M, "migration", "ci", 5),
                             ProtocolRun(L, "lock", "check", 3)))
    assert plan("--lockstep-profile", "replica=nightly") == plan("--lockstep-profile", "nightly")
    skipped = plan("--lockstep-profile", "migration=none", "--lockstep-profile", "lock=none",
                   "--lockstep-profile", "replica=none")
    assert [(r.protocol, r.bounds, r.lockstep) for r in skipped.runs] == [(R, "default", None),
                                                                        (M, "migration", None), (L, "lock", None)]


@pytest.mark.parametrize("old, new", [
    (["--migration-bounds", "migration-deep"], ["--protocol", "all", "--bounds", "migration-deep"]),
    (["--migration-bounds", "migration"], ["--protocol", "all", "--bounds", "migration"]),
    (["--lock-bounds", "lock-tiny"], ["--protocol", "all", "--bounds", "lock-tiny"]),
    (["--lock-bounds", "none"], ["--protocol", "replica,migration"]),
    (["--migration-lockstep", "ci"], ["--lockstep-profile", "migration=ci"]),
    (["--migration-lockstep", "none"], ["--lockstep-profile", "migration=none"]),
    (["--migration-lockstep-examples", "3"], ["--lockstep-examples", "migration=3"]),
    (["--bounds", "tiny", "--lock-bounds", "lock-tiny"], ["--bounds", "tiny", "--bounds", "lock-tiny"]),
])
def test_each_deprecated_flag_runs_as_its_new_form_and_says_so_in_one_line(old, new, capsys):
    assert plan(*old) == plan(*new)
    flag, value = next((a, b) for a, b in zip(old, old[1:]) if a in ("--migration-bounds", "--lock-bounds",
                                                                      "--migration-lockstep",
                                                                      "--migration-lockstep-examples"))
    (line,) = capsys.readouterr().err.splitlines()
    assert line == notice(flag, value)
    assert line.startswith(f"envreplica: {flag} is deprecated and goes in the next release: use ")
    named = line.split(": use ", 1)[1].split(" (")[0].split()  # the form the line names, in place of the flag
    rest = [a for i, a in enumerate(old) if flag not in old[max(i - 1, 0):i + 1]]
    assert plan(*rest, *named) == plan(*old)


def test_the_deprecated_flags_keep_their_old_meaning_where_the_new_form_has_none(capsys):
    """``--migration-bounds none`` skipped the migration's model check and kept its lockstep: it still does (it
    goes in the next release; the new form leaves a protocol out whole). Both migration flags at none are
    ``--protocol replica,lock``; beside ``--protocol replica`` the flags were ignored, and are."""
    assert plan("--migration-bounds", "none") == CheckPlan((ProtocolRun(R, "default", "ci"),
                                                            ProtocolRun(M, None, "check"),
                                                            ProtocolRun(L, "lock", "check")))
    assert plan("--migration-bounds", "none", "--migration-lockstep", "none") == plan("--protocol", "replica,lock")
    assert plan("--migration-bounds", "none", "--lock-bounds", "none", "--migration-lockstep", "none") \
        == plan("--protocol", "replica")
    assert plan("--protocol", "replica", "--migration-bounds", "migration-deep", "--lock-bounds", "lock-tiny") \
        == plan("--protocol", "replica")
    assert plan("--bounds", "migration-deep", "--migration-lockstep", "ci") == plan("--bounds", "migration-deep")
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 9 and all(" is deprecated and goes in the next release: use " in line for line in lines)


def test_the_deprecated_flags_are_not_in_the_help(capsys):
    with pytest.raises(SystemExit):
        cli.main(["check", "--help"])
    text = capsys.readouterr().out
    assert "--lockstep-profile [PROTOCOL=]PROFILE" in text and "--protocol all|PROTOCOL[,PROTOCOL...]" in text
    assert "--migration-bounds" not in text and "--lock-bounds" not in text and "--migration-lockstep" not in text


@pytest.mark.parametrize("argv, fragments", [
    (["--protocol", "replica,locks"],
     ["--protocol replica,locks: 'locks' is not a protocol", "one or more of replica, migration, lock"]),
    (["--protocol", ""], ["'' is not a protocol"]),
    (["--protocol", "replica,migration", "--bounds", "lock-tiny"],
     ["--bounds lock-tiny is the lock protocol's, which --protocol replica,migration does not select",
      "migration migration, migration-deep", "add lock to --protocol"]),
    (["--protocol", "lock", "--bounds", "cloud"],  # the line before issue 41 (tests/test_lock_model.py)
     ["--bounds cloud is not among the lock protocol's bounds (lock, lock-deep, lock-tiny)", "--protocol replica"]),
    (["--protocol", "migration", "--bounds", "default"], ["not among the migration protocol's bounds"]),
    (["--lockstep-profile", "locks=check"], ["'locks' is not a protocol", "[PROTOCOL=]VALUE"]),
    (["--lockstep-examples", "=3"], ["'' is not a protocol"]),
    (["--lockstep-profile", "lock=ci"], ["the lock lockstep takes the profiles check, or lock=none to skip it"]),
    (["--lockstep-profile", "check"], ["the replica lockstep takes the profiles dev, ci, nightly"]),
    (["--lockstep-profile", "migration=fast"], ["the migration lockstep takes the profiles dev, check, ci, nightly"]),
    (["--lockstep-examples", "migration=many"], ["'many' is not a whole number"]),
    (["--protocol", "replica", "--lockstep-profile", "lock=check"],
     ["the lock protocol is not among --protocol replica;"]),
    (["--bounds", "lock-tiny", "--lockstep-examples", "migration=3"],
     ["the migration protocol is not among those --bounds selects without --protocol (lock)"]),
    (["--protocol", "migration,lock", "--lockstep-examples", "5"],
     ["a bare value is the replica's, and the replica protocol is not among --protocol migration,lock;"]),
    (["--bounds", "migration-deep", "--lockstep-profile", "migration=ci"],
     ["--protocol migration alone runs its model check only", "envreplica conformance --protocol migration"]),
    (["--bounds", "no-such"], ["unknown bounds 'no-such'", "(the projection lock's)"]),
    (["--protocol", "migration,lock", "--report", "run.html"],
     ["--report writes the page of the replica's model check and lockstep", "add replica to --protocol"]),
    (["--protocol", "lock", "--bounds", "no-such"], ["unknown bounds 'no-such'"]),
    (["--bounds", "tiny", "--bounds", "migration", "--migration-bounds", "migration-deep"],
     ["--migration-bounds and --bounds both set the migration's bounds"]),
])
def test_a_command_line_the_check_cannot_run_is_one_line_and_exit_2(argv, fragments, capsys):
    if "--migration-bounds" in argv:  # its notice first, then the refusal
        assert cli.main(["check", *argv]) == 2
        notice_line, line = capsys.readouterr().err.splitlines()
        assert "is deprecated" in notice_line
    else:
        line = refused(capsys, *argv)
    for fragment in fragments:
        assert fragment in line, line


def test_the_plan_reaches_the_model_check_process_whole(monkeypatch):
    """The gate hands its model-check process the plan (``--plan``), less what the gate runs itself (the
    migration lockstep beside the lock's stages: ``_migration_lockstep_in_gate_process``), or the lockstep under
    --model-only."""
    started = []

    class Recorded:
        def __init__(self, argv, **kwargs):
            started.append(argv)

    monkeypatch.setattr(subprocess, "Popen", Recorded)

    def child_plan(*argv: str) -> CheckPlan:
        args = cli.build_parser().parse_args(["check", *argv])
        args.plan = plan_of(args)
        cli._BackgroundModelCheck(args)
        handed = started.pop()
        parsed = cli.build_parser().parse_args(handed[handed.index("check"):])
        assert parsed.model_stage and parsed.quiet
        return CheckPlan.from_json(parsed.plan)

    assert child_plan() == CheckPlan((ProtocolRun(R, "default", "ci"), ProtocolRun(M, "migration", None),
                                      ProtocolRun(L, "lock", "check")))
    assert child_plan("--protocol", "replica,migration", "--lockstep-examples", "migration=4") == CheckPlan(
        (ProtocolRun(R, "default", "ci"), ProtocolRun(M, "migration", "check", 4)))
    assert child_plan("--protocol", "replica,migration", "--model-only").lockstep(M) is None
    every = plan("--protocol", "all", "--lockstep-profile", "migration=ci", "--bounds", "lock-tiny")
    assert CheckPlan.from_json(every.to_json()) == every


class _Stages:
    """The gate's stages, stubbed: each records its call and passes."""

    def __init__(self, monkeypatch) -> None:
        self.ran: list[str] = []
        for name, result in [("_model_check", 0), ("_migration_check", 0), ("_lock_check", 0),
                             ("_concurrent_stage", False), ("_lock_lockstep", False)]:
            monkeypatch.setattr(cli, name, self._stub(name, result))
        monkeypatch.setattr(cli, "_migration_lockstep", self._stub("_migration_lockstep",
                                                                   {"status": 0, "what": "stub", "seconds": 0.0}))
        monkeypatch.setattr(cli, "_replica_lockstep", self._stub("_replica_lockstep", type("R", (), {"ok": True})))

    def _stub(self, name, result):
        def stage(args, *rest, **kwargs):
            label = {"_migration_check": "migration", "_lock_check": "lock"}.get(name)
            self.ran.append(f"{name} {rest[0]}" if label else name)
            return result
        return stage


@pytest.mark.parametrize("argv, ran", [
    ([], ["_model_check", "_migration_check migration", "_lock_check lock", "_migration_lockstep",
          "_replica_lockstep", "_lock_lockstep", "_concurrent_stage"]),
    (["--protocol", "migration,lock", "--bounds", "lock-tiny"],
     ["_migration_check migration", "_lock_check lock-tiny", "_migration_lockstep", "_lock_lockstep"]),
    (["--protocol", "replica,lock", "--no-concurrent"],
     ["_model_check", "_lock_check lock", "_replica_lockstep", "_lock_lockstep"]),
    (["--lockstep-profile", "replica=none", "--lockstep-profile", "migration=none"],
     ["_model_check", "_migration_check migration", "_lock_check lock", "_lock_lockstep"]),
    (["--protocol", "replica", "--model-only"], ["_model_check"]),
    (["--protocol", "lock"], ["_lock_check lock"]),
    (["--bounds", "migration-deep"], ["_migration_check migration-deep"]),
])
def test_the_selection_drives_the_gates_stages(argv, ran, monkeypatch, capsys):
    stages = _Stages(monkeypatch)
    assert cli.main(["check", "--serial", "--quiet", *argv]) == 0
    assert stages.ran == ran
    out = capsys.readouterr().out  # the gate's table: a row per stage run, and the replica's skipped ones
    assert ("bounds default" in out) == ("_model_check" in ran)
    assert ("skipped" in out) == any(a in argv for a in ("replica=none", "--model-only", "--no-concurrent"))


# ---------------------------------------------------------------------------
# The other commands where a protocol applies (issue 41's audit): replay reruns the replica's traces only
# ---------------------------------------------------------------------------


def test_replay_names_another_protocols_trace_and_the_command_that_shows_it(tmp_path, capsys):
    """A lock's or a migration's ITF trace was refused as states that "do not fit" (its first action's op): the
    line names its protocol and ``envreplica report``, which reads any protocol's."""
    import json

    trace = tmp_path / "lock-seed-race-mutual_exclusion.itf.json"
    trace.write_text(json.dumps({"#meta": {"format": "ITF", "protocol": "lock"}, "vars": [], "states": [{}]}))
    assert cli.main(["replay", str(trace)]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert captured.out == "" and "is a trace of the lock protocol" in line and f"envreplica report {trace}" in line
