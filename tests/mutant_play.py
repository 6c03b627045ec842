"""One hand-written scenario played on the model and on a (mutant) SQLite driver, step by step.

Shared by the mutant suites (``test_conformance_mutants``, ``test_api_mutants``,
``test_lockstep``'s input mutants): each checks that its scenario runs clean
on the real implementation and parts on the mutant.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from envreplica.conformance.drivers import ModelDriver
from envreplica.conformance.replica.compare import _check_state, compare_responses
from envreplica.spec.variants import Variant

from adapter_requests import with_ids


def _roundtrip(value: Any) -> Any:
    return json.loads(json.dumps(value))


@dataclass
class Step:
    request: dict
    model: dict
    impl: dict
    same_state: bool  # the lockstep's state checks pass: the read-back equals the model's, invariants hold

    @property
    def same_response(self) -> bool:
        """The responses are equal as JSON, messages included."""
        return json.dumps(self.model, sort_keys=True) == json.dumps(self.impl, sort_keys=True)

    @property
    def agrees(self) -> bool:
        """The responses agree as the lockstep holds them (error and diagnosis messages are free)."""
        return compare_responses(self.model, self.impl) is None


def play(driver, requests, variant) -> list[Step]:
    """Run ``requests`` through the model and ``driver`` (closed after); compare after each."""
    model = ModelDriver(variant)
    steps = []
    try:
        for request in with_ids(list(requests)):
            m = _roundtrip(model.handle(_roundtrip(request)))
            i = _roundtrip(driver.handle(_roundtrip(request)))
            steps.append(Step(request, m, i, _check_state(model, driver, Variant(variant), True) is None))
    finally:
        driver.close()
    return steps


def describe(steps: list[Step]) -> str:
    return "\n".join(
        f"  {s.request['op']:<10} same response={s.same_response!s:<5} same state={s.same_state!s:<5} "
        f"model={json.dumps(s.model)[:150]}  impl={json.dumps(s.impl)[:150]}"
        for s in steps
    )
