"""``envreplica check``'s options, one form for every protocol, read into one ``CheckPlan`` (issue 41).

``--protocol all|P[,P...]`` selects the protocols (``all``: replica, migration and lock, the gate).
``--bounds NAME`` (repeatable) names a bounds suite; the names are unique across the protocols
(``BOUNDS``), so each sets its own protocol's bounds and the others keep their defaults (``DEFAULT_BOUNDS``).
Without ``--protocol``, a migration's or a lock's name alone selects that protocol alone, and any replica name
(or none) the whole gate. ``--lockstep-profile [P=]PROFILE`` and ``--lockstep-examples [P=]N`` (repeatable) set
a protocol's lockstep; a bare value is the replica's, as before there was a prefix; ``P=none`` skips P's
lockstep. Each protocol takes its own profiles (``PROFILES``): the lock lockstep in the gate has one budget,
``check`` (``cli.main.LOCK_LOCKSTEP_EXAMPLES`` examples; ``--lockstep-examples lock=N`` changes it).

Two or more protocols run as the gate: each one's model check and lockstep. One protocol runs as it did before
issue 41: the replica as the gate with the replica's stages alone (its model check, its lockstep, the
concurrent stage), a migration or a lock its model check alone (``CheckPlan.alone``).

The per-protocol flags before issue 41 (``--migration-bounds``, ``--migration-lockstep``,
``--migration-lockstep-examples``, ``--lock-bounds``) still work for one release, as they did: they apply to the
whole gate only (``--protocol all``, or no ``--protocol``), and each prints one line on stderr naming its new
form (``DeprecatedOption``). ``--migration-bounds none`` alone, which skipped the migration's model check but
kept its lockstep, has no new form: ``--protocol replica,lock`` leaves out the migration's lockstep too.

Every refusal is a ``UsageError``: one line, exit 2 (``cli.errors``). Parsing lives here, not in the gate
(``cli.main.cmd_check``), which reads the plan alone.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, replace
from enum import Enum
from typing import Callable, Optional, Sequence

from envreplica.cli.errors import UsageError
from envreplica.model.lock import PRESETS as LOCK_PRESETS
from envreplica.model.migration import PRESETS as MIGRATION_PRESETS
from envreplica.model.presets import PRESETS, UnknownBounds


class Protocol(Enum):
    """A protocol ``check`` checks, in the gate's order."""

    REPLICA = "replica"
    MIGRATION = "migration"
    LOCK = "lock"


#: ``--protocol all``.
ALL = "all"
#: A lockstep profile (or, for the deprecated flags, a bounds) that skips the stage.
NONE = "none"
#: Each protocol's bounds suites (``model.presets``, ``model.migration``, ``model.lock``): no name is two
#: protocols' (``tests/test_check_options.py``).
BOUNDS: dict[Protocol, tuple[str, ...]] = {Protocol.REPLICA: tuple(PRESETS),
                                           Protocol.MIGRATION: tuple(MIGRATION_PRESETS),
                                           Protocol.LOCK: tuple(LOCK_PRESETS)}
#: The bounds each protocol is checked at when no ``--bounds`` names one of its suites.
DEFAULT_BOUNDS = {Protocol.REPLICA: "default", Protocol.MIGRATION: "migration", Protocol.LOCK: "lock"}
#: Each protocol's lockstep profiles in the gate: the replica's ``conformance.replica`` profiles, the migration's
#: ``conformance.migration.run.PROFILE_EXAMPLES``, the lock's the gate's one budget.
PROFILES: dict[Protocol, tuple[str, ...]] = {Protocol.REPLICA: ("dev", "ci", "nightly"),
                                             Protocol.MIGRATION: ("dev", "check", "ci", "nightly"),
                                             Protocol.LOCK: ("check",)}
#: The profile each protocol's lockstep runs at when ``--lockstep-profile`` does not name it.
DEFAULT_PROFILE = {Protocol.REPLICA: "ci", Protocol.MIGRATION: "check", Protocol.LOCK: "check"}
#: What the help says each protocol's check is.
WHAT = {
    Protocol.REPLICA: "the gated replica's model check, its lockstep against the SQLite implementation and the "
                      "concurrent stage",
    Protocol.MIGRATION: "the paired writer migration's model check (and, beside another protocol, its lockstep)",
    Protocol.LOCK: "the projection lock's model check (and, beside another protocol, its lockstep)",
}


@dataclass(frozen=True)
class ProtocolRun:
    """One protocol's stages in a ``check``: its model check's bounds and its lockstep's profile and example count.

    ``bounds`` None: no model check (only the deprecated ``--migration-bounds none`` skips a check and keeps
    the lockstep); ``lockstep`` None: no lockstep; ``examples`` None: the profile's count."""

    protocol: Protocol
    bounds: Optional[str]
    lockstep: Optional[str]
    examples: Optional[int] = None


@dataclass(frozen=True)
class CheckPlan:
    """What one ``envreplica check`` runs: the selected protocols' stages, in the gate's order.

    ``alone``: one protocol's model check by itself (``--protocol migration`` or ``lock``), not the gate."""

    runs: tuple[ProtocolRun, ...]
    alone: bool = False

    def of(self, protocol: Protocol) -> Optional[ProtocolRun]:
        """The protocol's run, or None when it is not selected."""
        return next((r for r in self.runs if r.protocol is protocol), None)

    def bounds(self, protocol: Protocol) -> Optional[str]:
        """The bounds the protocol's model check runs at, or None when it does not run."""
        run = self.of(protocol)
        return run.bounds if run is not None else None

    def lockstep(self, protocol: Protocol) -> Optional[str]:
        """The profile the protocol's lockstep runs at, or None when it does not run."""
        run = self.of(protocol)
        return run.lockstep if run is not None else None

    def examples(self, protocol: Protocol) -> Optional[int]:
        """The example count given for the protocol's lockstep (None: its profile's)."""
        run = self.of(protocol)
        return run.examples if run is not None else None

    def without(self, protocol: Protocol, *, check: bool = True, lockstep: bool = True) -> "CheckPlan":
        """This plan with the protocol's model check (``check``) and or lockstep (``lockstep``) left out."""
        return replace(self, runs=tuple(
            replace(r, bounds=None if check else r.bounds, lockstep=None if lockstep else r.lockstep)
            if r.protocol is protocol else r for r in self.runs))

    def to_json(self) -> str:
        """The plan as one JSON line (the gate hands it to its model-check process: ``--plan``)."""
        return json.dumps({"alone": self.alone, "runs": [{**asdict(r), "protocol": r.protocol.value}
                                                         for r in self.runs]})

    @staticmethod
    def from_json(text: str) -> "CheckPlan":
        """The plan ``to_json`` wrote."""
        data = json.loads(text)
        return CheckPlan(tuple(ProtocolRun(**{**r, "protocol": Protocol(r["protocol"])}) for r in data["runs"]),
                         alone=data["alone"])


def protocol_of_bounds(name: str) -> Optional[Protocol]:
    """The protocol whose bounds suite ``name`` is, or None for a name no protocol has."""
    return next((p for p, names in BOUNDS.items() if name in names), None)


def _choices(protocol: Protocol) -> str:
    return ", ".join(BOUNDS[protocol])


def _listed(protocols: Sequence[Protocol]) -> str:
    return ",".join(p.value for p in protocols)


def _unknown_bounds(name: str) -> UnknownBounds:
    """The refusal of a bounds name no protocol has: every protocol's names, each with whose they are."""
    return UnknownBounds(
        f"unknown bounds {name!r}: choose one of {', '.join(sorted(PRESETS))} (the replica's) "
        f"or {', '.join(MIGRATION_PRESETS)} (the paired writer migration's) or {', '.join(LOCK_PRESETS)} "
        f"(the projection lock's)")


def selected(text: Optional[str]) -> Optional[tuple[Protocol, ...]]:
    """``--protocol``'s protocols in the gate's order (None: not given); an unknown or empty one is refused."""
    if text is None:
        return None
    if text.strip() == ALL:
        return tuple(Protocol)
    names = [n.strip() for n in text.split(",")]
    wrong = [n for n in names if n not in {p.value for p in Protocol}]
    if wrong:
        raise UsageError(f"--protocol {text}: {', '.join(repr(n) for n in wrong)} is not a protocol; give all, or "
                         f"one or more of {', '.join(p.value for p in Protocol)} separated by commas "
                         f"(--protocol replica,lock)")
    return tuple(p for p in Protocol if p.value in names)


def _bounds_by_protocol(names: Sequence[str], explicit: Optional[tuple[Protocol, ...]]) -> dict[Protocol, str]:
    """Each ``--bounds`` name by its protocol (the last one given for a protocol stands, as for any repeated
    option); a name of no protocol, or of a protocol ``--protocol`` does not select, is refused."""
    chosen: dict[Protocol, str] = {}
    for name in names:
        protocol = protocol_of_bounds(name)
        if protocol is None:
            raise _unknown_bounds(name)
        if explicit is not None and protocol not in explicit:
            if len(explicit) == 1:  # the line before issue 41, which tests/test_lock_model.py holds
                raise UsageError(f"--bounds {name} is not among the {explicit[0].value} protocol's bounds "
                                 f"({_choices(explicit[0])}): name one of them, or --protocol {protocol.value}")
            raise UsageError(f"--bounds {name} is the {protocol.value} protocol's, which --protocol "
                             f"{_listed(explicit)} does not select: name one of "
                             + "; ".join(f"{p.value} {_choices(p)}" for p in explicit)
                             + f", or add {protocol.value} to --protocol")
        chosen[protocol] = name
    return chosen


def _selection(explicit: Optional[tuple[Protocol, ...]], bounds: dict[Protocol, str]) -> tuple[Protocol, ...]:
    """The protocols a check runs: ``--protocol``'s; without it, the gate, unless every bounds named is a
    migration's or a lock's (then those protocols)."""
    if explicit is not None:
        return explicit
    if not bounds or Protocol.REPLICA in bounds:
        return tuple(Protocol)
    return tuple(bounds)


def _prefixed(option: str, values: Sequence[str]) -> list[tuple[Protocol, str, str]]:
    """``[PROTOCOL=]VALUE`` of a repeatable option, each as (protocol, value, as given): a bare value is the
    replica's."""
    read = []
    for text in values:
        name, sep, value = text.rpartition("=")
        try:
            read.append((Protocol(name) if sep else Protocol.REPLICA, value, text))
        except ValueError:
            raise UsageError(f"{option} {text}: {name!r} is not a protocol; write {option} [PROTOCOL=]VALUE with "
                             f"PROTOCOL one of {', '.join(p.value for p in Protocol)}") from None
    return read


def _refuse_unrun(option: str, given: list[tuple[Protocol, str, str]], runs: tuple[Protocol, ...],
                  selection: tuple[Protocol, ...], explicit: bool) -> None:
    """Refuse a lockstep option for a protocol whose lockstep this check does not run (``runs``); ``explicit``:
    ``--protocol`` made the selection (else ``--bounds`` did)."""
    for protocol, _, text in given:
        if protocol in runs:
            continue
        if protocol not in selection:
            whose = "a bare value is the replica's, and " if "=" not in text else ""
            among = f"--protocol {_listed(selection)}" if explicit else \
                f"those --bounds selects without --protocol ({_listed(selection)})"
            raise UsageError(f"{option} {text}: {whose}the {protocol.value} protocol is not among {among}; add it "
                             f"to --protocol, or drop the option")
        raise UsageError(f"{option} {text}: --protocol {protocol.value} alone runs its model check only; for its "
                         f"lockstep too, give --protocol {protocol.value} with another protocol (e.g. "
                         f"--protocol all), or run envreplica conformance --protocol {protocol.value}")


def _profiles(values: Sequence[str], runs: tuple[Protocol, ...], selection: tuple[Protocol, ...],
              explicit: bool) -> dict:
    """``--lockstep-profile``'s values by protocol, each among its protocol's profiles or ``none``."""
    given = _prefixed("--lockstep-profile", values)
    _refuse_unrun("--lockstep-profile", given, runs, selection, explicit)
    for protocol, profile, text in given:
        if profile not in (*PROFILES[protocol], NONE):
            raise UsageError(f"--lockstep-profile {text}: the {protocol.value} lockstep takes the profiles "
                             f"{', '.join(PROFILES[protocol])}, or {protocol.value}=none to skip it")
    return {protocol: profile for protocol, profile, _ in given}


def _examples(values: Sequence[str], runs: tuple[Protocol, ...], selection: tuple[Protocol, ...],
              explicit: bool) -> dict:
    """``--lockstep-examples``'s counts by protocol, each a whole number."""
    given = _prefixed("--lockstep-examples", values)
    _refuse_unrun("--lockstep-examples", given, runs, selection, explicit)
    counts = {}
    for protocol, count, text in given:
        try:
            counts[protocol] = int(count)
        except ValueError:
            raise UsageError(f"--lockstep-examples {text}: {count!r} is not a whole number; give the "
                             f"{protocol.value} lockstep's example count, e.g. --lockstep-examples "
                             f"{protocol.value}=20") from None
    return counts


def plan_of(args) -> CheckPlan:
    """The plan of ``check``'s options (``register``'s): the selected protocols' stages, refusals as one line."""
    explicit = selected(args.protocol)
    bounds = _bounds_by_protocol(args.bounds or [], explicit)
    selection = _selection(explicit, bounds)
    alone = len(selection) == 1 and selection[0] is not Protocol.REPLICA
    with_lockstep = () if alone else selection
    profiles = _profiles(args.lockstep_profile or [], with_lockstep, selection, explicit is not None)
    examples = _examples(args.lockstep_examples or [], with_lockstep, selection, explicit is not None)
    runs = []
    for protocol in selection:
        profile = None if alone else profiles.get(protocol, DEFAULT_PROFILE[protocol])
        runs.append(ProtocolRun(protocol, bounds.get(protocol, DEFAULT_BOUNDS[protocol]),
                                None if profile == NONE else profile, examples.get(protocol)))
    plan = CheckPlan(tuple(runs), alone=alone)
    plan = _deprecated(args, plan, bounds, profiles, examples) if selection == tuple(Protocol) else plan
    side = getattr(args, "lock_side", None)
    if side is not None and (plan.lockstep(Protocol.LOCK) is None or getattr(args, "model_only", False)):
        why = "--model-only skips every lockstep" if getattr(args, "model_only", False) else \
            "this check runs no lock lockstep (the lock selected with another protocol runs one: --protocol all)"
        raise UsageError(f"--lock-side {side}: {why}; drop --lock-side, or run the lock lockstep")
    return plan


# ---------------------------------------------------------------------------
# The flags before issue 41: one release more, each with one line naming its new form
# ---------------------------------------------------------------------------


def _new_bounds(others: str) -> Callable[[str], str]:
    """A deprecated bounds flag's new form: ``none`` leaves the protocol out; a name goes beside ``--protocol all``
    (a migration's or a lock's name alone checks that protocol alone)."""
    return lambda value: f"--protocol {others}" if value == NONE else f"--protocol all --bounds {value}"


#: Each deprecated flag: its new form for a value given, and the protocol and part of its run it sets.
DEPRECATED: dict[str, tuple[Callable[[str], str], Protocol, str]] = {
    "--migration-bounds": (_new_bounds("replica,lock (it leaves out the migration lockstep too)"),
                           Protocol.MIGRATION, "bounds"),
    "--lock-bounds": (_new_bounds("replica,migration"), Protocol.LOCK, "bounds"),
    "--migration-lockstep": (lambda v: f"--lockstep-profile migration={v}", Protocol.MIGRATION, "lockstep"),
    "--migration-lockstep-examples": (lambda v: f"--lockstep-examples migration={v}", Protocol.MIGRATION,
                                      "examples"),
}


def notice(option: str, value: str) -> str:
    """The line a deprecated flag prints: that it goes, and its new form for ``value``."""
    return f"envreplica: {option} is deprecated and goes in the next release: use {DEPRECATED[option][0](value)}"


class DeprecatedOption(argparse.Action):
    """A flag before issue 41: stores its value as it did (under ``deprecated_<dest>``) and prints ``notice``."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        print(notice(self.option_strings[0], str(values)), file=sys.stderr)
        setattr(namespace, self.dest, values)


def _deprecated(args, plan: CheckPlan, bounds: dict, profiles: dict, examples: dict) -> CheckPlan:
    """The whole gate's plan with the deprecated flags' values, as they set it before issue 41; one that sets
    what a new option sets too is refused (one of them would be lost)."""
    given = {"bounds": bounds, "lockstep": profiles, "examples": examples}
    for option, (_, protocol, part) in DEPRECATED.items():
        value = getattr(args, "deprecated_" + option[2:].replace("-", "_"), None)
        if value is None:
            continue
        if protocol in given[part]:
            new = {"bounds": "--bounds", "lockstep": "--lockstep-profile", "examples": "--lockstep-examples"}[part]
            raise UsageError(f"{option} and {new} both set the {protocol.value}'s {part}: give {new} alone")
        run = plan.of(protocol)
        assert run is not None  # the whole gate's plan has every protocol
        if option == "--lock-bounds" and value == NONE:  # the lock's check and its lockstep, as before
            plan = plan.without(protocol)
        elif part == "bounds" and value == NONE:  # the migration's check; its lockstep stays, as before
            plan = plan.without(protocol, lockstep=False)
        elif part == "lockstep":
            plan = replace(plan, runs=tuple(replace(r, lockstep=None if value == NONE else value)
                                            if r is run else r for r in plan.runs))
        else:
            plan = replace(plan, runs=tuple(replace(r, **{part: value}) if r is run else r for r in plan.runs))
    return CheckPlan(tuple(r for r in plan.runs if r.bounds is not None or r.lockstep is not None))


def register(c: argparse.ArgumentParser) -> None:
    """``check``'s options for every protocol, and the deprecated ones (hidden from ``--help``)."""
    c.add_argument("--protocol", default=None, metavar="all|PROTOCOL[,PROTOCOL...]",
                   help="the protocols to check: all (the default: the gate, every protocol's model check and "
                        "lockstep), or a comma-separated list of " + ", ".join(p.value for p in Protocol)
                        + " (two or more: the gate of those); one alone: "
                        + "; ".join(f"{p.value}: {what}" for p, what in WHAT.items()))
    c.add_argument("--bounds", action="append", default=None, metavar="NAME",
                   help="a bounds suite (repeatable; the names are unique across the protocols, and each sets its "
                        "own protocol's bounds): replica " + ", ".join(PRESETS) + " (default: default); migration "
                        + ", ".join(MIGRATION_PRESETS) + " (default: migration); lock " + ", ".join(LOCK_PRESETS)
                        + " (default: lock). Without --protocol, a migration's or a lock's name alone checks that "
                          "protocol alone")
    c.add_argument("--lockstep-profile", action="append", default=None, metavar="[PROTOCOL=]PROFILE",
                   help="a lockstep's profile (repeatable): replica " + "|".join(PROFILES[Protocol.REPLICA])
                        + " (default: ci); migration " + "|".join(PROFILES[Protocol.MIGRATION])
                        + " (default: check); lock " + "|".join(PROFILES[Protocol.LOCK])
                        + "; PROTOCOL=none skips that lockstep. A bare PROFILE is the replica's")
    c.add_argument("--lockstep-examples", action="append", default=None, metavar="[PROTOCOL=]N",
                   help="override a lockstep profile's example count (repeatable; a bare N is the replica's)")
    c.add_argument("--plan", default=None, help=argparse.SUPPRESS)  # the gate's model-check process: its stages
    c.add_argument("--migration-bounds", dest="deprecated_migration_bounds", action=DeprecatedOption,
                   choices=[*MIGRATION_PRESETS, NONE], help=argparse.SUPPRESS)
    c.add_argument("--migration-lockstep", dest="deprecated_migration_lockstep", action=DeprecatedOption,
                   choices=[*PROFILES[Protocol.MIGRATION], NONE], help=argparse.SUPPRESS)
    c.add_argument("--migration-lockstep-examples", dest="deprecated_migration_lockstep_examples", type=int,
                   action=DeprecatedOption, help=argparse.SUPPRESS)
    c.add_argument("--lock-bounds", dest="deprecated_lock_bounds", action=DeprecatedOption,
                   choices=[*LOCK_PRESETS, NONE], help=argparse.SUPPRESS)
