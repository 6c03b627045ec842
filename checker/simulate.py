"""Random simulation over the same model interface the checker uses.

Models: seeded random walks from ``init``: at each step an enabled action is
drawn uniformly, taken with ``next``, and every invariant and step property is
checked, beyond the depth an exhaustive search can reach. The gate is moved
by the ``transitions`` machine (``GateEngine.MACHINE``) by default, so a
simulation also exercises the declared machine itself.

Leaves out on purpose: shrinking (a violating walk is cut at the violation,
not minimised; the exhaustive checker gives shortest counterexamples, and the
conformance gate uses Hypothesis for shrinking).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field, replace

from envreplica.checker.bfs import Step, Violation
from envreplica.checker.coverage import Coverage
from envreplica.model.generate import Bounds, World, enabled, init, next_state
from envreplica.model.state import GateEngine
from envreplica.spec import properties as P


@dataclass
class Simulation:
    walks: int = 0
    steps: int = 0
    seconds: float = 0.0
    violations: dict[str, Violation] = field(default_factory=dict)  # property name -> Violation (first found)
    coverage: Coverage = field(default_factory=Coverage)
    distinct: int = 0  # distinct states seen

    @property
    def steps_per_second(self) -> float:
        return self.steps / self.seconds if self.seconds else float("inf")


def simulate(bounds: Bounds, walks: int, depth: int, seed: int = 0,
             engine: GateEngine = GateEngine.MACHINE, record: list[World] | None = None) -> Simulation:
    """``walks`` random walks of up to ``depth`` steps; ``record`` (if given) collects every state."""
    rng = random.Random(seed)
    cfg = replace(bounds.model_config(), gate_engine=engine)
    sim = Simulation()
    seen: set[World] = set()
    started = time.perf_counter()
    for _ in range(walks):
        world = init(bounds)
        steps = [Step(None, None, world)]
        for _ in range(depth):
            actions = list(enabled(bounds, world, cfg))
            if not actions:
                break
            action = rng.choice(actions)
            nxt, result = next_state(bounds, world, action, cfg)
            sim.steps += 1
            sim.coverage.observe_step(world.replica, action, result, nxt.replica)
            steps.append(Step(action, result, nxt))
            for prop in P.STEP_PROPERTIES:
                if prop.name not in sim.violations and not prop.check(world.replica, action, result, nxt.replica):
                    sim.violations[prop.name] = Violation(prop, list(steps))
            if nxt not in seen:
                seen.add(nxt)
                sim.coverage.observe_state(nxt.replica)
                for prop in P.INVARIANTS:
                    if prop.name not in sim.violations and not prop.check(nxt.replica):
                        sim.violations[prop.name] = Violation(prop, list(steps))
            if record is not None:
                record.append(nxt)
            world = nxt
        sim.walks += 1
    sim.seconds = time.perf_counter() - started
    sim.distinct = len(seen)
    return sim
