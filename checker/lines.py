"""A model's counterexample as numbered lines for a terminal: each step's action and result, then the state it left.

Models: what ``envreplica check`` prints of a violation or a stuck state's path for a protocol whose model
describes its own actions and states in words (the paired writer migration's, the projection lock's); the
replica's counterexamples print through ``cli.main.print_counterexample`` (its gate beside each step).

Leaves out on purpose: colour and width (the command line's console wraps them).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from envreplica.checker.bfs import Violation


def trace_lines(violation: Violation, describe_state: Callable[[Any], str],
                describe_action: Callable[[Any, Optional[Any]], str], result_text: Callable[[Any], str]) -> list[str]:
    """``violation``'s steps, one numbered line per step with what it returned, then the state it left."""
    lines: list[str] = []
    prev: Optional[Any] = None
    for i, step in enumerate(violation.steps):
        if step.action is None:
            lines.append(f"  #0 init: {describe_state(step.state)}")
        else:
            lines.append(f"  #{i} {describe_action(step.action, prev)} -> {result_text(step.result)}")
            lines.append(f"       {describe_state(step.state)}")
        prev = step.state
    return lines
