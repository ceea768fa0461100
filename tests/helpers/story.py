"""Steps of a story told on one shared cluster (a module-scoped fixture), each run at most once.

Real-Slurm modules start one cluster for all their tests, and a test may stand on what an
earlier step did to the nodes. A test names the steps it stands on, its own last; ``once`` runs
those that have not run on that cluster yet. In file order each step runs in its own test; a
test run alone (``-k``, tests/README.md) runs the steps before it first."""

from __future__ import annotations

from typing import Any, Callable


def once(cluster: Any, *steps: Callable[[Any], None]) -> None:
    """Run each step on ``cluster`` unless it already ran there. A step that failed counts as
    run: its own test failed, and a later test fails on what it left, not by running it again."""
    done = cluster.__dict__.setdefault("story", set())
    for step in steps:
        if step.__name__ not in done:
            done.add(step.__name__)
            step(cluster)
