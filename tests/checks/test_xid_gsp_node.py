"""GSP time-outs (Xid 119/120) on two GPUs of one node within ``gsp_node_window_s``: one
node-level fault (gpuhc/checks/xid_joined.py); one GPU's stay its own (the catalog's
``drain_after``).

The one-GPU and two-GPU cases on real logs are in tests/fixtures/kernel_log/gsp/README.md (the
two-GPU ones: NVIDIA/open-gpu-kernel-modules issue 446, two incidents of one report, and
vllm-project/vllm issue 40652); the edges of the window and the settings are kernel events
(tests/helpers/xid_events.py): no log line is written for them.
"""

from __future__ import annotations

from dataclasses import replace

from gpuhc.checks import xid
from gpuhc.model.result import Action, Status
from gpuhc.sources.kernel_log_parse import parse_lines
from tests.helpers.paths import FIXTURES
from tests.helpers.snapshots import T0, context, healthy_node, with_gpu
from tests.helpers.xid_events import brief, ev, judge, node

CHECK = xid.CHECKS[0]
GSP = FIXTURES / "kernel_log" / "gsp"


def judge_file(name: str, pci: str, pci1: str | None = None, lines: int | None = None, **t):
    """The real log (its first ``lines``) judged a minute after its last line, on a node whose gpu0
    is at ``pci`` (and gpu1 at ``pci1``)."""
    log = parse_lines((GSP / name).read_text().splitlines()[:lines])
    log.boot_id = "boot-a"
    snap = with_gpu(healthy_node(2, time=log.last_time + 60), 0, pci_bus_id=pci)
    if pci1:
        snap = with_gpu(snap, 1, pci_bus_id=pci1)
    return CHECK.judge(replace(snap, kernel=log), context(CHECK, **t))


def node_fails(out):
    return [r for r in out.results if r.status is Status.FAIL and r.subject == "node"]


def test_one_gsp_timeout_on_each_of_two_gpus_within_a_minute_drains_the_node():
    out = judge(node(ev(119, gpu=2, t=T0 - 100), ev(119, gpu=5, t=T0 - 70)))
    (fail,) = node_fails(out)
    assert fail.action is Action.DRAIN_REBOOT
    assert fail.message == "Xid 119 on node x2: GSP time-outs on 2 GPUs within 60 s (gpu2, gpu5): one node-level fault"
    # each GPU's own line stays what it was: 1 of the 2 that drain on one GPU
    assert sorted((r.status, r.subject) for r in out.results if r.subject != "node") == [
        (Status.WARN, "gpu2"), (Status.WARN, "gpu5")]


def test_a_gsp_error_and_a_timeout_on_two_gpus_count_together():
    out = judge(node(ev(120, gpu=1, t=T0 - 100), ev(119, gpu=3, t=T0 - 95)))
    assert [f.value["count"] for f in node_fails(out)] == [2]


def test_the_node_fault_is_held_on_the_next_run_like_any_draining_xid():
    first = judge(node(ev(119, gpu=2, t=T0 - 100, seq=1), ev(119, gpu=5, t=T0 - 70, seq=2)))
    later = judge(node(ev(119, gpu=2, t=T0 - 100, seq=1), ev(119, gpu=5, t=T0 - 70, seq=2), time=T0 + 600),
                  prev=first.state)
    (fail,) = node_fails(later)
    assert fail.action is Action.DRAIN_REBOOT and "held" in fail.value


def test_two_gpus_far_apart_are_judged_per_gpu_as_before():
    out = judge(node(ev(119, gpu=2, t=T0 - 3000), ev(119, gpu=5, t=T0 - 60)))
    assert not node_fails(out)
    assert sorted(brief(out)) == [(Status.WARN, Action.NONE, "gpu2"), (Status.WARN, Action.NONE, "gpu5")]


def test_the_window_is_the_sites_to_set():
    events = (ev(119, gpu=2, t=T0 - 3000), ev(119, gpu=5, t=T0 - 60))
    assert node_fails(judge(node(*events), gsp_node_window_s=3600))


def test_an_unattributed_or_undated_timeout_is_not_a_second_gpu():
    no_pci = replace(ev(119, gpu=2, t=T0 - 90), pci=None, message="Xid (PCI:...): 119, test")
    assert not node_fails(judge(node(ev(119, gpu=2, t=T0 - 100), no_pci)))
    assert not node_fails(judge(node(ev(119, gpu=2, t=T0 - 100), ev(119, gpu=5, t=None))))


def test_one_real_gsp_timeout_on_one_gpu_warns_as_today():
    log = parse_lines((GSP / "dmesg_T_xid119_one_gpu_h100_gpud.log").read_text().splitlines()[:1])
    log.boot_id = "boot-a"
    snap = with_gpu(healthy_node(2, time=log.last_time + 60), 0, pci_bus_id="00000000:9B:00.0")
    out = CHECK.judge(replace(snap, kernel=log), context(CHECK))
    assert brief(out) == [(Status.WARN, Action.NONE, "gpu0")]


def test_real_repeats_on_one_gpu_are_that_gpus_reset_not_the_nodes():
    out = judge_file("dmesg_T_xid119_one_gpu_h100_gpud.log", "00000000:9B:00.0")
    assert brief(out) == [(Status.FAIL, Action.RESET_GPU, "gpu0")]
    out = judge_file("dmesg_T_xid120_xid119_one_gpu_a100_dcgm_exporter84.log", "00000000:3B:00.0")
    assert not node_fails(out)
    assert (Status.FAIL, Action.RESET_GPU, "gpu0") in brief(out)


# The two-GPU reports: an A100 VM whose two passed-through GPUs (0000:01:01, 0000:01:02) time out
# 30 s apart, then again 6 s apart after a GPU reset (tests/fixtures/kernel_log/gsp/README.md).
TWO_GPUS = ("00000000:01:01.0", "00000000:01:02.0")


def test_a_real_timeout_on_each_of_two_gpus_within_a_minute_drains_the_node():
    # the first three lines: one Xid 119 on each GPU, 30 s apart; per GPU both only warn
    out = judge_file("syslog_xid119_two_gpus_30s_a100_vm_ogkm446.log", *TWO_GPUS, lines=3)
    (fail,) = node_fails(out)
    assert fail.action is Action.DRAIN_REBOOT and "on 2 GPUs within 60 s (gpu0, gpu1)" in fail.message
    assert sorted(brief(out)) == sorted([(Status.FAIL, Action.DRAIN_REBOOT, "node"),
                                         (Status.WARN, Action.NONE, "gpu0"), (Status.WARN, Action.NONE, "gpu1")])


def test_a_real_timeout_on_gpu5_then_gpu6_45_s_later_drains_the_node():
    # one task (NvmlTaskRunner) of an 8x A100 node timing out on two GPUs' GSPs in turn
    out = judge_file("dmesg_T_xid119_gpu5_gpu6_45s_vllm40652.log", "00000001:6C:00.0", "00000001:96:00.0")
    assert sorted(brief(out)) == sorted([(Status.FAIL, Action.DRAIN_REBOOT, "node"),
                                         (Status.WARN, Action.NONE, "gpu0"), (Status.WARN, Action.NONE, "gpu1")])
    assert not node_fails(judge_file("dmesg_T_xid119_gpu5_gpu6_45s_vllm40652.log", "00000001:6C:00.0",
                                     "00000001:96:00.0", gsp_node_window_s=30))


def test_the_real_two_gpu_reports_drain_the_node_beside_the_gpu_that_repeats():
    for name, repeats in (("syslog_xid119_two_gpus_30s_a100_vm_ogkm446.log", "gpu1"),
                          ("syslog_xid119_two_gpus_after_reset_a100_vm_ogkm446.log", "gpu0")):
        out = judge_file(name, *TWO_GPUS)
        assert [f.value["count"] for f in node_fails(out)] == [3], name
        assert (Status.FAIL, Action.RESET_GPU, repeats) in brief(out), name
        # a window shorter than the gap between the GPUs leaves them per GPU, as before the rule
        assert not node_fails(judge_file(name, *TWO_GPUS, gsp_node_window_s=5)), name


def test_a_bad_window_is_a_named_error_never_a_drain():
    for bad in (0, -5, "a minute", 10 ** 9):
        out = judge(node(ev(119, gpu=2, t=T0 - 100), ev(119, gpu=5, t=T0 - 70)), gsp_node_window_s=bad)
        assert any(r.status is Status.ERROR and "gsp_node_window_s" in r.message for r in out.results)
        assert not node_fails(out)
