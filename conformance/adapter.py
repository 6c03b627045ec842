"""The conformance adapter: JSON lines over stdio (docs/protocol.md section 5).

``serve`` reads one request per line from ``stdin`` and writes exactly one
response per line to ``stdout``, flushing after each, until end of input. A
line that is not a JSON value (including a blank line, invalid UTF-8, and
the non-JSON constants ``NaN`` / ``Infinity``) is answered with ``"id": null``
and an ``invalid`` error; a driver bug is answered, never raised (see
``conformance.drivers``). Responses are compact JSON with non-ASCII escaped.
A JSON object with a repeated key keeps the last one (as ``JSON.parse``).

``run`` serves the parsed options of the command line (``cli.adapter``, which reads them)::

    python -m envreplica.conformance.adapter --impl model --variant fixed
    python -m envreplica.conformance.adapter --impl sqlite --test-key --db /tmp/r.db --store embedded
    envreplica adapter --impl sqlite ...        # the same, as a subcommand of ``envreplica``

``--impl sqlite`` seals under the configured master key
(``ENVREPLICA_MASTER_KEY`` or ``ENVREPLICA_MASTER_KEY_FILE``; without one it
refuses to start), or under the public test key when asked for by name
(``--test-key``, announced on standard error; refused with ``--store ssm``).
``--db PATH`` creates a new replica there, or reopens one that the adapter
created itself (``store_meta.created_by``); anything else at PATH is refused
with one line and exit 2, never overwritten. While it runs the adapter holds
the replica alone (``PATH.lock``), and ``reset`` empties that replica in
place. Without ``--db`` it uses a file in a fresh temporary directory,
removed at exit; killed, it leaves the directory, and the next adapter
started without ``--db`` removes it (``conformance.scratch``). ``--store
ssm`` reads AWS SSM Parameter Store through ``impl.valuestores.SsmStore``
(region ``AWS_REGION``, endpoint
``ENVREPLICA_SSM_ENDPOINT``, credentials from boto3's default chain); there
``store.put`` writes real parameters (and answers ``unsupported`` for what SSM
cannot produce), ``store.fail`` answers ``unsupported``, and ``reset`` does not
delete parameters. The model keeps its own store, so ``--impl model`` takes
``--store embedded`` only.

Beside section 5 the adapter offers the ops of docs/protocol.md section 6
(``ready``, ``diagnostics``, ``crashAfterCommit`` on ``page`` / ``delivery``)
and, because it shows every stored value in plaintext, ``state`` only with
``--test-key`` (or ``--impl model``): otherwise ``state`` is ``unsupported``
and the message says why. While serving, ``sys.stdout`` is pointed at
standard error so that a stray ``print`` cannot corrupt the protocol stream.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import tempfile
import threading
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, Callable, Iterator, Optional, TextIO

from envreplica.conformance import scratch
from envreplica.conformance.drivers import TEST_MASTER_KEY, Driver, ModelDriver, SqliteDriver
from envreplica.conformance.errors import UsageError
from envreplica.spec.variants import Variant

__all__ = ["serve", "run", "build_driver"]


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _decode(line: Any) -> Any:
    if isinstance(line, bytes):
        line = line.decode("utf-8")  # UnicodeDecodeError is a ValueError
    return json.loads(line, parse_constant=_reject_constant)


def _dump(response: dict) -> str:
    return json.dumps(response, separators=(",", ":"), ensure_ascii=True)


def _respond(driver: Driver, line: Any) -> dict:
    try:
        request = _decode(line)
    except (ValueError, RecursionError) as error:
        reason = ("it is not UTF-8" if isinstance(error, UnicodeDecodeError)
                  else "it nests arrays or objects deeper than this adapter's JSON parser goes (Python's recursion "
                       "limit), so not even its id could be read" if isinstance(error, RecursionError)
                  else "it is not a JSON value")
        return {"id": None, "ok": False, "error": {
            "type": "invalid", "message": f"invalid request: the line could not be read: {reason}. "
                                          "Send one JSON object per line."}}
    try:
        return driver.handle(request)
    except Exception as error:  # Driver.handle answers everything; belt and braces
        rid = request.get("id") if isinstance(request, dict) and type(request.get("id")) is int else None
        return {"id": rid, "ok": False, "error": {
            "type": "unsupported", "message": f"internal error: {type(error).__name__}: {error}"}}


def serve(driver: Driver, stdin: Any, stdout: TextIO) -> int:
    """Answer every line of ``stdin`` on ``stdout``; returns the number of requests answered."""
    count = 0
    while True:
        line = stdin.readline()
        if not line:
            break
        if isinstance(line, bytes):
            line = line[:-1] if line.endswith(b"\n") else line
            line = line[:-1] if line.endswith(b"\r") else line
        else:
            line = line.rstrip("\r\n") if line.endswith("\n") else line
        response = _respond(driver, line)
        try:
            text = _dump(response)
        except (TypeError, ValueError) as error:  # a result that is not JSON: a driver bug
            text = _dump({"id": response.get("id"), "ok": False, "error": {
                "type": "unsupported", "message": f"internal error: unencodable response: {error}"}})
        stdout.write(text + "\n")
        stdout.flush()
        count += 1
    return count


# ---------------------------------------------------------------------------
# Command line.
# ---------------------------------------------------------------------------


def _warn_test_key(where: str) -> None:
    print(f"envreplica adapter: sealing under the public TEST key ({where}): anyone can open what this replica "
          f"stores; never give it real secrets", file=sys.stderr, flush=True)


def _master_key(args: argparse.Namespace) -> bytes:
    """The key the adapter seals under: the configured one, or the test key when asked for by name."""
    from envreplica.impl.sealing import load_master_key

    if args.test_key:
        if args.store == "ssm":
            raise UsageError("--test-key is refused with --store ssm: values read from a real store must not be "
                             "sealed under a key anyone has. Set ENVREPLICA_MASTER_KEY or ENVREPLICA_MASTER_KEY_FILE")
        _warn_test_key("--test-key")
        return TEST_MASTER_KEY
    return load_master_key()


#: The name of the temporary directory of a replica with no ``--db`` (``conformance.scratch`` adds its owner).
SCRATCH_PREFIX = "envreplica-adapter-"


@contextlib.contextmanager
def _owned_scratch() -> Iterator[Path]:
    path = scratch.owned_dir(SCRATCH_PREFIX)
    try:
        yield path
    finally:
        scratch.remove_tree(path)


def _replica_path(args: argparse.Namespace, tmpdir: Optional[str]) -> str:
    """``--db``, or a file in a fresh temporary directory (``SqliteReplica`` decides whether the path may be used)."""
    return args.db or os.path.join(tmpdir or tempfile.mkdtemp(prefix="envreplica-adapter-"), "replica.db")


def build_driver(args: argparse.Namespace, tmpdir: Optional[str] = None) -> Driver:
    """The driver the parsed arguments ask for (``UsageError``, ``KeyConfigError``, ``ReplicaPathError``...)."""
    if args.impl == "model":
        if args.store != "embedded":
            raise UsageError("--impl model keeps its own value store; use --store embedded")
        return ModelDriver(args.variant)
    from envreplica.impl import files

    key = _master_key(args)
    db = _replica_path(args, tmpdir)
    anchor = None
    if args.anchor:
        from envreplica.impl.anchor import FileAnchor

        anchor = FileAnchor(args.anchor)
    store_factory: Optional[Callable[[], Any]] = None  # None: the embedded store
    if args.store == "ssm":
        from envreplica.impl.valuestores import SsmStore

        def ssm_store() -> SsmStore:
            return SsmStore(region_name=os.environ.get("AWS_REGION"),
                            endpoint_url=os.environ.get("ENVREPLICA_SSM_ENDPOINT"))

        store_factory = ssm_store
    # ``state`` (docs/protocol.md section 6) shows every value in plaintext: offered only with --test-key.
    return SqliteDriver(args.variant, db, master_key=key, exclusive=True, created_by=files.CREATED_BY_ADAPTER,
                        anchor=anchor, on_test_key=_warn_test_key, offer_state=bool(args.test_key),
                        store_factory=store_factory, forbid_test_key=args.store == "ssm")


class _Interrupts:
    """Ctrl-C while serving, delivered even when Python drops the first ``KeyboardInterrupt``.

    Python raises a signal's exception wherever the main thread happens to be; raised inside a ``__del__`` or
    a garbage-collector callback (between a response and the next read, say) it is printed and dropped, and
    the loop would then wait for input forever. So a SIGINT also starts an interval timer whose SIGALRM
    raises ``KeyboardInterrupt`` again, every 0.2 s, until one reaches the loop (``stop``). Main thread and
    POSIX only; elsewhere the default Ctrl-C stands.
    """

    def __init__(self) -> None:
        self.pending = False  # a Ctrl-C came and has not reached the loop yet
        self.armed = (threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer"))
        self.saved: list[Any] = []

    def __enter__(self) -> "_Interrupts":
        if self.armed:
            self.saved = [signal.signal(signal.SIGINT, self._interrupt), signal.signal(signal.SIGALRM, self._again)]
        return self

    def _interrupt(self, signum: int, frame: Optional[FrameType]) -> None:
        self.pending = True
        signal.setitimer(signal.ITIMER_REAL, 0.2, 0.2)
        raise KeyboardInterrupt

    def _again(self, signum: int, frame: Optional[FrameType]) -> None:
        if self.pending:
            raise KeyboardInterrupt

    def stop(self) -> None:
        """The interrupt reached the loop: no more repeats."""
        self.pending = False
        if self.armed:
            signal.setitimer(signal.ITIMER_REAL, 0)

    def __exit__(self, kind: Optional[type[BaseException]], error: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self.stop()
        if self.armed:
            signal.signal(signal.SIGINT, self.saved[0])
            signal.signal(signal.SIGALRM, self.saved[1])


def _run_migration(args: argparse.Namespace) -> int:
    """Serve the migration adapter protocol with ``impl.paired`` or the model."""
    from envreplica.conformance.migration import serve as migration_serve
    from envreplica.model.migration import MigrationVariant

    impl = args.impl or "paired"
    if impl == "sqlite":
        raise UsageError("--protocol migration takes --impl paired or --impl model (sqlite is the replica's)")
    if args.variant not in {v.value for v in MigrationVariant}:
        raise UsageError(f"--protocol migration takes --variant seed or fixed, not {args.variant!r}")
    if impl == "model":
        server: migration_serve._Server = migration_serve.ModelServer(MigrationVariant(args.variant))
    else:
        modes = tuple(m.strip() for m in args.modes.split(",") if m.strip())
        unknown = [m for m in modes if m not in ("thread", "fork", "exec")]
        if unknown or not modes:
            raise UsageError(f"--modes: {', '.join(unknown) or 'none given'}: choose among thread, fork, exec")
        server = migration_serve.PairedServer(modes)
    out = sys.stdout
    sys.stdout = sys.stderr  # only responses go to the protocol stream
    try:
        return migration_serve.serve(server, sys.stdin.buffer, out)  # bytes: a line not UTF-8 is answered
    finally:
        sys.stdout = out


def _run_lock(args: argparse.Namespace) -> int:
    """Serve the lock adapter protocol with ``impl.lock`` or the model."""
    from envreplica.conformance.lock import serve as lock_serve
    from envreplica.conformance.lock.sides import Side
    from envreplica.model import lock as ml

    impl = args.impl or "lock"
    if impl not in ("lock", "model"):
        raise UsageError(f"--protocol lock takes --impl lock or --impl model, not {impl!r}")
    if args.variant not in {v.value for v in ml.Variant}:
        raise UsageError(f"--protocol lock takes --variant seed or fixed, not {args.variant!r}")
    known = {f.value for f in ml.Fix}
    unknown = [w for w in args.without if w not in known]
    if unknown:
        raise UsageError(f"--without {unknown[0]!r} is no fix of the lock model: choose among {', '.join(sorted(known))}")
    if args.without and impl != "model":
        raise UsageError("--without leaves a fix out of the model: it takes --impl model")
    if args.side is not None and impl != "lock":
        raise UsageError(f"--side {args.side} names how impl.lock's lock users run, and --impl {impl} runs "
                         f"none: drop --side, or serve --impl lock")
    server: lock_serve._Server
    if impl == "model":
        fixes = ml.Variant(args.variant).fixes - {ml.Fix(w) for w in args.without}
        name = args.variant + "".join(f" without {w}" for w in args.without)
        server = lock_serve.ModelServer(fixes, name)
    else:
        if args.variant != "fixed":
            raise UsageError("--impl lock is the fixed design (impl.lock); --variant seed is the model's: add "
                             "--impl model")
        server = lock_serve.ImplServer(Side(args.side or Side.THREADS.value))
    out = sys.stdout
    sys.stdout = sys.stderr  # only responses go to the protocol stream
    try:
        return lock_serve.serve(server, sys.stdin.buffer, out)
    finally:
        sys.stdout = out


def run(args: argparse.Namespace) -> int:
    """Serve standard input to standard output with the driver ``args`` names."""
    if args.side is not None and args.protocol != "lock":
        raise UsageError(f"--side {args.side} names how impl.lock's lock users run, and --protocol "
                         f"{args.protocol} has none: drop --side, or add --protocol lock")
    if args.protocol == "migration":
        return _run_migration(args)
    if args.protocol == "lock":
        return _run_lock(args)
    if args.impl == "lock":
        raise UsageError("--impl lock answers the lock's protocol: add --protocol lock")
    if args.impl == "paired":
        raise UsageError("--impl paired answers the migration's protocol: add --protocol migration")
    args.impl = args.impl or "sqlite"
    with contextlib.ExitStack() as stack:
        # A temporary directory only for a replica with no --db (nothing is left behind for a --db run); named
        # by this process, so that when it is killed the next adapter removes it (conformance.scratch).
        tmpdir = None
        if not args.db and args.impl != "model":
            scratch.reap(SCRATCH_PREFIX, [Path(tempfile.gettempdir())])
            tmpdir = str(stack.enter_context(_owned_scratch()))
        driver = build_driver(args, tmpdir)
        out = sys.stdout
        sys.stdout = sys.stderr  # only responses go to the protocol stream
        interrupts = stack.enter_context(_Interrupts())
        try:
            serve(driver, sys.stdin.buffer, out)
        except KeyboardInterrupt:
            interrupts.stop()  # before the cleanup below, which a repeat must not cut short
            raise
        finally:
            sys.stdout = out
            close = getattr(driver, "close", None)
            if close is not None:
                close()
    return 0


if __name__ == "__main__":  # pragma: no cover - ``python -m envreplica.conformance.adapter``: the command line's
    from envreplica.cli.adapter import main

    sys.exit(main())
