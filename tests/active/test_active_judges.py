"""The active checks' judges, fed raw worker measurements: healthy numbers pass, and every fault
is injected where results come back from the worker (a wrong checksum, a slow GPU, a corrupt
copy, a wrong all-reduce sum...) and must fail with the right message and action.

The ``healthy_*`` builders give the shape the real worker returns, with the *sustained* numbers a
healthy 1x H100 80GB HBM3 gave in docs/verification.md run 8 (burn-in bf16 686 / tf32 357 TFLOP/s
at the 700 W cap, HBM copy 3006 GB/s, host link 55.0 / 55.1 GB/s) so that the H100 profile's
thresholds are exercised where real GPUs land, not far above them. Multi-GPU numbers (P2P, NCCL)
come from the 2x/4x H200 runs (no multi-GPU H100 was measured). tests/active/test_orchestrate.py reuses
them for its fake worker.
"""

from __future__ import annotations

import copy

import pytest

from gpuhc.active import burnin, hbm, hostlink, memtest, nccl_local, p2p, speed, topology
from gpuhc.active.orchestrate import outcome_result
from gpuhc.active.supervise import Outcome
from gpuhc.active.thresholds import thresholds_for
from gpuhc.model.result import Action, Status
from tests.helpers.active_results import healthy_burnin, healthy_hbm, healthy_hostlink, healthy_memtest, healthy_nccl, healthy_p2p, healthy_topology
from tests.helpers.active_results import H100_RUN8

SUBJECTS = ("gpu0", "gpu1")
THR = thresholds_for("h100-sxm")

H200_RUN7_LOW = {"bf16": 672.0, "tf32": 345.0, "hbm": 4241.0, "h2d": 55.5, "d2h": 55.3}  # lowest of 4 GPUs


def _by_subject(results):
    return {r.subject: r for r in results}


def test_every_fail_drains_and_no_warn_does():
    """The house rule, over a batch of injected faults: FAIL always drains, WARN never does."""
    bad = healthy_burnin(3)
    bad["dtypes"]["bf16"]["gpus"]["gpu2"]["hash"] = "deadbeef"
    slow = healthy_hbm()
    slow["gpus"]["gpu1"]["gbps"] = 1000.0
    results = (burnin.judge(bad, THR["burn-in"]) + hbm.judge(slow, THR["hbm"])
               + speed.judge(healthy_burnin(), THR["gpu-speed"]))
    assert any(r.status is Status.FAIL for r in results)
    for r in results:
        assert r.action.drains == (r.status is Status.FAIL), r


# ------------------------------------------------------------------------------- burn-in


def test_burnin_healthy_gpus_pass_with_their_speed():
    res = burnin.judge(healthy_burnin(), THR["burn-in"])
    assert [r.status for r in res] == [Status.PASS, Status.PASS]
    assert "bf16 686 TFLOP/s" in res[0].message and "bitwise stable" in res[0].message


def test_burnin_minority_checksum_fails_that_gpu_only():
    data = healthy_burnin(3)
    data["dtypes"]["bf16"]["gpus"]["gpu1"]["hash"] = "0000000000000bad"
    res = _by_subject(burnin.judge(data, THR["burn-in"]))
    assert res["gpu1"].status is Status.FAIL and res["gpu1"].action is Action.DRAIN_TICKET
    assert "differs bitwise from 2 identical sibling GPUs" in res["gpu1"].message
    assert res["gpu0"].status is Status.PASS and res["gpu2"].status is Status.PASS


def test_burnin_two_gpus_that_disagree_both_fail():
    data = healthy_burnin(2)
    data["dtypes"]["tf32"]["gpus"]["gpu0"]["hash"] = "1"
    res = _by_subject(burnin.judge(data, THR["burn-in"]))
    for s in SUBJECTS:
        assert res[s].status is Status.FAIL and "cannot tell which GPU is wrong" in res[s].message


def test_burnin_different_models_are_not_compared_bitwise():
    data = healthy_burnin(2)
    data["dtypes"]["bf16"]["gpus"]["gpu1"].update(hash="other", name="NVIDIA H100 PCIe", sm_count=114)
    assert all(r.status is Status.PASS for r in burnin.judge(data, THR["burn-in"]))


def test_burnin_result_changing_under_load_fails():
    data = healthy_burnin(1)
    data["dtypes"]["bf16"]["gpus"]["gpu0"].update(hash_changes=3, first_change_iter=96)
    (r,) = burnin.judge(data, THR["burn-in"])
    assert r.status is Status.FAIL
    assert "bf16 result changed in 3 of 175 checked iterations (first at iteration 96)" in r.message


@pytest.mark.parametrize("field,value,text", [
    ("ref_rel_err", 0.2, "off the float64 reference by 0.2 (limit 0.01)"),
    ("ref_nonfinite", 4, "4 NaN/Inf values"),
])
def test_burnin_wrong_numbers_against_float64_fail(field, value, text):
    data = healthy_burnin(1)
    data["dtypes"]["bf16"]["gpus"]["gpu0"][field] = value
    (r,) = burnin.judge(data, THR["burn-in"])
    assert r.status is Status.FAIL and text in r.message and r.action is Action.DRAIN_TICKET


def test_burnin_bitwise_comparison_can_be_turned_off():
    data = healthy_burnin(2)
    data["dtypes"]["bf16"]["gpus"]["gpu1"]["hash"] = "other"
    thr = dict(THR["burn-in"], bitwise=False)
    assert all(r.status is Status.PASS for r in burnin.judge(data, thr))


# ------------------------------------------------------------------------------- speed


def test_speed_slow_gpu_against_profile_and_siblings():
    data = healthy_burnin(4)
    data["dtypes"]["bf16"]["gpus"]["gpu3"]["tflops"] = 600.0
    res = _by_subject(speed.judge(data, THR["gpu-speed"]))
    r = res["gpu3"]
    assert r.status is Status.FAIL and r.action is Action.DRAIN_REBOOT
    # 600 is 88 % of the profile's 680 (only a warning by itself) but 87 % of its siblings' 686
    assert "bf16 600 TFLOP/s" in r.message and "siblings' median 686" in r.message
    assert "88% of the expected 680" in r.message
    assert res["gpu0"].status is Status.PASS


def test_speed_all_gpus_slow_fails_only_against_the_profile():
    data = healthy_burnin(2)
    for g in data["dtypes"]["bf16"]["gpus"].values():
        g["tflops"] = 500.0
    res = speed.judge(data, THR["gpu-speed"])
    assert all(r.status is Status.FAIL and "of the expected" in r.message for r in res)
    generic = speed.judge(data, thresholds_for("generic")["gpu-speed"])
    assert all(r.status is Status.PASS for r in generic)  # unknown GPU: no absolute expectation


def test_speed_hardware_throttling_under_load():
    data = healthy_burnin(2)
    data["nvml"]["gpu0"]["reasons"] = {"hw_thermal_slowdown": 0.5, "sw_power_cap": 0.5}
    data["nvml"]["gpu1"]["reasons"] = {"hw_slowdown": 0.05}
    res = _by_subject(speed.judge(data, THR["gpu-speed"]))
    assert res["gpu0"].status is Status.FAIL and res["gpu0"].action is Action.DRAIN_TICKET
    assert "hw thermal slowdown in 50% of samples" in res["gpu0"].message
    assert res["gpu1"].status is Status.WARN and res["gpu1"].action is Action.NONE


def test_speed_power_capping_alone_is_normal():
    data = healthy_burnin(1)
    data["nvml"]["gpu0"]["reasons"] = {"sw_power_cap": 1.0}
    (r,) = speed.judge(data, THR["gpu-speed"])
    assert r.status is Status.PASS and "SM 1530 MHz" in r.message


@pytest.mark.parametrize("profile,measured", [("h100-sxm", H100_RUN8), ("h200-sxm", H200_RUN7_LOW)])
def test_measured_sustained_numbers_pass_their_profile_without_warning(profile, measured):
    """The profiles' expectations sit just under what healthy GPUs delivered *sustained*, so a
    healthy node passes quietly, 90 % of it warns and 80 % of it fails."""
    thr = thresholds_for(profile)

    def burn(scale: float) -> dict:
        data = healthy_burnin(1)
        for dt in ("bf16", "tf32"):
            data["dtypes"][dt]["gpus"]["gpu0"]["tflops"] = measured[dt] * scale
        return data

    (r,) = speed.judge(burn(1.0), thr["gpu-speed"])
    assert r.status is Status.PASS, r
    (r,) = speed.judge(burn(0.90), thr["gpu-speed"])
    assert r.status is Status.WARN and r.action is Action.NONE, r
    (r,) = speed.judge(burn(0.80), thr["gpu-speed"])
    assert r.status is Status.FAIL and r.action is Action.DRAIN_REBOOT, r
    for scale, status in ((1.0, Status.PASS), (0.90, Status.WARN), (0.80, Status.FAIL)):
        data = healthy_hbm(1)
        data["gpus"]["gpu0"]["gbps"] = measured["hbm"] * scale
        (r,) = hbm.judge(data, thr["hbm"])
        assert r.status is status, (scale, r)
    link = healthy_hostlink(1)
    link["gpus"]["gpu0"].update(h2d_gbps=measured["h2d"], d2h_gbps=measured["d2h"], h2d_best_gbps=measured["h2d"],
                                d2h_best_gbps=measured["d2h"])
    (r,) = hostlink.judge(link, thr["host-link"])
    assert r.status is Status.PASS, r


# ------------------------------------------------------------------------------- HBM, memtest, host link


def test_hbm_slow_and_corrupt_copies():
    data = healthy_hbm(3)
    data["gpus"]["gpu1"]["gbps"] = 2000.0
    res = _by_subject(hbm.judge(data, THR["hbm"]))
    assert res["gpu1"].status is Status.FAIL and res["gpu1"].action is Action.DRAIN_REBOOT
    data = healthy_hbm(2)
    data["gpus"]["gpu0"]["copy_ok"] = False
    res = _by_subject(hbm.judge(data, THR["hbm"]))
    assert res["gpu0"].status is Status.FAIL and res["gpu0"].action is Action.DRAIN_TICKET
    assert "corrupted" in res["gpu0"].message


def test_hbm_actions_are_per_gpu():
    """One GPU corrupts its copy, another is merely slow: the corrupt one gets the hardware
    ticket, the slow one its own drain + reboot, the healthy ones nothing."""
    data = healthy_hbm(4)
    data["gpus"]["gpu0"]["copy_ok"] = False
    data["gpus"]["gpu2"]["gbps"] = 2400.0  # 80 % of the profile, 80 % of its siblings
    res = _by_subject(hbm.judge(data, THR["hbm"]))
    assert (res["gpu0"].status, res["gpu0"].action) == (Status.FAIL, Action.DRAIN_TICKET)
    assert (res["gpu2"].status, res["gpu2"].action) == (Status.FAIL, Action.DRAIN_REBOOT)
    assert "copy 2400 GB/s is 80% of the expected 3000" in res["gpu2"].message
    assert "corrupted" not in res["gpu2"].message
    for s in ("gpu1", "gpu3"):
        assert (res[s].status, res[s].action) == (Status.PASS, Action.NONE)
    # a GPU both corrupt and slow: the stronger action wins
    data["gpus"]["gpu0"]["gbps"] = 1000.0
    r0 = _by_subject(hbm.judge(data, THR["hbm"]))["gpu0"]
    assert r0.action is Action.DRAIN_TICKET and "corrupted" in r0.message and "1000 GB/s" in r0.message


def test_memtest_wrong_words_fail_with_their_address_range():
    data = healthy_memtest(2)
    data["gpus"]["gpu1"].update(bad_words=3, bad={"walking-ones": {
        "words": 3, "first_offset": 0x1000, "last_offset": 0x2007, "flipped_bits": "0000000000000100",
        "expected": "0000000000000001", "actual": "0000000000000101"}})
    res = _by_subject(memtest.judge(data, THR["memtest"]))
    r = res["gpu1"]
    assert r.status is Status.FAIL and r.action is Action.DRAIN_TICKET
    assert "3 wrong words in 4.0 GiB from 0x7f0000000000" in r.message
    assert "walking-ones: 3 words between +0x1000 and +0x2007, flipped bits 0x0000000000000100" in r.message
    assert res["gpu0"].status is Status.PASS


def test_host_link_at_half_width_fails_and_a_slow_median_alone_does_not():
    data = healthy_hostlink(2)
    data["gpus"]["gpu1"].update(h2d_gbps=26.0, h2d_best_gbps=27.0, pcie={"gen": 5, "width": 8})
    res = _by_subject(hostlink.judge(data, THR["host-link"]))
    assert res["gpu1"].status is Status.FAIL and res["gpu1"].action is Action.DRAIN_TICKET
    assert "host-to-GPU 27 GB/s" in res["gpu1"].message and "x8" in res["gpu1"].message
    data = healthy_hostlink(2)
    data["gpus"]["gpu0"]["h2d_gbps"] = 26.0  # one slow copy among five; the best one is full speed
    assert all(r.status is Status.PASS for r in hostlink.judge(data, THR["host-link"]))


# ------------------------------------------------------------------------------- P2P, NCCL


def test_p2p_healthy_and_single_gpu():
    (r,) = p2p.judge(healthy_p2p(), healthy_topology(), THR["p2p"])
    assert r.status is Status.PASS and "2 nvlink pairs 393-393 GB/s" in r.message
    (r,) = p2p.judge({"pairs": {}, "gpus": 1}, None, THR["p2p"])
    assert r.status is Status.NA


def test_p2p_faults_by_link_kind():
    data = healthy_p2p(3)
    data["pairs"]["gpu0->gpu1"]["can_access"] = False
    data["pairs"]["gpu2->gpu0"]["gbps"] = 100.0
    data["pairs"]["gpu1->gpu2"]["bad_words"] = 7
    res = _by_subject(p2p.judge(data, healthy_topology(3), THR["p2p"]))
    assert res["gpu0->gpu1"].status is Status.FAIL and "no peer access" in res["gpu0->gpu1"].message
    assert res["gpu2->gpu0"].status is Status.FAIL and "nvlink copy 100 GB/s" in res["gpu2->gpu0"].message
    assert res["gpu1->gpu2"].status is Status.FAIL and "7 words arrived corrupted" in res["gpu1->gpu2"].message
    # each pair its own action: no peer access over NVLink is a reboot, slow or corrupt a ticket
    assert res["gpu0->gpu1"].action is Action.DRAIN_REBOOT
    assert res["gpu2->gpu0"].action is Action.DRAIN_TICKET and res["gpu1->gpu2"].action is Action.DRAIN_TICKET
    assert set(res) == {"gpu0->gpu1", "gpu2->gpu0", "gpu1->gpu2"}  # the healthy pairs say nothing


def test_p2p_actions_are_per_pair():
    """A pair over NVLink without peer access (reboot) next to a corrupting pair (ticket): each
    keeps its own action, and a slow-only node gets tickets without any reboot mixed in."""
    data = healthy_p2p(2)
    data["pairs"]["gpu0->gpu1"]["can_access"] = False
    data["pairs"]["gpu1->gpu0"]["bad_words"] = 2
    res = _by_subject(p2p.judge(data, healthy_topology(2), THR["p2p"]))
    assert res["gpu0->gpu1"].action is Action.DRAIN_REBOOT and "no peer access" in res["gpu0->gpu1"].message
    assert res["gpu1->gpu0"].action is Action.DRAIN_TICKET and "corrupted" in res["gpu1->gpu0"].message
    data = healthy_p2p(2)
    data["pairs"]["gpu0->gpu1"]["can_access"] = False
    (r,) = p2p.judge(data, healthy_topology(2), THR["p2p"])
    assert r.subject == "gpu0->gpu1" and r.action is Action.DRAIN_REBOOT


def test_p2p_without_peer_access_over_pcie_only_warns():
    data = healthy_p2p(2)
    for p in data["pairs"].values():
        p["can_access"] = False
    topo = healthy_topology(2)
    topo["pairs"]["gpu0|gpu1"]["link"] = "pcie"
    res = p2p.judge(data, topo, THR["p2p"])
    assert {r.status for r in res} == {Status.WARN} and all(r.action is Action.NONE for r in res)


def test_nccl_exact_and_fast_passes():
    (r,) = nccl_local.judge(healthy_nccl(), THR["nccl-local"])
    assert r.status is Status.PASS and "busbw 331 GB/s, exact" in r.message


def test_nccl_wrong_sum_fails_whatever_the_speed():
    data = healthy_nccl()
    data["gpus"]["gpu1"] = {"bad": 12, "first_bad": 4096}
    (r,) = nccl_local.judge(data, THR["nccl-local"])
    assert r.status is Status.FAIL and r.action is Action.DRAIN_TICKET
    assert "gpu1: 12 wrong elements (first at 4096)" in r.message


def test_nccl_slow_bus_and_single_rank():
    data = healthy_nccl()
    data["busbw_gbps"] = 150.0
    (r,) = nccl_local.judge(data, THR["nccl-local"])
    assert r.status is Status.FAIL and "of the expected" in r.message
    (r,) = nccl_local.judge(dict(healthy_nccl(1), busbw_gbps=0.0), THR["nccl-local"])
    assert r.status is Status.PASS and "bus bandwidth not judged" in r.message


# ------------------------------------------------------------------------------- topology


def test_topology_against_the_profile():
    (r,) = topology.judge(healthy_topology(), THR["topology"])
    assert r.status is Status.PASS and "NVLinks active per GPU: 18" in r.message
    data = healthy_topology()
    next(iter(data["gpus"].values()))["nvlinks_active"] = 16
    (r,) = topology.judge(data, THR["topology"])
    assert r.status is Status.FAIL and "gpu0: 16 of 18 NVLinks active" in r.message


def test_topology_against_a_baseline():
    base = {"topology": topology.baseline_section(healthy_topology())}
    (r,) = topology.judge(healthy_topology(), THR["topology"], base)
    assert r.status is Status.PASS and "matches the baseline" in r.message
    now = healthy_topology()
    now["pairs"]["gpu0|gpu1"]["link"] = "pcie"
    g1 = now["gpus"]["0000:3b:00.0"]
    g1["numa"] = 1
    res = topology.judge(now, thresholds_for("generic")["topology"], base)
    by = {r.status: r for r in res}
    assert "lost their NVLink path" in by[Status.FAIL].message and by[Status.FAIL].action is Action.DRAIN_TICKET
    assert "gpu1: NUMA node 1, baseline 0" in by[Status.WARN].message


def test_topology_baseline_is_keyed_by_pci():
    sec = topology.baseline_section(healthy_topology())
    assert set(sec["gpus"]) == {"0000:1b:00.0", "0000:3b:00.0"}
    assert set(sec["pairs"]) == {"0000:1b:00.0|0000:3b:00.0"}


# ------------------------------------------------------------------------------- failed tasks


@pytest.mark.parametrize("outcome,status,action,text", [
    (Outcome("burnin", "timeout", message="timed out after 20s"), Status.ERROR, Action.NONE, "timed out after 20s"),
    (Outcome("memtest", "fail", kind="oom", message="Out of memory allocating 60 GiB"), Status.ERROR, Action.NONE,
     "out of GPU memory"),
    (Outcome("memtest", "fail", kind="ecc", message="cudaErrorECCUncorrectable"), Status.FAIL, Action.RESET_GPU,
     "uncorrectable ECC"),
    (Outcome("nccl", "fail", kind="nccl-missing", message="NCCL for CuPy is missing"), Status.ERROR, Action.NONE,
     "pip install gpuhc[gpu]"),
    (Outcome("hbm", "fail", kind="cupy-missing", message="No module named 'cupy'"), Status.ERROR, Action.NONE,
     "active checks need `pip install gpuhc[gpu]`"),
    (Outcome("hbm", "fail", kind="cuda", message="cudaErrorLaunchFailure"), Status.ERROR, Action.NONE, "CUDA error"),
])
def test_a_task_without_data_is_reported_by_check_id(outcome, status, action, text):
    r = outcome_result("hbm", outcome)
    assert (r.check, r.status, r.action) == ("hbm", status, action) and text in r.message


def test_judges_leave_their_input_alone():
    data = healthy_burnin(2)
    before = copy.deepcopy(data)
    burnin.judge(data, THR["burn-in"])
    speed.judge(data, THR["gpu-speed"])
    assert data == before
