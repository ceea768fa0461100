"""checks/base.per_gpu_check: the one per-GPU loop ecc, clocks, power, thermal, nvlink and pcie
are declared through. A small check built on it shows the contract each of them relies on."""

from __future__ import annotations

from tests.helpers.snapshots import healthy_node, no_nvml, with_gpu

from gpuhc.checks.base import AER, NVML, Context, GpuJudge, per_gpu_check, result
from gpuhc.model.nvml import GpuReading
from gpuhc.model.result import Action, Status
from gpuhc.model.snapshot import Snapshot

HOT = 80


def _plan(snapshot: Snapshot, ctx: Context, gpus: list[GpuReading]) -> GpuJudge:
    seen: list[int] = []  # what the run computed across its GPUs, handed back as state

    def findings(gpu: GpuReading):
        seen.append(gpu.index)
        if gpu.temp_gpu_c >= HOT:
            return [result("toy", Status.FAIL, f"{gpu.subject} hot", gpu.subject, action=Action.DRAIN_TICKET),
                    result("toy", Status.WARN, f"{gpu.subject} very hot", gpu.subject)]
        return []

    return GpuJudge(
        unsupported=lambda gpu: "no temperature" if gpu.temp_gpu_c is None else None,
        findings=findings,
        clean=lambda gpu: result("toy", Status.PASS, f"{gpu.subject} {gpu.temp_gpu_c} C", gpu.subject),
        first=(result("toy", Status.ERROR, "a setting is wrong"),) if ctx.t("broken") else (),
        state=lambda: {"seen": seen},
    )


TOY = per_gpu_check("toy", _plan, stages=("passive",), defaults={"broken": False}, doc="a test check")


def _lines(out):
    return [(r.status, r.subject, r.message) for r in out.results]


def test_each_gpu_gets_its_na_its_findings_or_one_clean_result_in_gpu_order():
    snap = with_gpu(with_gpu(healthy_node(4), 1, temp_gpu_c=None), 2, temp_gpu_c=91)
    out = TOY.judge(snap, Context(thresholds={}))
    assert _lines(out) == [
        (Status.PASS, "gpu0", "gpu0 62 C"),
        (Status.NA, "gpu1", "gpu1 no temperature"),
        (Status.FAIL, "gpu2", "gpu2 hot"),
        (Status.WARN, "gpu2", "gpu2 very hot"),
        (Status.PASS, "gpu3", "gpu3 62 C"),
    ]
    assert out.state == {"seen": [0, 2, 3]}  # asked after the loop; an n/a GPU is never judged


def test_no_nvml_is_one_na_for_the_node_and_keeps_the_state():
    out = TOY.judge(no_nvml(), Context(thresholds={"broken": True}))
    assert _lines(out) == [(Status.NA, "node", "NVML unavailable")]
    assert out.state is None  # the runner keeps the previous state


def test_the_prolog_judges_the_jobs_gpus_and_node_results_lead():
    out = TOY.judge(healthy_node(8), Context(thresholds={"broken": True}, gpus=[5, 2]))
    assert _lines(out) == [(Status.ERROR, "node", "a setting is wrong"),
                           (Status.PASS, "gpu2", "gpu2 62 C"), (Status.PASS, "gpu5", "gpu5 62 C")]


def test_the_declaration_needs_nvml_unless_told_and_keeps_the_other_fields():
    assert TOY.needs == (NVML,) and TOY.stages == ("passive",) and TOY.defaults == {"broken": False}
    assert TOY.timeout_s == 10.0 and TOY.doc == "a test check"
    assert per_gpu_check("toy2", _plan, needs=(NVML, AER)).needs == (NVML, AER)
