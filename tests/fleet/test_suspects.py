"""`gpuhc fleet suspects`: over 20 seeds, the node planted with five times the bad-end rate is
named and no healthy node is, at the default threshold; the Fisher p-value is exact."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest

from gpuhc.fleet.suspects import Job, Settings, hypergeom_sf, judge, parse_sacct, suspects
from gpuhc.text.schema import defaults
from gpuhc.fleet.settings import SCHEMA

DEFAULT = Settings.from_section(defaults(SCHEMA)["suspects"])


def week_of_jobs(seed: int, nodes: int = 32, jobs: int = 16000, planted: str = "gpu017", healthy_rate: float = 0.02,
                 factor: float = 5.0, user_fail: float = 0.005) -> list[Job]:
    """A busy week on one 32-node partition: 16,000 jobs on 1, 2 or 4 random nodes; each node
    breaks a job it runs with its own probability (2 %; the planted node ``factor`` times that),
    users' own errors fail 0.5 % of jobs whatever the node, and 5 % are cancelled."""
    rng = random.Random(seed)
    names = [f"gpu{i:03d}" for i in range(nodes)]
    out = []
    for j in range(jobs):
        size = rng.choices((1, 2, 4), weights=(70, 20, 10))[0]
        on = rng.sample(names, size)
        broken = any(rng.random() < healthy_rate * (factor if n == planted else 1.0) for n in on)
        if broken:
            state = rng.choice(("NODE_FAIL", "FAILED", "TIMEOUT"))
        elif rng.random() < user_fail:
            state = "FAILED"
        elif rng.random() < 0.05:
            state = "CANCELLED"
        else:
            state = "COMPLETED"
        out.append(Job(str(1000 + j), state, "gpu", tuple(on), None))
    return out


@pytest.mark.parametrize("seed", range(20))
def test_planted_node_is_named_and_no_healthy_node_is(seed):
    records = judge(week_of_jobs(seed), DEFAULT)
    assert suspects(records) == ["gpu017"]
    top = records[0]
    assert top.node == "gpu017" and top.bad >= DEFAULT.min_bad_jobs and top.p_value < top.threshold
    assert top.ratio and top.ratio > DEFAULT.min_ratio
    assert sum(top.by_state.values()) == top.bad and len(top.bad_jobs) == 10


def test_healthy_fleet_names_nobody_over_20_seeds():
    assert all(suspects(judge(week_of_jobs(seed, factor=1.0), DEFAULT)) == [] for seed in range(20))


def test_partitions_are_compared_apart():
    # One partition's nodes all fail more (say, older GPUs): none of them is singled out.
    jobs = [Job(str(i), "NODE_FAIL" if i % 5 == 0 else "COMPLETED", "old", (f"o{i % 8}",), None) for i in range(800)]
    jobs += [Job(str(i), "NODE_FAIL" if i % 50 == 0 else "COMPLETED", "new", (f"n{i % 8}",), None)
             for i in range(800, 1600)]
    assert suspects(judge(jobs, DEFAULT)) == []


def test_neutral_and_running_jobs_do_not_count():
    jobs = [Job("1", "CANCELLED", "p", ("a",), None), Job("2", "RUNNING", "p", ("a",), None),
            Job("3", "COMPLETED", "p", ("a",), None)]
    (rec,) = judge(jobs, DEFAULT)
    assert (rec.jobs, rec.bad) == (1, 0)


def _exact_sf(a: int, total: int, bad: int, draws: int) -> float:
    num = sum(math.comb(bad, k) * math.comb(total - bad, draws - k) for k in range(a, min(bad, draws) + 1))
    return float(Fraction(num, math.comb(total, draws)))


@pytest.mark.parametrize("a, total, bad, draws", [
    (3, 20, 5, 6), (0, 20, 5, 6), (6, 20, 5, 6), (1, 10, 10, 3), (12, 400, 30, 40), (2, 50, 2, 50),
])
def test_hypergeometric_tail_is_fishers_exact_p(a, total, bad, draws):
    assert hypergeom_sf(a, total, bad, draws) == pytest.approx(_exact_sf(a, total, bad, draws), rel=1e-9, abs=1e-300)


def test_parse_sacct_lines():
    text = ("101|COMPLETED|gpu|gpu[001-002]|2026-11-20T10:00:00\n"
            "102|CANCELLED by 0|gpu|None assigned|Unknown\n"
            "103|NODE_FAIL|gpu|gpu003|2026-11-20T11:00:00\n"
            "104|FAILED|gpu|gpu[1-|2026-11-20T11:00:00\n"
            "short line\n")
    jobs, bad = parse_sacct(text)
    assert [(j.job_id, j.state, j.nodes) for j in jobs] == [("101", "COMPLETED", ("gpu001", "gpu002")),
                                                           ("103", "NODE_FAIL", ("gpu003",))]
    assert bad == 2
