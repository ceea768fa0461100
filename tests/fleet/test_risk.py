"""`gpuhc fleet risk`: the interruption probability reproduces the published figures, agrees with
a simulation of independent GPU failures, and the CLI prints both JSON and a table."""

from __future__ import annotations

import json
import math
import random

import pytest
from click.testing import CliRunner

from gpuhc.cli import cli
from gpuhc.fleet.risk import Risk, interruption_probability, rate_for, scaling_table

MONTH_H = 30 * 24


def test_reproduces_19_percent_at_256_and_57_percent_at_1024_gpus():
    # Databricks (2024) models each GPU at 1 % annualised failure rate: 19 % for 256 GPUs over
    # 30 days, 57 % for 1,024 (docs/repair.md cites it).
    p = 0.01 / (365 * 24)
    assert interruption_probability(p, 256, MONTH_H) == pytest.approx(0.19, abs=0.005)
    assert interruption_probability(p, 1024, MONTH_H) == pytest.approx(0.57, abs=0.005)
    # And the other way round: the rate that gives 19 % at 256 gives 1 - 0.81^4 at 1,024.
    q = rate_for(0.19, 256, MONTH_H)
    assert interruption_probability(q, 1024, MONTH_H) == pytest.approx(1 - 0.81 ** 4, rel=1e-9)
    assert round(interruption_probability(q, 1024, MONTH_H) * 100) == 57


def test_agrees_with_a_simulation_of_independent_failures():
    """Each GPU fails after an exponential time with the hourly hazard -log(1-p); the job is
    interrupted when the first of its GPUs fails before it ends."""
    rng = random.Random(7)
    p, gpus, hours, trials = 2e-6, 512, 240.0, 20000
    hazard = -math.log1p(-p) * gpus
    hits = sum(1 for _ in range(trials) if rng.expovariate(hazard) < hours)
    expect = interruption_probability(p, gpus, hours)
    sigma = math.sqrt(expect * (1 - expect) / trials)
    assert abs(hits / trials - expect) < 4 * sigma


def test_edges_and_bad_values():
    assert interruption_probability(0.0, 1000, 1000) == 0.0
    assert interruption_probability(1.0, 1, 1) == 1.0
    assert 0 < interruption_probability(1e-12, 1, 1) < 2e-12  # no rounding to zero
    for args in ((-0.1, 1, 1), (0.1, 0, 1), (0.1, 1, 0), (float("nan"), 1, 1)):
        with pytest.raises(ValueError):
            interruption_probability(*args)
    assert [n for n, _ in scaling_table(1e-6, 256, 10)] == [64, 128, 256, 512, 1024]
    probs = [p for _, p in scaling_table(1e-6, 256, 10)]
    assert probs == sorted(probs)


def test_lost_gpu_hours_and_young_interval():
    r = Risk(1024, 720.0, 1e-6, "given", checkpoint_min=30.0, restart_min=10.0, checkpoint_cost_min=2.0)
    failures = 1024 * 720 * 1e-6
    assert r.expected_failures == pytest.approx(failures)
    assert r.lost_gpu_hours == pytest.approx(failures * 1024 * (15 + 10) / 60)
    # Young: sqrt(2 * cost * MTBF), MTBF of the job = 1 / (N p) hours.
    assert r.young_interval_min == pytest.approx(math.sqrt(2 * 2.0 * 60.0 / (1024 * 1e-6)))
    assert Risk(8, 1.0, 0.0, "given", None, 0.0, 1.0).young_interval_min is None


def test_cli_json_and_table():
    p = rate_for(0.19, 256, MONTH_H)
    res = CliRunner().invoke(cli, ["fleet", "risk", "--gpus", "1024", "--hours", str(MONTH_H), "--rate", repr(p),
                                   "--checkpoint-min", "30", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert round(doc["interruption_probability"], 2) == 0.57
    assert doc["expected_lost_gpu_hours"] > 0
    assert {s["gpus"]: round(s["interruption_probability"], 2) for s in doc["scaling"]}[256] == 0.19
    table = CliRunner().invoke(cli, ["fleet", "risk", "--gpus", "256", "--hours", str(MONTH_H), "--rate", repr(p)])
    assert table.exit_code == 0 and "19.0%" in table.output and "57.0%" in table.output


@pytest.mark.parametrize("args", [
    ["--gpus", "8", "--hours", "1"],  # neither --rate nor --from-history
    ["--gpus", "8", "--hours", "1", "--rate", "1e-6", "--from-history"],
    ["--gpus", "0", "--hours", "1", "--rate", "1e-6"],
    ["--gpus", "8", "--hours", "-1", "--rate", "1e-6"],
    ["--gpus", "8", "--hours", "1", "--rate", "2"],
])
def test_cli_usage_errors_exit_2(args):
    res = CliRunner().invoke(cli, ["fleet", "risk", *args])
    assert res.exit_code == 2 and "Traceback" not in res.output
