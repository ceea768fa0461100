"""bench/bench_sweep.py compare: every size is held to its target, the worst size is reported,
and a missed target (or nothing to compare) exits 1. Synthetic tables only: no timing here."""

from __future__ import annotations

import copy
import importlib.util
import json
import subprocess
import sys
from tests.helpers.paths import REPO

SAMPLE = REPO / "examples" / "sweep" / "sample-result-1x2-h200.json"  # a real 2x H200 gpuhc run


def bench():
    spec = importlib.util.spec_from_file_location("bench_sweep", REPO / "bench" / "bench_sweep.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def baseline(rows: list[dict], p50_scale: float = 3.0, bw_scale: float = 1.0) -> list[dict]:
    """A torch-like baseline: slower small messages (host-bound loop), the same bandwidth."""
    out = copy.deepcopy(rows)
    for r in out:
        if "p50_us" in r:
            r["p50_us"] *= p50_scale
        r["busbw_gbs"] *= bw_scale
        r["algbw_gbs"] *= bw_scale
    return out


def row(rows: list[dict], nbytes: int) -> dict:
    return next(r for r in rows if r["bytes"] == nbytes)


def test_every_size_meets_its_target_and_the_worst_is_reported():
    ours = json.loads(SAMPLE.read_text())["sizes"]
    base = baseline(ours)
    row(base, 1 << 30)["busbw_gbs"] = row(ours, 1 << 30)["busbw_gbs"] / 0.985  # 1.5 % behind: still within 2 %
    out = bench().verdict(ours, base, wall_s=20.6)
    c = out["checks"]
    assert out["ok"] and c["busbw_within_2pct"] and c["small_p50_no_worse"] and c["full_sweep_under_60s"]
    assert c["busbw_worst_bytes"] == 1 << 30 and abs(c["busbw_worst_ratio"] - 0.985) < 1e-9
    assert len(out["busbw"]) == 4 and len(out["small_p50"]) == 14  # 256 MiB..2 GiB; 8 B..64 KiB
    assert c["small_p50_sizes_worse"] == [] and abs(c["small_p50_worst_ratio"] - 1 / 3) < 1e-9


def test_one_slow_small_size_fails_although_the_median_ratio_is_good():
    ours = json.loads(SAMPLE.read_text())["sizes"]
    base = baseline(ours)
    row(base, 4096)["p50_us"] = row(ours, 4096)["p50_us"] / 1.2  # gpuhc 20 % worse at 4 KiB only
    c = bench().verdict(ours, base)["checks"]
    assert c["small_p50_median_ratio"] < 0.5  # what the old median rule looked at: it would pass
    assert not c["small_p50_no_worse"] and c["small_p50_sizes_worse"] == [4096]
    assert c["small_p50_worst_bytes"] == 4096 and abs(c["small_p50_worst_ratio"] - 1.2) < 1e-9


def test_a_bandwidth_size_below_98_percent_or_missing_fails():
    b = bench()
    ours = json.loads(SAMPLE.read_text())["sizes"]
    base = baseline(ours)
    row(base, 512 << 20)["busbw_gbs"] = row(ours, 512 << 20)["busbw_gbs"] / 0.97
    c = b.verdict(ours, base)["checks"]
    assert not c["busbw_within_2pct"] and c["busbw_worst_bytes"] == 512 << 20
    short = [r for r in ours if r["bytes"] <= 1 << 30]  # a sweep that stopped at 1 GiB
    c = b.verdict(short, baseline(ours))["checks"]
    assert not c["busbw_within_2pct"] and c["busbw_missing_sizes"] == [2 << 30]
    out = b.verdict([], [])
    assert not out["ok"] and out["checks"]["busbw_worst_ratio"] is None  # nothing measured never passes


def test_one_rank_compares_algbw_because_busbw_is_zero():
    ours = json.loads(SAMPLE.read_text())["sizes"]
    for r in ours:
        r["busbw_gbs"] = 0.0
    base = baseline(ours, bw_scale=1.0)
    row(base, 2 << 30)["algbw_gbs"] = row(ours, 2 << 30)["algbw_gbs"] / 0.9
    c = bench().verdict(ours, base)["checks"]
    assert c["bandwidth_metric"] == "algbw" and c["busbw_worst_bytes"] == 2 << 30 and not c["busbw_within_2pct"]


def test_compare_exits_1_on_a_missed_target_and_names_the_size(tmp_path):
    ours = json.loads(SAMPLE.read_text())
    base = {"sizes": baseline(ours["sizes"])}
    row(base["sizes"], 64 << 10)["p50_us"] = row(ours["sizes"], 64 << 10)["p50_us"] / 1.1
    g, t, o = tmp_path / "g.json", tmp_path / "t.json", tmp_path / "c.json"
    g.write_text(json.dumps(ours))
    t.write_text(json.dumps(base))
    cmd = [sys.executable, str(REPO / "bench" / "bench_sweep.py"), "compare", "--gpuhc", str(g), "--torch", str(t)]
    cp = subprocess.run(cmd + ["--gpuhc-wall", "20.6", "--out", str(o)], capture_output=True, text=True, timeout=60)
    assert cp.returncode == 1, cp.stdout + cp.stderr
    assert "p50 8 B..64 KiB: worst ratio 1.100 at 65536 B (target <= 1.0): MISSED" in cp.stdout
    assert json.loads(o.read_text())["checks"]["small_p50_sizes_worse"] == [65536]
    t.write_text(json.dumps({"sizes": baseline(ours["sizes"])}))
    cp = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    t.write_text("{not json")
    cp = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert cp.returncode == 1 and "cannot read sizes from" in cp.stderr and "Traceback" not in cp.stderr
