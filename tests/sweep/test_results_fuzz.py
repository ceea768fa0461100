"""Fuzzing the probe-results reader and `analyze` (issue 8): whatever an unprivileged job writes,
the reader gives a checked copy or a named "bad results" error, and `analyze` judges the round
(that group an error at worst) without ever raising."""

from __future__ import annotations

import json
import os
import random
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.helpers.sweep_slurm import good_result
from tests.helpers.sweep_slurm import FakeSlurm, section

from gpuhc.sweep.analyze import analyze_sweep
from gpuhc.sweep.results import BadResults, check_partial, check_result
from gpuhc.sweep.store import SweepStore, load_group_result, results_path, write_group_result
from gpuhc.sweep.submit import submit_sweep

scalars = st.none() | st.booleans() | st.integers(-(2 ** 70), 2 ** 70) | st.floats() | st.text(max_size=12)
json_values = st.recursive(scalars, lambda ch: st.lists(ch, max_size=4) | st.dictionaries(st.text(max_size=10), ch,
                                                                                           max_size=4), max_leaves=25)
KEYS = ["sizes", "timeouts", "errors", "ranks", "nodes", "nranks", "fault_hook", "complete", "backend", "duration_s"]
ROW_KEYS = ["bytes", "busbw_gbs", "p95_us", "time_us", "correct", "node_time_us", "rank_time_us", "iters"]


@st.composite
def near_valid(draw):
    """A real-looking results file with a few values swapped for random JSON."""
    doc = good_result("r0g0000", ["n1", "n2"])
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.booleans()) and isinstance(doc["sizes"], list) and doc["sizes"]:
            row = doc["sizes"][draw(st.integers(0, len(doc["sizes"]) - 1))]
            if isinstance(row, dict):
                row[draw(st.sampled_from(ROW_KEYS))] = draw(json_values)
        else:
            doc[draw(st.sampled_from(KEYS))] = draw(json_values)
    return doc


def _checked_or_named(doc, check):
    try:
        out = check(doc, "f.json")
    except BadResults as e:
        assert str(e).startswith("bad results: f.json") and "\n" not in str(e)
        return None
    json.dumps(out, allow_nan=False)  # finite numbers only, all of it JSON
    return out


@settings(max_examples=300, deadline=None)
@given(st.one_of(json_values, near_valid()))
def test_result_checker_returns_a_clean_copy_or_names_the_fault(doc):
    out = _checked_or_named(doc, check_result)
    if out is not None:
        assert all(isinstance(r["bytes"], int) and r["bytes"] > 0 for r in out["sizes"])
        assert all(isinstance(n, str) and n.isprintable() for t in out["timeouts"] for n in t["silent_nodes"])
        assert all(e.isprintable() for e in out["errors"])


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_partial_checker_returns_a_clean_copy_or_names_the_fault(doc):
    out = _checked_or_named(doc, check_partial)
    if out is not None:
        assert 0 <= out["rank"] < out["nranks"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(near_valid().map(json.dumps), json_values.map(json.dumps),
                 st.integers(1, 300_000).map(lambda d: "[" * d + "]" * d),
                 st.binary(max_size=64).map(lambda b: b.decode("latin-1"))))
def test_analyze_always_judges_the_round(text):
    with tempfile.TemporaryDirectory() as tmp:
        store = SweepStore(os.path.join(tmp, "state"), os.path.join(tmp, "results"))
        sid = submit_sweep(section(), store, cli=FakeSlurm().cli(), now=1000.0)["sweep_id"]
        path = results_path(store.results_dir, sid, "r0g0000")
        with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write(text)
        write_group_result(store.results_dir, sid, "r0g0001", good_result("r0g0001", ["n4", "n5"]))
        out = analyze_sweep(section(), store, cli=FakeSlurm().cli(), now=2000.0)
        assert out["verdicts"]["r0g0000"]["status"] in ("pass", "fail", "error")
        assert out["verdicts"]["r0g0001"]["status"] == "pass"
        assert all(line.isprintable() for line in out["lines"])


@settings(max_examples=100, deadline=None)
@given(st.lists(json_values, min_size=1, max_size=4), st.randoms(use_true_random=False))
def test_rank_files_merge_or_name_the_bad_one(parts, rnd: random.Random):
    with tempfile.TemporaryDirectory() as tmp:
        for r, doc in enumerate(parts):
            write_group_result(tmp, "s1", "g0", doc, rank=r)
        try:
            res = load_group_result(tmp, "s1", "g0")
        except BadResults as e:
            assert "bad results: " in str(e)
            return
        assert res is None or isinstance(res["sizes"], list)
