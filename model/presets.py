"""Named bounds: what ``envreplica check --bounds NAME`` explores.

Models: the configurations the project checks, each a tuple of ``Bounds``
(a suite): the cloud model reaches deep consistent states, the adversary
reaches every frame within a small domain, and a slice of it with record
versions up to 2 reaches finding F2. ``default`` runs them all (about 40 s on
one core compiled, beside the lockstep in ``make check``: ``spec.compiled``) and
finds F1 and F2 where they are; ``tiny`` is for tests; ``deep`` is for a nightly run.

Leaves out on purpose: anything larger than a Python BFS can finish; the
conformance gate samples beyond these bounds with Hypothesis.
"""

from __future__ import annotations

from dataclasses import replace

from envreplica.model.generate import Bounds, Mode, Move
from envreplica.model.state import Variant

#: The cloud: two kept-epoch sets (so policy can narrow), one key whose value
#: is staged and one key-free project path, rotate/delete moves, one read in flight.
CLOUD = Bounds(
    name="cloud",
    mode=Mode.CLOUD,
    epoch_sets=((1, 2), (2,)),
    moves=frozenset({Move.CREATE, Move.ROTATE, Move.DELETE}),
    max_counter=2,
    max_record_version=2,
    max_sequence=2,
    attempts=("a1", "a2"),
    streams=("s1", "s2"),
    max_depth=13,
)

#: The adversary: every frame over one project, one key, one attempt id (so
#: a begin can reuse it), one stream, record versions 0..1, one sequence, a
#: record alphabet of a first save, a conflicting twin and an unknown epoch.
ADVERSARY = Bounds(
    name="adversary",
    mode=Mode.ADVERSARY,
    attempts=("a1",),
    streams=("s1",),
    moves=frozenset({Move.CREATE}),
    max_record_version=1,
    max_sequence=1,
    epoch_sets=((1, 2), (2,)),
    max_depth=8,
)

#: The cloud keeping values as legacy SSM versions: a key that is a path
#: segment, and one (``_X``) that is not and so has no legacy name; the store
#: may go away. Reaches the legacy reads' reasons and credential_store_unavailable.
CLOUD_LEGACY = Bounds(
    name="cloud-legacy",
    mode=Mode.CLOUD,
    keys=("L", "_X"),
    legacy_keys=("L", "_X"),
    moves=frozenset({Move.CREATE}),
    attempts=("a1", "a2"),
    streams=("s1",),
    max_record_version=2,
    max_sequence=2,
    store_off=True,
    max_depth=9,
)

#: The adversary, wide and shallow: two streams, two attempts, two
#: organisations, sequences and record versions up to 2, an omitting binding,
#: and an acknowledgement bound that fits an empty page but not one record.
ADVERSARY_WIDE = replace(
    ADVERSARY,
    name="adversary-wide",
    attempts=("a1", "a2"),
    streams=("s1", "s2"),
    orgs=("org", "org2"),
    max_sequence=2,
    max_record_version=2,
    alphabet_omit=True,
    ack_page_bytes=400,
    max_depth=4,
)

TINY = (
    replace(CLOUD, name="tiny-cloud", max_depth=8, streams=("s1",), attempts=("a1", "a2")),
    replace(ADVERSARY, name="tiny-adversary", max_depth=5),
)

#: The adversary with record versions up to 2: a re-page at a higher version
#: can carry an older or conflicting record (finding F2; see docs/findings.md).
ADVERSARY_F2 = replace(ADVERSARY, name="adversary-f2", max_record_version=2, max_depth=7)

#: ``ADVERSARY_F2`` with every operation atomic (``inflight=0``: a read in flight is answered before
#: anything else runs); restarts and crash points stay. F2 needs no interleaving (a re-page at a higher
#: version after a policy change), so this slice keeps F2's 7-step counterexample at an eighth of the
#: states (28,789 vs 234,827 under ``fixed``, and 14 s vs 88 s): ``default`` holds it, so a fix of F1
#: alone fails ``envreplica check``. F1 needs a read in flight across the policy change: ``cloud`` and
#: ``adversary`` hold that.
ADVERSARY_F2_ATOMIC = replace(ADVERSARY_F2, name="adversary-f2-atomic", inflight=0)

#: The cloud with two projects: where symmetry reduction pays (``model.symmetry``: the two
#: project ids are interchangeable), about half the states with ``--symmetry``. Depth 10 keeps
#: it under 30 s without symmetry; a commit now pages both projects, so F1 (seed) is 11 steps.
CLOUD_2P = replace(CLOUD, name="cloud-2p", projects=("p1", "p2"), max_depth=10)

PRESETS: dict[str, tuple[Bounds, ...]] = {
    "default": (CLOUD, CLOUD_LEGACY, ADVERSARY, ADVERSARY_WIDE, ADVERSARY_F2_ATOMIC),
    "cloud": (CLOUD,),
    "adversary": (ADVERSARY,),
    "adversary-wide": (ADVERSARY_WIDE,),
    "cloud-legacy": (CLOUD_LEGACY,),
    "adversary-f2": (ADVERSARY_F2,),
    "cloud-2p": (CLOUD_2P,),
    "adversary-f2-atomic": (ADVERSARY_F2_ATOMIC,),
    "tiny": TINY,
    "deep": (replace(CLOUD, name="cloud-deep", max_depth=None, moves=frozenset(Move)),
             replace(ADVERSARY, name="adversary-deep", max_depth=9)),
}


class UnknownBounds(ValueError):
    """A bounds name that is not one of ``PRESETS``."""


def suite(name: str, variant: Variant) -> tuple[Bounds, ...]:
    """The bounds named ``name`` under ``variant``; ``UnknownBounds`` (naming the choices) for an unknown name."""
    try:
        chosen = PRESETS[name]
    except KeyError:
        raise UnknownBounds(
            f"unknown bounds {name!r}: choose one of {', '.join(sorted(PRESETS))}"
        ) from None
    return tuple(replace(b, variant=variant) for b in chosen)
