"""Quarantine after a reboot Slurm carried out: the reason Slurm hands back carries its own
notes (" : reboot issued : reboot complete", as 22.05, 24.11 and 26.05 print it: the test
clusters of tests/slurm_real/test_matrix.py). gpuhc's next reason keeps its evidence without them."""

from __future__ import annotations


from gpuhc.slurm.read.nodes import parse_show_node_oneline
from gpuhc.slurm.policy.drain import Verdict
from gpuhc.slurm.repair.quarantine import plan_retest
from tests.helpers.paths import FIXTURES

EVID = "gpuhc: xid79 gpu3 (0000:5d:00.0): GPU has fallen off the bus"


def rebooted(raw: str, reason: str):
    """A node record as `scontrol show node -o` prints one after `scontrol reboot`."""
    line = FIXTURES.joinpath("slurm", "slurm-26.05", "scontrol_show_node_oneline.txt").read_text()
    n2 = next(ln for ln in line.splitlines() if ln.startswith("NodeName=n2 "))
    head, _, _ = n2.partition(" Reason=")
    head = head.replace("State=IDLE+DRAIN", f"State={raw}")
    return parse_show_node_oneline(f"{head} Reason={reason} [root@2026-11-26T06:40:01]\n")[0]


def test_failed_retest_after_reboot_drops_slurms_reboot_notes():
    node = rebooted("DOWN+DRAIN", EVID + " : reboot issued : reboot complete")
    assert node.reason == EVID + " : reboot issued : reboot complete"
    plan = plan_retest(node, Verdict.FAIL, "gpuhc: ecc gpu1 row remap pending", 3)
    assert (plan.act, plan.reason) == ("requarantine", EVID + " [q1]")


def test_a_reboot_that_timed_out_is_slurms_note_too():
    # Slurm 26.05 on a loaded CI machine: the node came back after ResumeTimeout (seen in CI)
    node = rebooted("DOWN+DRAIN", EVID + " : reboot issued : reboot timed out")
    plan = plan_retest(node, Verdict.FAIL, None, 3)
    assert (plan.act, plan.reason) == ("requarantine", EVID + " [q1]")


def test_second_cycle_and_retire_keep_only_gpuhcs_evidence():
    node = rebooted("DOWN+DRAIN", EVID + " [q1] : reboot issued : reboot complete")
    assert plan_retest(node, Verdict.FAIL, None, 3).reason == EVID + " [q2]"
    node = rebooted("DOWN+DRAIN", EVID + " : reboot issued : reboot complete [q2]")
    plan = plan_retest(node, Verdict.FAIL, None, 3)
    assert (plan.act, plan.reason) == ("retire", EVID.replace("gpuhc: ", "gpuhc: RETIRED ", 1))


def test_evidence_that_merely_mentions_a_reboot_is_kept():
    body = "gpuhc: gpu-count 7 of 8 GPUs: reboot issued by admin pending"
    node = rebooted("DOWN+DRAIN", body)
    assert plan_retest(node, Verdict.FAIL, None, 3).reason == body + " [q1]"
