"""Every answer of an adapter held to its op's response definition (docs/protocol.md section 9).

``answer_problem(request, response)`` validates one response against the definition of its request's op
(``spec.schema.response_definition``: ``PageResponse`` for a ``page``, and so on; ``Response`` for a request
whose op is not one of the contract's), then each of its ``nested`` responses against the definition of the
``duringFetch`` request it answers. It returns None when they conform, else ``(op, definition, where and why)``.
The definitions are compiled once (``spec.validator``, with ``jsonschema_rs``): an answer takes a microsecond or so.

``SubprocessDriver`` (``conformance.external``) checks every answer this way when ``CHECK_ANSWERS`` is on (the
default; ``ENVREPLICA_CHECK_ANSWERS=0`` turns it off; ``tests/conftest.py`` keeps it on for the whole test suite)
and raises ``ProtocolBreak`` on the first that breaks its definition. ``answers_checked()`` counts the answers
checked in this process, so that a test can tell the check ran.

Leaves out on purpose: whether an answer is *right* (the lockstep compares it with the model's), and the rules
beyond the schema (``spec.schema.BEYOND_THE_SCHEMA``).
"""

from __future__ import annotations

import os
from typing import Any, Optional

from envreplica.spec import schema
from envreplica.spec.validator import Validator

__all__ = ["CHECK_ANSWERS", "answer_problem", "answers_checked", "definition_for", "contract"]

#: Whether external adapters' answers are held to their definitions (``ENVREPLICA_CHECK_ANSWERS=0``: not).
CHECK_ANSWERS: bool = os.environ.get("ENVREPLICA_CHECK_ANSWERS", "1").strip() not in ("0", "false", "no", "off")

_contract: Optional[Validator] = None
_checked = 0


def contract() -> Validator:
    """The contract's definitions, compiled (once per process)."""
    global _contract
    if _contract is None:
        _contract = Validator(schema.definitions())
    return _contract


def answers_checked() -> int:
    """How many answers (nested ones included) this process has held to their definitions."""
    return _checked


def definition_for(request: Any) -> tuple[str, str]:
    """(op, the response definition of ``request``): its op's, or ``Response`` for an op the contract lacks."""
    op = request.get("op") if isinstance(request, dict) else None
    if isinstance(op, str) and op in schema.OPS:
        return op, schema.response_definition(op)
    return (op if isinstance(op, str) else "?"), "Response"


def answer_problem(request: Any, response: Any, path: str = "response") -> Optional[tuple[str, str, str]]:
    """None when ``response`` (and each nested one) follows its request's response definition; else
    ``(op, definition, "path: what is wrong")`` of the first that does not."""
    global _checked
    op, name = definition_for(request)
    checker = contract()
    _checked += 1
    if not checker.check(name)(response):
        return op, name, checker.explain(name, response, path) or f"{path}: not a {name}"
    nested = response.get("nested") if isinstance(response, dict) else None
    asked = request.get("duringFetch") if isinstance(request, dict) else None
    if isinstance(nested, list) and isinstance(asked, list):
        for n, (inner_request, inner_response) in enumerate(zip(asked, nested)):
            problem = answer_problem(inner_request, inner_response, f"{path}.nested[{n}]")
            if problem is not None:
                return problem
    return None
