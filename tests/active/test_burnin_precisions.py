"""The burn-in in every precision (gpuhc/active/burnin.py): the timed precisions feed gpu-speed,
the correctness pass after them (fp16, fp32, fp64 by default) gets the same three checks and
feeds nothing else; its settings are validated when the config loads, with file and line, and a
config written before them gets the defaults. The worker's answers are faked at the hardware
boundary (tests/helpers/active_results.py); the GPU side runs in tests/active/test_gpu.py."""

from __future__ import annotations

import pytest

from gpuhc.active import burnin, plan, speed
from gpuhc.active.registry import CHECK, TASK, correctness_pass
from gpuhc.config.load import load_config
from gpuhc.model.result import Action, Status
from tests.helpers.active_results import healthy_burnin
from tests.helpers.cli import gpuhc, one_line_error

BURN = CHECK["burn-in"].defaults
SPEED = CHECK["gpu-speed"].defaults


def _by_subject(results) -> dict:
    return {r.subject: r for r in results}


def test_a_gpu_whose_fp64_product_differs_from_its_siblings_fails_naming_gpu_and_precision():
    data = healthy_burnin(3)
    data["checked"]["fp64"]["gpus"]["gpu2"]["hash"] = "fp64-54409853867a0001"
    res = _by_subject(burnin.judge(data, BURN))
    assert res["gpu2"].status is Status.FAIL and res["gpu2"].action is Action.DRAIN_TICKET
    assert res["gpu2"].message == ("gpu2: computes wrong numbers: fp64 result differs bitwise from 2 identical "
                                   "sibling GPUs")
    for s in ("gpu0", "gpu1"):
        assert res[s].status is Status.PASS
        assert res[s].message.startswith(f"{s}: bf16 686 TFLOP/s, tf32 357 TFLOP/s, fp16, fp32, fp64 checked; ")


@pytest.mark.parametrize("dt, field, value, words", [
    ("fp64", "ref_rel_err", 3.0e-9, "fp64 result off the float64 reference by 3e-09 (limit 1e-10)"),
    ("fp32", "hash_changes", 2, "fp32 result changed in 2 of"),
    ("fp16", "ref_nonfinite", 4, "fp16 result has 4 NaN/Inf values"),
])
def test_the_pass_gets_the_reference_and_stability_checks_too(dt, field, value, words):
    data = healthy_burnin(1)
    data["checked"][dt]["gpus"]["gpu0"][field] = value
    (r,) = burnin.judge(data, BURN)
    assert r.status is Status.FAIL and words in r.message, r.message


def test_a_healthy_fp64_reference_error_passes_with_room():
    # the CPU's float64 against 80-bit long double gave 0 (tests/helpers/active_results.py); a
    # GPU's other summation order leaves a few units of 1e-16, far below the limit
    data = healthy_burnin(1)
    data["checked"]["fp64"]["gpus"]["gpu0"]["ref_rel_err"] = 4.0e-16
    assert [r.status for r in burnin.judge(data, BURN)] == [Status.PASS]


def test_the_pass_rates_never_reach_gpu_speed():
    # gpu0's fp32 and fp64 in the pass are a tenth of the expectation and of gpu1's: a speed
    # verdict on them would fail it as slow and as a straggler; gpu-speed judges the timed only.
    data = healthy_burnin(2)
    for dt in ("fp32", "fp64"):
        data["checked"][dt]["gpus"]["gpu0"]["tflops"] = 5.0
    thr = dict(SPEED, tflops={"bf16": 680.0, "tf32": 350.0, "fp32": 50.0, "fp64": 60.0})
    res = speed.judge(data, thr)
    assert [r.status for r in res] == [Status.PASS, Status.PASS], [r.message for r in res]
    assert all(set(r.value) == {"bf16", "tf32", "nvml"} for r in res)
    # the same numbers timed would have failed: the judge reads the timed section, not the names
    timed = healthy_burnin(2, dtypes=("bf16", "fp32"), checks=())
    timed["dtypes"]["fp32"]["gpus"]["gpu0"]["tflops"] = 5.0
    assert _by_subject(speed.judge(timed, thr))["gpu0"].status is Status.FAIL


def test_a_precision_named_in_both_lists_is_timed_only_and_the_pass_can_be_off():
    p = plan.build("epilog", {"dtypes": ["bf16", "fp64"]}).tasks[1].params
    assert p["dtypes"] == ["bf16", "fp64"] and correctness_pass(p) == ["fp16", "fp32"]
    shipped = plan.build("epilog", {}).tasks[1]
    assert correctness_pass(shipped.params) == ["fp16", "fp32", "fp64"] and shipped.params["check_n"] == 4096
    for off in ({"check_dtypes": []}, {"check_dtypes": None}, {"check_s": 0.0}, {"check_s": None}):
        t = plan.build("epilog", off).tasks[1]
        assert correctness_pass(t.params) == [], off
        # the deadline is sized for what runs: the pass adds its seconds only when on
        assert t.estimate_s(8) < shipped.estimate_s(8) == TASK["burnin"].estimate(shipped.params, 8)


def _config(tmp_path, text: str) -> str:
    path = tmp_path / "gpuhc.yaml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("text, where", [
    # load_config's file, line and key for each bad setting: tests/active/test_registry.py
    ("active:\n  check_dtypes:\n    - fp16\n    - fp65\n", ":4: active.check_dtypes: unknown dtype 'fp65'"),
    ("active:\n  check_s: -1\n", ":2: active.check_s: must be >= 0"),
])
def test_bad_pass_settings_exit_2_naming_file_line_and_key(tmp_path, text, where):
    path = _config(tmp_path, text)
    assert f"{path}{where}" in one_line_error(gpuhc("config", "validate", "--config", path))


def test_a_config_without_the_pass_settings_gets_the_defaults(tmp_path):
    # a config written before the pass existed: its own burn-in settings stay, the pass is on
    cfg = load_config(_config(tmp_path, "active:\n  dtypes: [bf16]\n  epilog:\n    burnin_s: 3\n"))
    active = cfg.section("active")
    assert active["dtypes"] == ["bf16"] and active["check_dtypes"] == ["fp16", "fp32", "fp64"]
    assert active["check_s"] == 0.25 and active["check_n"] == 4096
    p = plan.build("epilog", active).tasks[1].params
    assert p["seconds"] == 3.0 and correctness_pass(p) == ["fp16", "fp32", "fp64"]
    # null and [] are accepted and mean off
    off = load_config(_config(tmp_path, "active:\n  check_dtypes: null\n  check_s: null\n")).section("active")
    assert correctness_pass(plan.build("epilog", off).tasks[1].params) == []
