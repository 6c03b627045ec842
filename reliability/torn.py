"""Torn writes: the WAL of a real run cut or garbled at every frame boundary, then reopened.

What it models: the machine stops (power loss, kernel panic) while SQLite
appends to the write-ahead log, so the log on disk ends at some frame, or its
last frames hold bytes other than those written (a torn sector, a write cut
short). The harness runs a real stream through ``SqliteReplica``
(``SqliteDriver`` in-process, ``synchronous=FULL``): store puts, a snapshot,
half the deliveries, a gate cycle (``close``, a second snapshot), the other
half. Checkpoints are off for the run (``wal_autocheckpoint=0``), so every
transaction of the run stays in the WAL and the main file never changes.
After each request it records how many whole frames the WAL held; a
delivery's last transaction (its receipt) is the last thing written before
its answer, so a delivery is acknowledged at the frame count it was answered
at. At each operation boundary it also records the state (``impl_model_state``).

Then, for every frame boundary k of the final WAL (0 to all frames), a copy
of the main file with the WAL cut after its first k frames is opened in a
fresh directory; and for a sample of k (every ``garble_every``-th), a copy
whose frame k + 1 is damaged: a byte flipped in its frame header or in its
page (the frames after it kept, up to ``GARBLED_TAIL_FRAMES``), or the WAL
cut inside it. The RNG seeded with ``seed`` draws the damage. Each copy
(whose committed prefix must then lie within the first k frames) must:

* open, and pass ``verify()`` (SQLite's ``integrity_check``, every tag, digest
  and seal): a committed prefix is a consistent replica;
* hold every invariant of ``spec.properties.INVARIANTS`` on ``impl_model_state()``;
* keep every delivery acknowledged when the WAL held at most k frames, with
  the receipt it was acknowledged with: nothing acknowledged under
  ``synchronous=FULL`` is lost when the log survives up to that point;
* be exactly that prefix: its applied sequence is the number of deliveries
  acknowledged within k frames (nothing from a later transaction leaks in,
  which SQLite's frame checksums and salts guarantee for a damaged frame),
  and where k ends an operation, its whole state equals the state recorded
  then.

Leaves out on purpose: whether the disk keeps what ``fsync`` promised (the
frame count at each answer is what the file held, not what a disk kept:
proving FULL's sync needs power cuts or a fault-injecting VFS, and a run at
``synchronous=NORMAL`` would pass these checks too), damage to the main file (it
is only written by checkpoints, which the run turns off; a checkpoint torn
mid-way is SQLite's own recovery from the WAL it keeps until the end), the
``-shm`` index (never copied: SQLite rebuilds it from the WAL), damage that
keeps a frame's checksum valid (not a torn write), and the adapter process
(``crash`` kills it).
"""

from __future__ import annotations

import dataclasses
import os
import random
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

from envreplica.conformance.drivers import TEST_MASTER_KEY, SqliteDriver
from envreplica.conformance.readback import impl_model_state
from envreplica.impl.replica import SqliteReplica
from envreplica.model.state import State, Variant
from envreplica.reliability.crash import (
    Acknowledged,
    ReadBack,
    acknowledged_delivery,
    check_acknowledged,
    read_back,
)
from envreplica.reliability.scratch import scratch_directory
from envreplica.reliability.stream import Cloud, StreamShape
from envreplica.spec import properties as P

__all__ = ["TornReport", "run_torn", "GARBLED_TAIL_FRAMES"]

#: SQLite's WAL format: a 32-byte file header, then frames of a 24-byte header and one page.
WAL_HEADER_BYTES = 32
FRAME_HEADER_BYTES = 24
_WAL_HEADER = struct.Struct(">IIIIIIII")  # magic, format, page size, checkpoint seq, salt-1, salt-2, checksum
_WAL_MAGIC = (0x377F0682, 0x377F0683)
#: Frames kept after a garbled frame: more than any one transaction of the run, so later commits are present.
GARBLED_TAIL_FRAMES = 64
#: How a sampled frame is damaged, and how often (weights).
_DAMAGE = (("frame header", 2), ("page", 2), ("cut inside", 1))


# ---------------------------------------------------------------------------
# The report.
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TornReport:
    """What one ``run_torn`` did and checked."""

    deliveries: int  # the stream's length
    frames: int  # frames in the final WAL
    page_size: int
    boundaries: int  # copies cut at a frame boundary, reopened and checked
    garbled: int  # copies with a byte flipped in one frame (header or page)
    garbled_headers: int  # of them, in the frame header
    cut_inside: int  # copies cut inside a frame
    acknowledged: int  # deliveries acknowledged in the run
    receipts_checked: int  # (copy, acknowledged delivery) pairs required and found equal
    states_compared: int  # copies ending at an operation boundary, compared whole with the state then
    invariant_checks: int
    seconds: float

    def lines(self) -> list[str]:
        return [
            f"WAL: {self.frames} frames of {self.page_size}-byte pages for {self.deliveries} deliveries",
            f"cut at a frame boundary: {self.boundaries} copies",
            f"garbled (a byte flipped in one frame): {self.garbled} copies "
            f"({self.garbled_headers} in the frame header); cut inside a frame: {self.cut_inside} copies",
            f"acknowledged deliveries checked: {self.acknowledged} "
            f"({self.receipts_checked} required receipts found equal over all copies)",
            f"copies at an operation boundary equal to the state then: {self.states_compared}",
            f"invariant checks: {self.invariant_checks} ({len(P.INVARIANTS)} invariants per copy)",
            f"wall time: {self.seconds:.1f} s",
        ]


# ---------------------------------------------------------------------------
# The WAL.
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _WalGeometry:
    """Where frames begin, from the WAL header."""

    header: bytes  # the 32-byte file header (unchanged for the whole run: the WAL never restarted)
    page_size: int

    @classmethod
    def read(cls, data: bytes) -> "_WalGeometry":
        magic, _format, page_size, *_ = _WAL_HEADER.unpack_from(data)
        if magic not in _WAL_MAGIC:
            raise AssertionError(f"the -wal file does not start with a WAL header (magic {magic:#x})")
        return cls(bytes(data[:WAL_HEADER_BYTES]), page_size)

    @property
    def frame_bytes(self) -> int:
        return FRAME_HEADER_BYTES + self.page_size

    def offset(self, frame: int) -> int:
        """Where frame ``frame`` (0-based) begins; ``offset(k)`` is the size of a WAL cut after k frames."""
        return WAL_HEADER_BYTES + frame * self.frame_bytes

    def frames_in(self, size: int) -> int:
        whole, rest = divmod(size - WAL_HEADER_BYTES, self.frame_bytes)
        assert rest == 0, f"the WAL is {size} bytes: not a whole number of {self.frame_bytes}-byte frames"
        return whole


class _WalWatch:
    """Counts the frames of a replica's WAL after each request, and that the WAL never restarted."""

    def __init__(self, db: Path) -> None:
        self.path = Path(f"{db}-wal")
        self.geometry: Optional[_WalGeometry] = None

    def frames(self) -> int:
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            size = 0
        if size < WAL_HEADER_BYTES:
            assert self.geometry is None, f"the WAL shrank to {size} bytes during the run: it was checkpointed"
            return 0
        with open(self.path, "rb") as f:
            geometry = _WalGeometry.read(f.read(WAL_HEADER_BYTES))
        if self.geometry is None:
            self.geometry = geometry
        assert geometry == self.geometry, "the WAL header changed during the run: it was checkpointed and restarted"
        return geometry.frames_in(size)


def _keep_wal(replica: SqliteReplica) -> None:
    """No automatic checkpoint on the replica's connection, so every frame of the run stays in the WAL;
    and the run is in WAL mode at ``synchronous=FULL``.

    The pragmas go to the DBAPI connection itself: a statement through the
    SQLAlchemy connection would autobegin a transaction (``BEGIN IMMEDIATE``).
    """
    dbapi = replica._conn.connection.dbapi_connection  # the replica's one held connection
    assert dbapi is not None  # the replica is open
    dbapi.execute("PRAGMA wal_autocheckpoint=0")
    pragmas = {name: dbapi.execute(f"PRAGMA {name}").fetchone()[0]
               for name in ("wal_autocheckpoint", "synchronous", "journal_mode")}
    assert pragmas == {"wal_autocheckpoint": 0, "synchronous": 2, "journal_mode": "wal"}, (
        f"the recorded run needs WAL mode, synchronous=FULL (2) and no automatic checkpoint; got {pragmas}")


# ---------------------------------------------------------------------------
# The run, recorded.
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Recording:
    """A run's files as they were at its end, and what was acknowledged at which frame."""

    db: bytes  # the main file (never written during the run: no checkpoint)
    wal: bytes  # the whole WAL
    geometry: _WalGeometry
    acks: tuple[tuple[int, Acknowledged], ...]  # (frames in the WAL when it was answered, the acknowledgement)
    states: dict  # frames at the end of an operation -> the state then (``_comparable``)

    @property
    def frames(self) -> int:
        return self.geometry.frames_in(len(self.wal))


def _requests(cloud: Cloud) -> list[dict]:
    """Values, a snapshot, half the deliveries, a gate cycle (close, a second snapshot), the other half."""
    half = cloud.shape.deliveries // 2
    requests = cloud.store_requests() + cloud.snapshot("a1", 0)
    requests += [cloud.delivery(n) for n in range(1, half + 1)]
    requests += [{"op": "close"}] + cloud.snapshot("a2", half)
    requests += [cloud.delivery(n) for n in range(half + 1, cloud.shape.deliveries + 1)]
    return [{"id": i, **request} for i, request in enumerate(requests, 1)]


def _comparable(state: State) -> State:
    """A state without what is not in the file (whether the process has a value store)."""
    return dataclasses.replace(state, store_on=False)


def _answered(request: dict, response: dict) -> None:
    """The consistent stream succeeds at every request; ``AssertionError`` naming it otherwise."""
    result: Any = response.get("result")  # JSON: a dict when the request succeeded
    refused = request["op"] in ("page", "commit", "delivery") and (result or {}).get("ok") is not True
    if response.get("ok") is not True or refused or (request["op"] == "delivery" and result["replayed"]):
        raise AssertionError(f"the recorded run's request {request['id']} ({request['op']}) was answered "
                             f"{str(response)[:400]}")


def _record(cloud: Cloud, directory: Path) -> _Recording:
    """Run the stream in-process at ``synchronous=FULL``, checkpoints off; copy the files before closing."""
    db = directory / "replica.db"
    driver = SqliteDriver(Variant.FIXED, db, master_key=TEST_MASTER_KEY)
    try:
        assert driver.replica is not None  # the driver opens its replica
        _keep_wal(driver.replica)
        main_file = db.read_bytes()
        wal = _WalWatch(db)
        acks: list[tuple[int, Acknowledged]] = []
        states = {wal.frames(): _comparable(impl_model_state(driver.replica))}
        for request in _requests(cloud):
            response = driver.handle(request)
            _answered(request, response)
            frames = wal.frames()
            ack = acknowledged_delivery(request, response)
            if ack is not None:
                acks.append((frames, ack))
            if not request["op"].startswith("store."):
                states[frames] = _comparable(impl_model_state(driver.replica))
        # Closing checkpoints the WAL into the main file: copy the WAL first.
        assert db.read_bytes() == main_file, "the main file changed during the run: a checkpoint ran"
        log = wal.path.read_bytes()
    finally:
        driver.close()
    assert wal.geometry is not None, "the run wrote nothing to the WAL"
    return _Recording(main_file, log, wal.geometry, tuple(acks), states)


# ---------------------------------------------------------------------------
# Copies, reopened and checked.
# ---------------------------------------------------------------------------


class _TornRun:
    """The checks of every copy of one recording, and their tallies."""

    def __init__(self, recording: _Recording, directory: Path, rng: random.Random) -> None:
        self.rec = recording
        self.directory = directory
        self.rng = rng
        self.boundaries = self.garbled = self.garbled_headers = self.cut_inside = 0
        self.receipts_checked = self.states_compared = self.invariant_checks = 0

    def cut_at(self, k: int) -> None:
        """The WAL cut after its first k frames."""
        where = f"WAL cut to its first {k} of {self.rec.frames} frames"
        self._check(self.rec.wal[:self.rec.geometry.offset(k)], k, where)
        self.boundaries += 1

    def damage(self, k: int) -> None:
        """The frame after the first k damaged: a byte flipped in its header or page, or the WAL cut inside it."""
        geometry = self.rec.geometry
        start = geometry.offset(k)
        kind = self.rng.choices([d for d, _ in _DAMAGE], weights=[w for _, w in _DAMAGE])[0]
        if kind == "cut inside":
            cut = self.rng.randrange(1, geometry.frame_bytes)
            self._check(self.rec.wal[:start + cut], k,
                        f"WAL cut {cut} bytes into frame {k + 1} of {self.rec.frames}")
            self.cut_inside += 1
            return
        inside = (self.rng.randrange(FRAME_HEADER_BYTES) if kind == "frame header"
                  else self.rng.randrange(FRAME_HEADER_BYTES, geometry.frame_bytes))
        end = geometry.offset(min(self.rec.frames, k + 1 + GARBLED_TAIL_FRAMES))
        wal = bytearray(self.rec.wal[:end])
        wal[start + inside] ^= self.rng.randrange(1, 256)
        self._check(bytes(wal), k, f"frame {k + 1} of {self.rec.frames} garbled at byte {inside} of the frame, "
                                   f"in its {kind} (the frames after it kept, to frame {geometry.frames_in(end)})")
        self.garbled += 1
        self.garbled_headers += kind == "frame header"

    def _check(self, wal: bytes, k: int, where: str) -> None:
        """Reopen main file + ``wal`` in a fresh directory: the committed prefix within the first k frames."""
        with scratch_directory(self.directory, "copy-") as copy:
            db = copy / "replica.db"
            db.write_bytes(self.rec.db)
            Path(f"{db}-wal").write_bytes(wal)
            back = read_back(db, where)
        self.invariant_checks += len(P.INVARIANTS)
        required = [ack for frames, ack in self.rec.acks if frames <= k]
        self.receipts_checked += check_acknowledged(back, required, where)
        self._check_prefix(back, k, required, where)

    def _check_prefix(self, back: ReadBack, k: int, required: list[Acknowledged], where: str) -> None:
        """Exactly the prefix: no later delivery leaked in; at an operation boundary, the whole state then."""
        expected = max((ack.sequence for ack in required), default=0)
        assert back.applied == expected, (
            f"{where}: applied sequence {back.applied}, but the deliveries whose receipt lies within the first "
            f"{k} frames end at {expected}: " + (
                f"delivery {back.applied} was taken from frames beyond the cut" if back.applied > expected
                else f"acknowledged delivery {back.applied + 1} lost"))
        state = self.rec.states.get(k)
        if state is None:
            return
        found = _comparable(back.state)
        differ = [f.name for f in dataclasses.fields(State) if getattr(found, f.name) != getattr(state, f.name)]
        assert not differ, (f"{where}: the frames end an operation, but the state read back differs from the "
                            f"state after it in: {', '.join(differ)}")
        self.states_compared += 1

    def report(self, deliveries: int, seconds: float) -> TornReport:
        return TornReport(
            deliveries=deliveries, frames=self.rec.frames, page_size=self.rec.geometry.page_size,
            boundaries=self.boundaries, garbled=self.garbled, garbled_headers=self.garbled_headers,
            cut_inside=self.cut_inside, acknowledged=len(self.rec.acks), receipts_checked=self.receipts_checked,
            states_compared=self.states_compared, invariant_checks=self.invariant_checks, seconds=seconds,
        )


def run_torn(deliveries: int, seed: int = 0, workdir: Optional[Union[str, os.PathLike]] = None,
             garble_every: int = 1) -> TornReport:
    """Record a run of ``deliveries``; reopen its WAL cut at every frame, and damaged at every ``garble_every``-th.

    ``workdir``: where the scratch directory is made (default: the system's
    temporary directory); it is removed at the end. Raises ``AssertionError``
    naming the frame and what was lost or broken.
    """
    if deliveries < 0 or garble_every < 1:
        raise ValueError("deliveries must be non-negative and garble_every at least 1")
    started = time.monotonic()
    cloud = Cloud(StreamShape(deliveries=deliveries, seed=seed))
    with scratch_directory(workdir, "envreplica-torn-") as directory:
        (directory / "run").mkdir()
        run = _TornRun(_record(cloud, directory / "run"), directory, random.Random(seed))
        for k in range(run.rec.frames + 1):
            run.cut_at(k)
        for k in range(0, run.rec.frames, garble_every):
            run.damage(k)
    return run.report(deliveries, time.monotonic() - started)
