"""The localizer against a synthetic cluster (`gpuhc sweep simulate`): the proof of the planner,
judge and localizer working together, with noise and transients."""

from __future__ import annotations

import collections
import concurrent.futures
import json
import multiprocessing
import os

import pytest
from click.testing import CliRunner

from gpuhc.cli.sweep_cmd import sweep
from gpuhc.sweep.simulate import SimSpec, simulate


# The proof matrix: 1,024 nodes, 3 bad, per (group size, bad links) this many seeds.
MATRIX = {(2, 0): 100, (2, 1): 100, (4, 0): 40, (4, 1): 40, (8, 0): 40, (8, 1): 40}


def _one(key: tuple[int, int, int]) -> tuple[tuple[int, int, int], dict]:
    group_size, bad_links, seed = key
    return key, simulate(SimSpec(nodes=1024, bad=3, bad_links=bad_links, group_size=group_size, seed=seed))


@pytest.fixture(scope="module")
def runs() -> dict[tuple[int, int, int], dict]:
    """Every simulation of the matrix, run once for the tests below (about 380 sweeps of a
    1,024-node cluster; on two processes where there are two cores: ~10 s instead of ~20 s)."""
    keys = [(g, links, seed) for (g, links), n in MATRIX.items() for seed in range(n)]
    workers = min(2, os.cpu_count() or 1)
    if workers == 1:
        return dict(map(_one, keys))
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        return dict(pool.map(_one, keys, chunksize=8))


def check(r: dict) -> None:
    assert r["missed"] == [], r
    assert r["false_accusations"] == [], r
    assert r["false_links"] == [] and len(r["links_found"]) == len(r["bad_links"]), r


def test_1024_nodes_3_bad_every_bad_found_no_good_accused_within_3_rounds_over_20_seeds(runs):
    kinds = set()
    for seed in range(20):
        r = runs[(2, 0, seed)]
        check(r)
        assert r["rounds"] <= 3, (seed, r)
        assert len(r["found"]) == 3
        kinds.update(r["bad_kinds"].values())
    assert kinds == {"slow", "laggy", "broken"}  # every fault kind was exercised


@pytest.mark.parametrize("bad_links", [0, 1])
def test_groups_of_2_over_100_seeds_no_false_accusation_every_bad_node_found(runs, bad_links):
    """The default shape. Seeds 45 and 54 used to accuse a good node (a transient right after
    sharing a group with a bad node, or two transients in a row)."""
    rounds = collections.Counter()
    for seed in range(MATRIX[(2, bad_links)]):
        r = runs[(2, bad_links, seed)]
        check(r)
        rounds[r["rounds"]] += 1
        assert r["rounds"] <= 3, (seed, r)
    assert sum(rounds.values()) >= 100, rounds


@pytest.mark.parametrize("group_size", [4, 8])
@pytest.mark.parametrize("bad_links", [0, 1])
def test_groups_of_4_and_8_over_40_seeds_no_false_accusation_every_bad_node_found(runs, group_size, bad_links):
    """Seeds 7 (groups of 4), 2 and 9 (groups of 4 with a bad link) used to accuse a good
    node; seed 2 also missed the link."""
    for seed in range(MATRIX[(group_size, bad_links)]):
        r = runs[(group_size, bad_links, seed)]
        check(r)
        assert r["rounds"] <= 3, (seed, r)


def test_bisect_strategy_also_converges_without_false_accusations():
    r = simulate(SimSpec(nodes=256, bad=2, group_size=8, seed=5, strategy="bisect", max_rounds=6))
    assert r["ok"] and r["rounds"] <= 5


def test_noise_and_transients_do_not_accuse_good_nodes():
    r = simulate(SimSpec(nodes=256, bad=0, seed=11, noise=0.05, glitch_rate=0.05))
    assert r["transient"], "the glitches should have made some groups fail once"
    assert r["false_accusations"] == [] and r["ok"]


def test_out_of_rounds_leaves_suspects_unresolved_not_accused():
    r = simulate(SimSpec(nodes=64, bad=2, seed=3, max_rounds=1))
    assert r["found"] == [] and r["false_accusations"] == []
    assert set(r["bad_nodes"]) <= set(r["unresolved"])  # named as suspects, not drained
    assert not r["ok"]


def test_cli_json_reports_rounds_jobs_found_and_false_accusations():
    res = CliRunner().invoke(sweep, ["simulate", "--nodes", "128", "--bad", "2", "--seed", "4", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    for key in ("rounds", "jobs", "found", "false_accusations", "missed", "per_round"):
        assert key in doc
    assert doc["found"] == doc["bad_nodes"] and doc["jobs"] == sum(r["groups"] for r in doc["per_round"])


# Nodes only 15-25 % slow (`--slow-bw`), and where the bounds stop catching them. The full table
# (20 seeds per row) is in docs/sweep.md, "Mildly slow nodes"; these pin its edges on 512 nodes.
FLEET_ONLY = {"large_busbw_gbs": None, "small_p95_us": None}


def mild(bw: float, seed: int, **kw) -> dict:
    return simulate(SimSpec(nodes=512, bad=3, seed=seed, kinds=("slow",), slow_bw=(bw, bw), **kw))


def test_mildly_slow_nodes_are_drawn_from_the_given_range():
    r = simulate(SimSpec(nodes=256, bad=3, seed=2, kinds=("slow",), slow_bw=(0.75, 0.85)))
    assert set(r["bad_kinds"].values()) == {"slow"} and len(r["bad_bw"]) == 3
    assert all(0.75 <= bw <= 0.85 for bw in r["bad_bw"].values()), r["bad_bw"]
    assert r["false_accusations"] == []


@pytest.mark.parametrize("seed", range(3))
def test_the_fleet_bound_alone_misses_a_node_20_percent_slow_but_accuses_nobody(seed):
    r = mild(0.80, seed, thresholds=FLEET_ONLY)  # fleet_busbw_fraction 0.7: 0.8 of the median passes
    assert r["found"] == [] and len(r["missed"]) == 3 and r["false_accusations"] == []


@pytest.mark.parametrize("seed", range(3))
def test_the_h100_floor_catches_28_percent_slow_and_the_fleet_bound_40(seed):
    r = mild(0.72, seed)  # built-in h100-sxm: 0.72 x 440 GB/s is well below the 350 GB/s floor
    assert r["ok"], r
    # Fleet only: 0.6 is well below 0.7 of the median. (At 0.65, 2.4 noise sigmas below, one
    # lucky pass in a node's three groups clears it now and then: see the docs table.)
    r = mild(0.60, seed, thresholds=FLEET_ONLY)
    assert r["ok"], r


@pytest.mark.parametrize("seed", range(3))
def test_a_higher_fleet_fraction_catches_20_percent_slow_nodes_at_3_percent_noise(seed):
    r = mild(0.80, seed, thresholds={**FLEET_ONLY, "fleet_busbw_fraction": 0.9})
    assert r["ok"], r


def test_cli_simulates_mildly_slow_nodes_with_site_thresholds():
    res = CliRunner().invoke(sweep, ["simulate", "--nodes", "128", "--bad", "2", "--seed", "4", "--kinds", "slow",
                                     "--slow-bw", "0.75,0.85", "--threshold", "fleet_busbw_fraction=0.9",
                                     "--threshold", "large_busbw_gbs=null", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert set(doc["bad_kinds"].values()) == {"slow"} and doc["found"] == doc["bad_nodes"]
    assert all(0.75 <= bw <= 0.85 for bw in doc["bad_bw"].values())


@pytest.mark.parametrize("args, message", [
    (["--slow-bw", "0.9,0.2"], "need 0 < LO <= HI <= 1"),
    (["--slow-bw", "fast"], "expected LO,HI"),
    (["--kinds", "slow,sleepy"], "unknown fault kind sleepy"),
    (["--threshold", "busbw=3"], "sweep.thresholds.nccl.default.busbw: unknown threshold"),
    (["--threshold", "fleet_busbw_fraction"], "expected KEY=VALUE"),
])
def test_cli_refuses_bad_simulation_options(args, message):
    res = CliRunner().invoke(sweep, ["simulate", "--nodes", "16", *args])
    assert res.exit_code == 2 and message in res.output, res.output


@pytest.mark.parametrize("args, message", [
    (["--nodes", "10", "--bad", "20"], "--bad 20: more bad nodes than the 10 nodes"),
    (["--nodes", "99999999999999999999"], "99999999999999999999 is not in the range 2<=x<=65536"),
    (["--nodes", "1000000"], "1000000 is not in the range 2<=x<=65536"),
    (["--nodes", "5", "--group-size", "8"], "--group-size 8: between 2 and the number of nodes (5)"),
    (["--nodes", "8", "--group-size", "4", "--bad-links", "3"], "--bad-links 3: at most one per first-round group (2"),
])
def test_cli_refuses_impossible_clusters_before_building_them(args, message):
    """Issue 8 item 9: each of these ended in a ValueError, the OOM killer, minutes of work,
    or a plan of 0 jobs reported as "missed 3"."""
    res = CliRunner().invoke(sweep, ["simulate", *args])
    assert res.exit_code == 2 and message in res.output, res.output


def test_slow_bw_help_shows_a_plain_percent_sign():
    res = CliRunner().invoke(sweep, ["simulate", "--help"], terminal_width=200)
    assert "15-25 % slow" in res.output and "%%" not in res.output


def test_the_simulator_refuses_a_spec_the_cli_would_refuse():
    from gpuhc.errors import GpuhcError

    with pytest.raises(GpuhcError, match="--group-size 8"):
        simulate(SimSpec(nodes=5, group_size=8))
