"""bench/burnin_device.py's bookkeeping without a GPU: the worker's burn-in answers are faked at
the hardware boundary (tests/helpers/active_results.py, in the shape the real worker reports), so
these tests hold what the device step does with them: a healthy machine is ok, and each failure it
is there to show (a hash that changes between runs, identical GPUs that disagree, a pass that
computes the wrong precisions) makes it exit 1 and say which. Its numbers come from the lent
machine (bench/device_batch.sh)."""

from __future__ import annotations

import importlib.util
import json
import os
import sys

import pytest
from tests.helpers.active_results import healthy_burnin
from tests.helpers.paths import REPO


@pytest.fixture
def device(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(os.path.join(REPO, "bench"))
    spec = importlib.util.spec_from_file_location("burnin_device_under_test", os.path.join(REPO, "bench",
                                                                                           "burnin_device.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    answers: list[dict] = []

    def fake_run(params, timeout_s):
        data = healthy_burnin(4, tuple(params["dtypes"]), tuple(params["check_dtypes"]))
        for dd in [*data["dtypes"].values(), *data.get("checked", {}).values()]:
            dd["phases_s"] = {"setup": 0.05, "calibrate": 0.02, "loop": 0.26, "check": 0.03}
        change = answers.pop(0) if answers else None
        if change:
            change(data)
        return data, 6.5 if data.get("checked") else 5.0

    monkeypatch.setattr(mod, "run", fake_run)
    monkeypatch.setattr(sys, "argv", ["burnin_device.py", "--out", str(tmp_path)])
    mod.answers = answers
    mod.report = lambda: json.loads((tmp_path / "burnin-precisions.json").read_text())
    return mod


def test_a_healthy_machine_records_every_precision_and_what_the_pass_adds(device):
    assert device.main() == 0
    r = device.report()
    assert r["ok"] and list(r["precisions"]) == ["bf16", "tf32", "fp16", "fp32", "fp64"]
    assert [r["precisions"][d]["pass"] for d in ("tf32", "fp64")] == ["timed", "check"]
    assert r["precisions"]["fp64"]["n"] == 4096 and r["precisions"]["bf16"]["n"] == 8192
    assert r["precisions"]["fp64"]["gpus"]["gpu3"]["tflops"] == [60.4, 60.4]
    assert r["added_s"]["wall_vs_pass_off"] == 1.5 and r["added_s"]["pass_phases_per_run"] == [1.08, 1.08]


def _fp64_hash(gpu: str, value: str):
    def change(data):
        data["checked"]["fp64"]["gpus"][gpu]["hash"] = value
    return change


@pytest.mark.parametrize("changes, words", [
    ([None, _fp64_hash("gpu2", "fp64-0000000000000001")], "fp64: a GPU's hash differs between the two runs"),
    ([_fp64_hash("gpu1", "x"), _fp64_hash("gpu1", "x")], "fp64: identical GPUs gave different hashes"),
    ([lambda d: d["checked"].pop("fp32")], "the pass computed ['fp16', 'fp64']"),
])
def test_each_failure_it_measures_exits_1_and_says_which(device, capsys, changes, words):
    device.answers.extend(changes)
    assert device.main() == 1
    r = device.report()
    assert not r["ok"] and any(words in p for p in r["problems"]), r["problems"]
    assert capsys.readouterr().out.splitlines()[-1].startswith("FAILED: ")
