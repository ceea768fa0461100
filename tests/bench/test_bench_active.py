"""bench/bench_active.py's bookkeeping without a GPU: the measuring functions (the GPU boundary)
are replaced by fakes returning chosen rates, so these tests check what the bench does with
them: the sustained burn-in is compared with sustained torch per GPU, the sides alternate
A B B A, every ratio is checked against its mark, and `compare` exits 1 when any is missed.
The bench's numbers themselves come from the GPU machine (docs/verification-active.md).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys

import pytest
from tests.helpers.paths import REPO

BENCH = os.path.join(REPO, "bench", "bench_active.py")


@pytest.fixture
def bench(monkeypatch):
    spec = importlib.util.spec_from_file_location("bench_active_under_test", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    calls: list[str] = []
    rates = {"burnin": 660.0, "torch_sustained": 670.0, "gemm": 740.0, "torch_burst": 724.0, "copy": 4260.0,
             "torch_copy": 4268.0, "allreduce": 330.0, "torch_allreduce": 331.0}
    devices = [{"cuda": i, "subject": f"gpu{i}", "name": "NVIDIA H200", "pci": f"0000:{i:02x}:00.0"} for i in range(2)]

    def burn(n, dtype, seconds, devs):
        calls.append("burnin")
        return {d["cuda"]: rates["burnin"] for d in devs}

    def torch_sustained(n, dtype, seconds, ordinals):
        calls.append("torch")
        return {i: rates["torch_sustained"] for i in ordinals}

    monkeypatch.setattr(mod, "_devices", lambda: devices)
    monkeypatch.setattr(mod, "_burnin_sustained", burn)
    monkeypatch.setattr(mod, "_torch_sustained", torch_sustained)
    monkeypatch.setattr(mod, "_gpuhc_gemm_tflops", lambda n, dt, it: [rates["gemm"]] * it)
    monkeypatch.setattr(mod, "_torch_matmul_tflops", lambda n, dt, it: [rates["torch_burst"]] * it)
    monkeypatch.setattr(mod, "_gpuhc_copy", lambda mib, devs: rates["copy"])
    monkeypatch.setattr(mod, "_torch_copy", lambda mib: rates["torch_copy"])
    monkeypatch.setattr(mod, "_gpuhc_allreduce", lambda mib, it, devs: rates["allreduce"])
    monkeypatch.setattr(mod, "_torch_allreduce", lambda mibs, it, world: {m: rates["torch_allreduce"] for m in mibs})
    mod.fake_rates, mod.fake_calls = rates, calls
    return mod


def _main(bench, monkeypatch, tmp_path, *extra: str) -> tuple[int, dict]:
    out = tmp_path / "bench.jsonl"
    monkeypatch.setattr(sys, "argv", ["bench_active.py", "compare", "--json", str(out), *extra])
    rc = bench.main()
    return rc, json.loads(out.read_text().splitlines()[-1])


def test_compare_meets_every_mark_and_exits_0(bench, monkeypatch, tmp_path, capsys):
    rc, doc = _main(bench, monkeypatch, tmp_path)
    assert rc == 0 and doc["targets_missed"] == []
    b = doc["burnin_bf16"]
    assert b["burnin_reported_tflops"] == 660.0 and b["torch_sustained_tflops"] == 670.0
    assert b["ratio"] == pytest.approx(660 / 670, abs=1e-4)
    assert b["per_gpu"]["0"]["burnin"] == [660.0, 660.0]  # two rounds, per GPU
    # sides alternate A B, B A per dtype: heat and the power cap hit both alike
    assert bench.fake_calls == ["burnin", "torch", "torch", "burnin"] * 2
    text = capsys.readouterr().out
    assert "burn-in bf16 8192^3 sustained x2 (TFLOP/s)" in text and "all 7 targets met" in text


def test_a_burn_in_more_than_5_percent_below_sustained_torch_fails_compare(bench, monkeypatch, tmp_path, capsys):
    bench.fake_rates["burnin"] = 0.94 * bench.fake_rates["torch_sustained"]
    rc, doc = _main(bench, monkeypatch, tmp_path, "--dtypes", "bf16")
    assert rc == 1
    assert [m.split(" 0.")[0] for m in doc["targets_missed"]] == ["burn-in bf16 8192^3 sustained x2 (TFLOP/s)"]
    assert "TARGETS MISSED (1 of 5)" in capsys.readouterr().out


def test_all_reduce_must_be_within_3_percent_either_way(bench, monkeypatch, tmp_path):
    bench.fake_rates["allreduce"] = 1.05 * bench.fake_rates["torch_allreduce"]
    rc, doc = _main(bench, monkeypatch, tmp_path, "--dtypes", "bf16", "--nccl-mib", "1024")
    assert rc == 1 and doc["targets_missed"] and doc["targets_missed"][0].startswith("all-reduce 1024 MiB x2")


def test_one_gpu_skips_the_all_reduce_mark(bench, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(bench, "_devices", lambda: [{"cuda": 0, "subject": "gpu0", "name": "NVIDIA H100 80GB HBM3"}])
    rc, doc = _main(bench, monkeypatch, tmp_path, "--dtypes", "tf32", "--rounds", "3")
    assert rc == 0 and not any(k.startswith("nccl_") for k in doc)
    assert bench.fake_calls == ["burnin", "torch", "torch", "burnin", "burnin", "torch"]
    assert "all-reduce: skipped, one GPU" in capsys.readouterr().out
