"""Sweep thresholds per GPU model: the ranks' NVML names in a results file pick a GPU profile;
H100 and H200 groups get the built-in absolute bounds, other models (A100, unknown) are judged
against their own fleet only, and groups of different models never share a fleet."""

from __future__ import annotations

import json

import pytest

from gpuhc.config.load import load_config
from gpuhc.errors import ConfigError
from gpuhc.text.schema import defaults
from gpuhc.sweep.campaign import judge_round, new_record
from gpuhc.sweep.judge import FAIL, PASS
from gpuhc.sweep.plan import Group
from gpuhc.sweep.settings import SCHEMA, gpu_profile, sweep_section, thresholds_for, validate_thresholds
from tests.helpers.paths import REPO

H100, H200, A100 = "NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA A100-SXM4-80GB"
SAMPLE = REPO / "examples" / "sweep" / "sample-result-1x2-h200.json"


def result(gpu: str | None, large_busbw: float, p95: float = 40.0) -> dict:
    ranks = [{"rank": i, "node": f"n{i}", **({"gpu": gpu} if gpu else {})} for i in range(2)]
    rows = [{"bytes": 1024, "time_us": p95, "p95_us": p95, "busbw_gbs": 0.05, "correct": True},
            {"bytes": 16 << 20, "time_us": 100.0, "busbw_gbs": large_busbw * 0.6, "correct": True},
            {"bytes": 2 << 30, "time_us": 9000.0, "busbw_gbs": large_busbw, "correct": True}]
    return {"backend": "nccl", "ranks": ranks, "sizes": rows, "timeouts": [], "errors": []}


def judge(results: dict[str, dict], section: dict | None = None) -> dict:
    section = section or defaults(SCHEMA)
    groups = [Group(gid, [f"{gid}a", f"{gid}b"], 0, "probe", "", 8) for gid in results]
    return judge_round(new_record("s", groups, section, now=0.0), results, section, {})


@pytest.mark.parametrize("names, profile", [
    ([H100, H100], "h100-sxm"), ([H200], "h200-sxm"), ([A100], "a100-sxm"),
    (["NVIDIA GH200 480GB"], "generic"), ([], "generic"),
])
def test_the_ranks_gpu_names_pick_the_profile(names, profile):
    res = {"ranks": [{"rank": i, "gpu": n} for i, n in enumerate(names)]}
    assert gpu_profile(res, "nccl") == profile
    assert gpu_profile(res, "mpi") is None  # host buffers: no GPU, no model


def test_absolute_bounds_only_for_models_with_a_reference_number():
    for profile in ("h100-sxm", "h200-sxm"):
        th = thresholds_for({}, "nccl", "2x8", "", profile)
        assert (th["large_busbw_gbs"], th["small_p95_us"]) == (350.0, 250.0)
    for profile in ("a100-sxm", "generic", "b200-sxm"):  # b200-sxm: a profile with no numbers here
        th = thresholds_for({}, "nccl", "2x8", "", profile)
        assert th["large_busbw_gbs"] is None and th["small_p95_us"] is None and th["medium_busbw_gbs"] is None
        assert th["fleet_busbw_fraction"] == 0.7  # the fleet still judges
    assert thresholds_for({}, "mpi", "2x1", "", "h100-sxm")["large_busbw_gbs"] is None


def test_site_blocks_merge_default_then_profile_then_shape():
    table = {"nccl": {"default": {"large_busbw_gbs": 300.0}, "a100-sxm": {"large_busbw_gbs": 150.0},
                      "2x8": {"small_p95_us": 90.0}, "2x8-cross": {"large_busbw_gbs": 120.0}}}
    assert thresholds_for(table, "nccl", "2x8", "", "a100-sxm")["large_busbw_gbs"] == 150.0
    assert thresholds_for(table, "nccl", "2x8", "cross", "a100-sxm")["large_busbw_gbs"] == 120.0
    assert thresholds_for(table, "nccl", "2x8", "", "h100-sxm")["large_busbw_gbs"] == 300.0  # config default wins
    assert thresholds_for(table, "nccl", "2x8", "", "generic")["small_p95_us"] == 90.0
    table["nccl"]["a100-sxm/2x8"] = {"large_busbw_gbs": 170.0}  # a profile's shape wins over the plain shape
    table["nccl"]["a100-sxm/2x8-cross"] = {"large_busbw_gbs": 160.0}
    table["nccl"]["2x8"]["large_busbw_gbs"] = 350.0
    assert thresholds_for(table, "nccl", "2x8", "", "a100-sxm")["large_busbw_gbs"] == 170.0
    assert thresholds_for(table, "nccl", "2x8", "cross", "a100-sxm")["large_busbw_gbs"] == 160.0
    assert thresholds_for(table, "nccl", "2x8", "", "h100-sxm")["large_busbw_gbs"] == 350.0
    assert thresholds_for(table, "nccl", "2x8", "cross", "h100-sxm")["large_busbw_gbs"] == 120.0
    validate_thresholds(table)
    for bad in ("a100", "a100-sxm/2by8", "a100/2x8", "a100-sxm/"):
        with pytest.raises(ConfigError, match=rf"sweep\.thresholds\.nccl\.{bad}.*GPU profile name"):
            validate_thresholds({"nccl": {bad: {"large_busbw_gbs": 1.0}}})


def test_a_healthy_a100_fleet_passes_where_h100_numbers_would_fail_it():
    a100 = judge({f"g{i}": result(A100, 190.0 + i) for i in range(4)})
    assert {v.status for v in a100.values()} == {PASS}
    assert a100["g0"].metrics["profile"] == "a100-sxm"
    h100 = judge({f"g{i}": result(H100, 190.0 + i) for i in range(4)})
    assert {v.status for v in h100.values()} == {FAIL}
    assert "busbw 190.0 GB/s < 350 at 2 GiB" in h100["g0"].reasons
    unknown = judge({f"g{i}": result(None, 190.0 + i) for i in range(4)})  # no names: generic, fleet only
    assert {v.status for v in unknown.values()} == {PASS} and unknown["g0"].metrics["profile"] == "generic"


def test_models_never_share_a_fleet():
    """Four H100 groups at 440 GB/s and four A100 groups at 190: in one fleet the A100 groups
    would fall below 0.7x the median; per model, all pass, and a slow A100 group still fails."""
    results = {**{f"h{i}": result(H100, 440.0) for i in range(4)}, **{f"a{i}": result(A100, 190.0) for i in range(4)}}
    results["a9"] = result(A100, 100.0)
    v = judge(results)
    assert all(v[g].status == PASS for g in results if g != "a9"), {g: v[g].reasons for g in v}
    assert v["a9"].status == FAIL and v["a9"].reasons[-1] == "busbw 100.00 GB/s < 0.7x fleet 190.00 at 2 GiB"


def test_config_without_thresholds_keeps_the_per_model_layer(tmp_path):
    """The schema's default is empty, so a config that says nothing about thresholds does not
    carry the H100 numbers as a site setting above the model layer."""
    cfg = tmp_path / "gpuhc.yaml"
    cfg.write_text("sweep:\n  group_size: 2\n")
    section = sweep_section(load_config(str(cfg)))
    assert section["thresholds"] == {}
    assert {v.status for v in judge({f"g{i}": result(A100, 190.0) for i in range(4)}, section).values()} == {PASS}


def test_the_h200_sample_run_is_judged_with_the_h200_numbers():
    res = json.loads(SAMPLE.read_text())
    assert gpu_profile(res, "nccl") == "h200-sxm"
    v = judge({"g0": res})["g0"]
    assert v.status == FAIL and v.reasons == ["busbw 339.2 GB/s < 350 at 2 GiB"]  # one host is not multi-node
