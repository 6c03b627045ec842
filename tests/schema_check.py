"""Holding adapter exchanges to the contract's JSON Schema (``envreplica.spec.schema``), with ``jsonschema``.

``Contract.exchange(request, response)`` checks one request and its response (and, inside them, each
``duringFetch`` request with its ``nested`` response):

* a request the schema rejects is answered with an error: ``invalid``, or ``unsupported`` for an op the adapter
  does not know;
* a request the schema accepts is never answered ``invalid``, except for a rule beyond the schema, which
  ``spec.wire`` then names (``BEYOND_THE_SCHEMA``);
* every response is a ``Response``; a successful one's ``result`` follows its op's result definition (``Crashed``
  for a ``crashAfterCommit`` that crashed).

Each distinct JSON value is validated once per definition (a run repeats many).
"""

from __future__ import annotations

import copy
import json
from functools import lru_cache
from typing import Any, Iterator

from jsonschema import Draft202012Validator
from referencing import Registry
from referencing.jsonschema import DRAFT202012

from envreplica.spec import schema as S
from envreplica.spec import wire
from envreplica.spec.domain import InvalidFrame


def places(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """Every place of a JSON value, the whole first: its path (keys and indexes) and what stands there."""
    yield path, value
    if isinstance(value, dict):
        for key, item in value.items():
            yield from places(item, path + (key,))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from places(item, path + (i,))


def put(root: Any, path: tuple[Any, ...], value: Any) -> Any:
    """A copy of the JSON value ``root`` with a copy of ``value`` at ``path`` (``places``')."""
    if not path:
        return copy.deepcopy(value)
    out = copy.deepcopy(root)
    target = out
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = copy.deepcopy(value)
    return out


@lru_cache(maxsize=1)
def _registry() -> Registry:
    document = S.schema_document()
    return Registry().with_resource(document["$id"], DRAFT202012.create_resource(document)).crawl()


@lru_cache(maxsize=None)
def validator(name: str) -> Draft202012Validator:
    """A validator of the contract's definition ``name`` (e.g. ``"PageFrame"``)."""
    return Draft202012Validator({"$ref": S.BASE + name}, registry=_registry())


def conforms(name: str, value: Any) -> bool:
    if name == "StateDocument":
        return _state_document_conforms(value)
    return _conforms(name, json.dumps(value, sort_keys=True))


_STATE_TABLES = ("projects", "records", "values", "stageProjects", "stageRecords", "stageValues", "receipts")


def _state_document_conforms(doc: Any) -> bool:
    """``StateDocument``, row by row: the document's own shape, then each row against its table's row schema.

    The same verdict as validating the whole document (its schema is an exact object of arrays of rows), but each
    distinct row is validated once: a run reads thousands of documents whose rows mostly repeat.
    """
    if not isinstance(doc, dict) or set(doc) != {"authority", *_STATE_TABLES}:
        return False
    if not _conforms("StateDocument#/properties/authority", json.dumps(doc["authority"], sort_keys=True)):
        return False
    return all(isinstance(doc[table], list) and all(
        _conforms(f"StateDocument#/properties/{table}/items", json.dumps(row, sort_keys=True)) for row in doc[table])
        for table in _STATE_TABLES)


@lru_cache(maxsize=1 << 16)
def _conforms(name: str, text: str) -> bool:
    return validator(name).is_valid(json.loads(text))


#: Frame-like fields of each op, with the parser that holds them to the rules beyond the schema.
_PARSERS = {"begin": (("frame", wire.parse_begin), ("keptPolicyEpochs", wire.parse_policy_epochs)),
            "page": (("frame", wire.parse_page),), "delivery": (("frame", wire.parse_apply),),
            "commit": (("frame", wire.parse_commit),)}
def beyond_the_schema(request: dict) -> bool:
    """Whether ``spec.wire`` rejects one of ``request``'s frames for a rule the schema cannot state."""
    for field, parse in _PARSERS.get(request.get("op"), ()):
        try:
            parse(request[field])
        except InvalidFrame as error:
            if wire.beyond(error):
                return True
    return False


def _request_conforms(request: Any) -> bool:
    """``Request``, dispatched on ``op``: each request definition holds its op as a constant, so a request with a
    known op can match that definition only. Its ``duringFetch`` items are free (each is checked on its own) and
    its integer id matters only as an integer: both are left out of what is validated (and cached)."""
    if not isinstance(request, dict):
        return conforms("Request", request)
    shown = dict(request)
    if type(shown.get("id")) is int:
        shown["id"] = 0
    if isinstance(shown.get("duringFetch"), list):
        shown["duringFetch"] = []
    op = shown.get("op")
    return conforms(S.request_definition(op) if isinstance(op, str) and op in S.OPS else "Request", shown)


def _response_envelope(response: Any) -> Any:
    """The response with what ``Response`` leaves free or checks elsewhere set aside: an integer id (as 0), the
    result (any JSON: checked against its op's result definition), the nested responses (checked one by one)."""
    if not isinstance(response, dict):
        return response
    shown = dict(response)
    if type(shown.get("id")) is int:
        shown["id"] = 0
    if "result" in shown:
        shown["result"] = {}
    if isinstance(shown.get("nested"), list):
        shown["nested"] = []
    return shown


class Contract:
    """Collects the problems of the exchanges it is shown (empty: every one follows the contract)."""

    def __init__(self) -> None:
        self.problems: list[str] = []
        self.responses = 0
        self.results_seen: set[str] = set()

    def _problem(self, what: str, request: Any, response: Any) -> None:
        if len(self.problems) < 50:
            self.problems.append(f"{what}: request {json.dumps(request)[:400]} -> {json.dumps(response)[:400]}")

    def exchange(self, request: Any, response: Any) -> None:
        self.responses += 1
        if not conforms("Response", _response_envelope(response)):
            self._problem("a response that is not a Response", request, response)
            return
        error = response["error"]["type"] if response["ok"] is False else None
        if not _request_conforms(request):
            known = isinstance(request, dict) and request.get("op") in S.OPS
            if error not in ("invalid", "unsupported") or (error == "unsupported" and known):
                self._problem("a request the schema rejects was not answered invalid", request, response)
        elif error == "invalid" and not beyond_the_schema(request):
            self._problem("a request the schema accepts was answered invalid", request, response)
        if response["ok"] is True and isinstance(request, dict) and request.get("op") in S.OPS:
            name = "Crashed" if "crashAfterCommit" in request and "crashedAfterCommit" in (
                response["result"] or {}) else S.RESULT_OF_OP[request["op"]]
            self.results_seen.add(name)
            if not conforms(name, response["result"]):
                self._problem(f"a result that is not a {name}", request, response)
        nested = response.get("nested")
        if nested is not None:
            asked = request.get("duringFetch") if isinstance(request, dict) else None
            if not isinstance(asked, list) or len(nested) > len(asked):
                self._problem("nested responses without their duringFetch requests", request, response)
                return
            for inner_request, inner_response in zip(asked, nested):
                self.exchange(inner_request, inner_response)
