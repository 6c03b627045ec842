"""What the migration lockstep compares after every move: one ``Observation`` shape for the model and the disk.

Models: the facts of ``model.migration.MigrationState`` an implementation can be held to, each in words both
sides can produce: per store its contract version, its data (``spec.migration.Data``: what it was built from
and how many foreign writes landed on it), its fence and its backup's content; the publications (the request
with the sources it names, the result with the backups its evidence names, the recovery request with its
plan, the recovery result), each as published or edited since; whether the installation lock is held; and
the live invocations with the last step each took. An outcome (``Outcome``) is what one move returned.

``from_model`` reads them off a model state; ``conformance.migration.disk`` reads them off the files.

Leaves out on purpose: the child inputs (the implementation writes none), the bytes of anything (a store's
data is judged by ``disk.Template``'s abstraction, a publication by its digest), who holds the lock (only
whether it is held), and the model's ghost ``original``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Optional

from envreplica.model import migration as mm
from envreplica.spec.migration import EXIT_STATUS, STORES, Crashed, Done, Image, Landed, Refusal, Refused

#: A publication as observed: absent (``None``), as published, or edited since (its digest or custody broken).
PUBLISHED = "published"
EDITED = "edited"


@dataclass(frozen=True)
class StoreView:
    """One store as both sides see it."""

    version: int  # the contract version it records
    data: str  # what its data was built from and its foreign writes (``Data``'s text: "original+1w")
    admission: str  # "open", "maintenance" or "recovery" (by this request; another's is "<kind> by another")
    backup: Optional[str]  # what its backup file holds ("v1:original"), None when there is none


@dataclass(frozen=True)
class Observation:
    """Everything the lockstep compares after a move."""

    stores: tuple[StoreView, ...]  # run, resource
    request: Optional[str]  # PUBLISHED, EDITED or None
    sources: Optional[tuple[str, ...]]  # what the request says each store held when prepared ("v1:original");
    #: the contents of an edited publication are not compared (only that it is edited)
    result: Optional[str]  # PUBLISHED, EDITED (not this request's) or None
    evidence: Optional[tuple[Optional[str], ...]]  # what the backups the result records hold
    recovery: Optional[str]  # PUBLISHED, EDITED or None
    plan: Optional[tuple[bool, ...]]  # the published recovery request: per store, restore (True) or unchanged
    recovery_result: bool  # the recovery's result is published
    lock: bool  # a live invocation holds the installation lock
    invocations: tuple[tuple[int, str], ...]  # each live invocation (its number) and the last step it took

    def differences(self, other: "Observation") -> list[str]:
        """Each field that differs, as ``name: this | other`` (stores per store and field)."""
        out = []
        for f in fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if f.name == "stores":
                for i, (a, b) in enumerate(zip(mine, theirs)):
                    for g in fields(a):
                        if getattr(a, g.name) != getattr(b, g.name):
                            out.append(f"{STORES[i].name.lower()}.{g.name}: {getattr(a, g.name)} | {getattr(b, g.name)}")
            elif mine != theirs:
                out.append(f"{f.name}: {mine} | {theirs}")
        return out

    def to_json(self) -> dict[str, Any]:
        return {"stores": [vars(s) for s in self.stores],
                **{f.name: getattr(self, f.name) for f in fields(self) if f.name != "stores"}}


@dataclass(frozen=True)
class Outcome:
    """What one move returned, in words both sides produce.

    ``kind``: ``started`` (an invocation began), ``step`` (it took step ``step``), ``exit`` (it ended with exit
    status ``status``, refused with ``code`` or done when ``code`` is None; ``step`` is the last step it took
    when the end came right after it), ``crashed`` (killed at a step boundary), ``write`` (a foreign write:
    ``code`` is ``landed``, ``fence`` or ``read-only``), ``ok`` (any other move of the world).
    """

    kind: str
    step: Optional[str] = None
    status: Optional[int] = None
    code: Optional[str] = None

    def __str__(self) -> str:
        if self.kind == "step":
            return f"step {self.step}"
        if self.kind == "exit":
            after = f"after {self.step}: " if self.step else ""
            status = "" if self.status is None else f" {self.status}"  # None: not compared (the adapter's)
            return f"{after}exit{status}" + (f" ({self.code})" if self.code else "")
        if self.kind == "write":
            return f"write {self.code}"
        return self.kind


def image_text(image: Optional[Image]) -> Optional[str]:
    return None if image is None else str(image)


#: A foreign write's refusal, as the lockstep compares it: the fence's two reasons read alike from outside.
_WRITE_CLASS = {Refusal.ADMISSION_CLOSED: "fence", Refusal.WRITER_INCOMPATIBLE: "fence",
                Refusal.STORE_READ_ONLY: "read-only"}


def model_outcome(action: mm.Action, result: mm.Result, step: Optional[str], ended: bool) -> Outcome:
    """The model's outcome of ``action`` (``step``: the visible step it took; ``ended``: its invocation ended)."""
    if isinstance(action, mm.Invoke):
        return Outcome("started")
    if isinstance(result, Crashed):
        return Outcome("crashed")
    if isinstance(action, mm.Write):
        return Outcome("write", code="landed" if isinstance(result, Landed)
                       else _WRITE_CLASS[result.code] if isinstance(result, Refused) else "?")
    if isinstance(action, mm.Step):
        if isinstance(result, Refused):
            return Outcome("exit", status=EXIT_STATUS[result.code], code=result.code.value)
        if ended:
            return Outcome("exit", step=step, status=0)
        return Outcome("step", step=step)
    assert isinstance(result, Done)
    return Outcome("ok")


def from_model(st: mm.MigrationState, last_steps: dict[int, str], lock_file: bool = True) -> Observation:
    """The observation of model state ``st`` (``last_steps``: each live invocation's last visible step)."""
    files = st.files
    stores = tuple(StoreView(s.version, str(s.data), s.admission.value,
                             "v1:other" if s.backup_edited else image_text(s.backup))
                   for s in st.stores)

    def doc(there: object, doc: mm.Doc) -> Optional[str]:
        return None if there is None else EDITED if doc in files.edited else PUBLISHED

    request, result, recovery = (doc(files.intent, mm.Doc.REQUEST), doc(files.result, mm.Doc.RESULT),
                                 doc(files.recovery, mm.Doc.RECOVERY))
    return Observation(
        stores=stores,
        request=request,
        sources=None if files.intent is None or request == EDITED else tuple(str(i) for i in files.intent.sources),
        result=result,
        evidence=None if files.result is None or result == EDITED
        else tuple(image_text(b) for b in files.result.backups),
        recovery=recovery,
        plan=None if files.recovery is None or recovery == EDITED else tuple(files.recovery.restores),
        recovery_result=files.recovery_result,
        lock=any(p.lock for p in st.procs),
        invocations=tuple(sorted((p.pid, last_steps.get(p.pid, "")) for p in st.procs)),
    )
