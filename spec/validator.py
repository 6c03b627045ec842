"""The contract's JSON Schema as validators: a fast verdict and, for a value that fails, where and why.

Models: JSON Schema draft 2020-12 validation of a decoded JSON value against one definition of
``spec.schema.definitions()``. The verdict comes from ``jsonschema_rs`` (the Rust implementation: a page's answer
in about a microsecond, fast enough to hold every answer of an adapter to its op's response definition during a
lockstep run, ``conformance.answers``). The explanation of a failure comes from ``jsonschema`` (the reference
implementation's ``best_match``: the deepest, most relevant error of the alternative that fits best); it is only
asked for a value already found not to conform, so its milliseconds cost nothing. ``tests/test_schema.py`` holds
the two libraries' verdicts to each other on thousands of values, so a difference between them (a regular
expression dialect, a keyword) fails a test instead of a run.

Leaves out on purpose: formats, and the rules beyond the schema (``spec.schema.BEYOND_THE_SCHEMA``), which
``spec.wire`` and the adapter check.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Mapping, Optional

import jsonschema_rs
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match
from referencing import Registry
from referencing.jsonschema import DRAFT202012

from envreplica.spec import schema as S

__all__ = ["Validator"]

Check = Callable[[Any], bool]


class Validator:
    """The contract's definitions (``spec.schema.definitions()``), each compiled once when first asked for."""

    def __init__(self, definitions: Optional[Mapping[str, Any]] = None) -> None:
        self.definitions = dict(S.definitions() if definitions is None else definitions)  # name -> its schema
        self._fast: dict[str, Check] = {}  # name -> its compiled jsonschema_rs predicate
        self._registry: Optional[Registry] = None  # every definition by its $id, for jsonschema (explanations)

    def _standalone(self, name: str) -> dict[str, Any]:
        """``name`` as a document of its own, with every definition under ``$defs`` (refs resolve by ``$id``)."""
        if name not in self.definitions:
            raise KeyError(f"no definition named {name!r}; the names are: {', '.join(sorted(self.definitions))}")
        root = {k: v for k, v in self.definitions[name].items() if k != "$id"}
        return {"$schema": S.DIALECT, "$id": S.BASE + name, **root, "$defs": self.definitions}

    def check(self, name: str) -> Check:
        """The predicate "this value conforms to definition ``name``" (``KeyError`` for a name there is not)."""
        check = self._fast.get(name)
        if check is None:
            check = self._fast[name] = jsonschema_rs.validator_for(self._standalone(name)).is_valid
        return check

    def explain(self, name: str, value: Any, path: str = "value") -> Optional[str]:
        """None when ``value`` conforms to ``name``; else one line: where (``path`` and the JSON path under it), what
        is wrong, and the definition."""
        if self.check(name)(value):
            return None
        if self._registry is None:
            document: dict[str, Any] = {"$schema": S.DIALECT, "$id": S.BASE + "contract.json",
                                        "$defs": self.definitions}
            self._registry = Registry().with_resource(S.BASE + "contract.json",
                                                      DRAFT202012.create_resource(document)).crawl()
        error = _closest(list(Draft202012Validator({"$ref": S.BASE + name}, registry=self._registry)
                              .iter_errors(value)))
        if error is None:  # the two libraries disagree: tests/test_schema.py makes this a failed test
            return f"{path}: {_brief(value)} is not a {name}"
        where = path + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
        inner = error.schema.get("$id") if isinstance(error.schema, dict) else None
        owner = inner or name
        if error.validator == "enum" and isinstance(error.schema, dict):
            values = ", ".join(json.dumps(v) for v in error.schema["enum"])
            what = f"{_shown(error.instance)} is not one of {owner}'s values ({_brief(values, 120)})"
        elif error.validator == "additionalProperties" and isinstance(error.instance, dict):
            known = error.schema.get("properties", {}) if isinstance(error.schema, dict) else {}
            where += "." + sorted(k for k in error.instance if k not in known)[0]
            what = f"a key {owner} does not have"
        elif error.validator == "required" and isinstance(error.instance, dict):
            required = error.validator_value if isinstance(error.validator_value, list) else []
            where += "." + next(k for k in required if k not in error.instance)
            what = f"missing (required by {owner})"
        else:
            what = _brief(error.message, 160) + (f" ({inner})" if inner and inner != name else "")
        return f"{where}: {what} ({name})"


def _closest(errors: list[ValidationError]) -> Optional[ValidationError]:
    """The error that says best what is wrong: inside a ``oneOf``/``anyOf``, the alternative whose discriminators fit
    (no ``const`` of its own properties failed, such as ``ok`` or ``kind``), then the deepest error in it."""
    leaves: list[ValidationError] = []
    for error in errors:
        if error.validator in ("oneOf", "anyOf") and error.context:
            branches: dict[Any, list[ValidationError]] = {}
            for inner in error.context:
                branches.setdefault(inner.relative_schema_path[0], []).append(inner)

            def misfits(group: list[ValidationError]) -> int:
                return sum(1 for e in group if e.validator == "const" and len(e.relative_path) <= 1)

            group = min(branches.values(), key=lambda g: (misfits(g), -max(len(e.absolute_path) for e in g)))
            found = _closest(group)
            leaves.append(found if found is not None else error)
        else:
            leaves.append(error)
    if not leaves:
        fallback: Optional[ValidationError] = best_match(errors)
        return fallback
    return max(leaves, key=lambda e: len(e.absolute_path))


def _shown(value: Any) -> str:
    """A JSON value as JSON, cut to one short line."""
    return _brief(json.dumps(value, ensure_ascii=False))


def _brief(value: Any, width: int = 80) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= width else text[: width - 1] + "…"
