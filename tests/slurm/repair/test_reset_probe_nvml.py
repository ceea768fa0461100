"""The GPU reset's plan sees NVML's holders too (gpuhc/slurm/repair/reset_probe.py): the processes
NVML lists on a GPU of the reset, read as the occupancy check reads them (gpuhc/sources/gpu_procs.py),
merged with the /proc/<pid>/fd scan. Against the faked node of tests/helpers/reset_fakes.py: a /proc
tree, the real tools' stand-ins, NVML through gpuhc's real readers over the fake library."""

from __future__ import annotations

import threading

import pynvml

from gpuhc.model.deadline import Deadline
from gpuhc.slurm.repair.reset_probe import ProbeSettings, plan_now, probe
from gpuhc.slurm.repair.reset_run import procedure
from tests.helpers.reset_fakes import FakeNode

DCGM = (4242, "nv-hostengine", "nvidia-dcgm", ["/dev/nvidia1", "/dev/nvidiactl"])  # a CUDA context on gpu1
NAMESPACED = "held by pid 31337, which NVML lists on gpu1 but /proc does not show (another PID namespace?)"


def node(tmp_path, **kw) -> FakeNode:
    kw.setdefault("procs", {DCGM[0]: DCGM[1:]})
    return FakeNode(tmp_path, **kw)


def plan_of(n: FakeNode, targets=(1,), read_procs=None):
    return plan_now(n.section(), targets, n.read_nvml(), Deadline.after(10),
                    read_procs=read_procs or n.read_procs)


def test_a_holder_only_nvml_lists_blocks_the_reset_and_is_never_touched(tmp_path):
    """A process in another PID namespace (a container): NVML lists it on gpu1, /proc has no such
    pid. gpuhc can neither stop nor name it, so the reset is not attempted."""
    n = node(tmp_path)
    n.change(nvml_only={"1": [31337]})
    lines: list[str] = []
    plan, out = procedure(n.section(), (1,), n.read_nvml, lines.append, Deadline.after(60), read_procs=n.read_procs)
    assert plan.blockers == (NAMESPACED,), plan.blockers
    assert "holder pid 31337 (?, no unit; listed by NVML, not shown by /proc): /dev/nvidia1" in plan.lines()
    assert not out.ok and out.fallthrough and NAMESPACED in out.detail
    assert n.calls() == [n.calls()[0]] and n.calls()[0].startswith("systemctl show")  # nothing stopped, no reset
    assert n.state()["units"]["nvidia-dcgm"] == "active"


def test_an_nvml_only_holder_of_another_gpu_does_not_block(tmp_path):
    # Hopper: gpu1 resets alone, and what runs on gpu2 is not in its way
    n = node(tmp_path)
    n.change(nvml_only={"2": [31337]})
    assert plan_of(n).ok
    assert plan_of(n, (2,)).blockers == (NAMESPACED.replace("gpu1", "gpu2"),)


def test_a_holder_seen_by_nvml_and_by_its_files_is_one_holder_and_its_service_is_stopped(tmp_path):
    n = node(tmp_path)
    s = ProbeSettings.from_section(n.section()["reset"])
    facts = probe(n.read_nvml(), s, Deadline.after(10), read_procs=n.read_procs)
    assert [(h.pid, h.unit, h.devices, h.gone) for h in facts.holders] == [
        (4242, "nvidia-dcgm.service", ("/dev/nvidia1", "/dev/nvidiactl"), False)]
    assert n.read_procs().gpus[1].processes[0].pid == 4242  # NVML does list it there
    lines: list[str] = []
    plan, out = procedure(n.section(), (1,), n.read_nvml, lines.append, Deadline.after(60), read_procs=n.read_procs)
    assert out.ok, lines
    assert [x for x in plan.holders if "4242" in x] == [
        "pid 4242 (nv-hostengine, nvidia-dcgm.service; DCGM's host engine): /dev/nvidia1, /dev/nvidiactl"]
    assert "systemctl stop nvidia-dcgm" in n.calls() and "systemctl start nvidia-dcgm" in n.calls()


def test_a_process_nvml_lists_that_holds_no_device_file_is_a_holder_by_name(tmp_path):
    """/proc shows it, but its descriptors do not hold the GPU's file (it closed it and kept the
    mapping): NVML's word makes it a holder of gpu1, named as any other."""
    n = node(tmp_path, procs={77: ("python3", None, [], False)})
    n.change(nvml_only={"1": [77]})
    assert plan_of(n).blockers == ("pid 77 (python3, no service gpuhc may stop) holds /dev/nvidia1: an NVML client "
                                   "without CUDA (a monitor or exporter); stop it, or list its unit in "
                                   "slurm.remediation.reset.stop_units",)


def test_nvml_lists_that_cannot_be_read_say_holders_may_be_missing(tmp_path):
    n = node(tmp_path)
    n.change(nvml_fail={"1": pynvml.NVML_ERROR_UNKNOWN})
    (why,) = plan_of(n).blockers
    assert why.startswith("gpu1: NVML's process lists could not be read (cannot list processes: ")
    assert why.endswith("): holders may be missing")
    assert plan_of(n, (2,)).ok  # another GPU's lists were read

    n.change(nvml_fail={"1": pynvml.NVML_ERROR_NOT_SUPPORTED})
    assert plan_of(n).blockers == (
        "gpu1: NVML does not give its compute process list (not supported): holders may be missing",)


def test_no_nvml_lists_and_a_read_that_hangs_say_holders_may_be_missing(tmp_path):
    n = node(tmp_path)
    assert plan_now(n.section(), (1,), n.read_nvml(), Deadline.after(10)).blockers == (
        "NVML's process lists were not read: holders may be missing",)
    assert plan_of(n, read_procs=lambda: None).blockers == (
        "NVML's process lists were not read: holders may be missing",)

    def hangs():
        threading.Event().wait(120)  # never set: the probe leaves this thread behind

    plan = plan_now(n.section(), (1,), n.read_nvml(), Deadline.after(1.0), read_procs=hangs)
    (why,) = [b for b in plan.blockers if "NVML" in b]
    assert why.startswith("NVML's process lists did not answer (") and why.endswith("): holders may be missing")


def test_a_pid_nvml_no_longer_lists_when_asked_again_is_no_holder(tmp_path):
    """The job's last process exits between NVML's list and the /proc scan: NVML is asked once
    more before a pid /proc does not show refuses the reset, and no longer lists it."""
    n = node(tmp_path)
    n.change(nvml_only={"1": [31337]})
    reads = []

    def first_then_gone():
        reads.append(1)
        if len(reads) > 1:
            n.change(nvml_only={})
        return n.read_procs()

    assert plan_of(n, read_procs=first_then_gone).ok
    assert len(reads) == 2
    n.change(nvml_only={"1": [31337]})
    assert plan_of(n).blockers == (NAMESPACED,)  # still listed when asked again: refused
