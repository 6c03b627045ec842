"""The reliability suite: the implementation with real files, real processes and hostile input.

Each module is one harness, run small by the tests (``tests/test_reliability_*.py``,
in ``make test``) and at full size by ``bench/reliability.py``, which prints
its figures:

* ``stream``: a long, realistic cloud stream (begin, pages, commit, hundreds of
  deliveries) as adapter requests, deterministic from a seed;
* ``crash``: ``kill -9`` of an adapter process applying the stream, at random
  moments; after each kill, SQLite's integrity check, every ``spec``
  invariant on the state read back, every acknowledged delivery present with
  its receipt, and a clean resume;
* ``torn``: the WAL of a real run cut or garbled at every frame boundary;
  reopening yields a committed prefix, invariants intact, nothing acknowledged
  under ``synchronous=FULL`` lost;
* ``concurrency``: several processes on one file (deliverers racing on the same
  sequence, a reconciler cycling the gate, readers);
* ``hostile``: malformed frames through the adapter, each answered with a clear
  error, the store unchanged, no crash and no hang.

Tampering and plaintext on disk are ``tests/test_integrity.py``.

Leaves out on purpose: power loss below the file system (a killed process and
a torn WAL tail are what can be produced on one machine), and other
implementations (the harnesses drive ``envreplica adapter`` or
``SqliteReplica``; the crash and hostile harnesses take any adapter command
that reopens its ``--db``).
"""
