"""What blocks a GPU reset, and what gpuhc does about each (issue 45; docs/repair.md "What blocks a
reset"): gpuhc's own node watcher lets go of NVML when the reset asks and takes it back after
(gpuhc/slurm/repair/nvml_yield.py); one that does not is no reason to reboot; a process named
like gpuhc is not gpuhc's; NVML monitors are named; the site's ``reset.stop_units`` are stopped
and started around the reset. On the fakes of tests/helpers/reset_fakes.py, the watcher a real
``Watcher`` in a child process whose NVML holds the fake /proc's device files."""

from __future__ import annotations

import os
import shutil
import time

import yaml

from gpuhc.model.deadline import Deadline
from gpuhc.slurm.jobs.watch import Watcher
from gpuhc.slurm.repair import nvml_yield
from gpuhc.slurm.repair.reset_probe import plan_now
from gpuhc.slurm.repair.reset_run import procedure
from tests.helpers.reset_fakes import FakeNode

GPUS = ["/dev/nvidiactl"] + [f"/dev/nvidia{i}" for i in range(4)]  # what NVML alone opens (no nvidia-uvm)


class _Nvml:
    """The watcher's held NVML, as the fake /proc shows it: ``release`` closes the device files."""

    def __init__(self, n: FakeNode, pid: int):
        self.n, self.pid = n, pid

    def read(self):
        from gpuhc.model.activity import Activity

        return Activity(available=True)

    def release(self):
        fd = self.n.root / "proc" / str(self.pid) / "fd"
        shutil.rmtree(fd)
        fd.mkdir()


def flow_for(tmp_path, state):
    from gpuhc.cli.common import SourceArgs, run_options_from
    from gpuhc.slurm.flows.frame import Flow

    cfg = tmp_path / "gpuhc.yaml"
    cfg.write_text(yaml.safe_dump({"slurm": {"log_file": str(tmp_path / "decisions.log"), "syslog": False,
                                             "scontrol": str(tmp_path / "no-scontrol")}}))
    opts = run_options_from(SourceArgs(config_path=str(cfg), state_dir=str(state), hostname="n1"), "passive")
    return Flow.for_command(opts, "gpuhc watch", "passive")


def start_watcher(tmp_path, n: FakeNode, state, honours: bool = True) -> int:
    """A child process holding the GPUs through NVML, registered as gpuhc's watcher; with
    ``honours`` it looks for requests as ``gpuhc watch`` does between rounds."""
    ready = tmp_path / "watcher-ready"
    pid = os.fork()
    if pid == 0:
        try:
            me = os.getpid()
            st = n.state()
            n.add_proc(st, me, "gpuhc", None, GPUS)
            n.save(st)
            shutil.copy(f"/proc/{me}/stat", n.root / "proc" / str(me) / "stat")
            w = Watcher(flow_for(tmp_path, state), _Nvml(n, me))
            nvml_yield.register(str(state))
            ready.write_text("")
            end = time.monotonic() + 30
            while time.monotonic() < end and not (tmp_path / "stop").exists():
                if honours:
                    w._honour_yield(time.sleep)
                time.sleep(0.05)
        finally:
            os._exit(0)
    while not ready.exists():
        time.sleep(0.02)
    return pid


def stop_watcher(tmp_path, pid: int) -> None:
    (tmp_path / "stop").write_text("")
    os.waitpid(pid, 0)


def test_the_watcher_lets_go_for_the_reset_and_takes_nvml_back_after(tmp_path):
    n = FakeNode(tmp_path / "node")
    state = tmp_path / "state"
    watcher = start_watcher(tmp_path, n, state)
    try:
        lines: list[str] = []
        plan, out = procedure(n.section(), (1,), n.read_nvml, lines.append, Deadline.after(60),
                              state_dir=str(state), read_procs=n.read_procs)
    finally:
        stop_watcher(tmp_path, watcher)
    assert plan.ok and plan.steps[0].kind == "yield" and plan.steps[0].target == str(watcher), plan.lines()
    assert out.ok, (out.detail, lines)
    assert "nvidia-smi -r -i 1" in [c.split("/")[-1] for c in n.calls()]
    assert any(f"yield {watcher}: ok: gpuhc watch (pid {watcher}) let go of NVML" in x for x in lines), lines
    assert not (state / "yield" / "request.json").exists()  # the reset is over: the watcher took NVML back
    log = (tmp_path / "decisions.log").read_text()
    assert "watch: a GPU reset asked for NVML: let go" in log and "the GPU reset is over" in log


def test_a_watcher_that_does_not_let_go_is_no_reason_to_reboot(tmp_path):
    n = FakeNode(tmp_path / "node")
    state = tmp_path / "state"
    watcher = start_watcher(tmp_path, n, state, honours=False)
    try:
        lines: list[str] = []
        section = n.section(yield_timeout_s=1.0)
        plan, out = procedure(section, (1,), n.read_nvml, lines.append, Deadline.after(60), state_dir=str(state),
                              read_procs=n.read_procs)
    finally:
        stop_watcher(tmp_path, watcher)
    assert plan.ok  # gpuhc's own holder never blocks the plan
    assert not out.ok and out.retry and not out.fallthrough, out.detail
    assert "only gpuhc itself was in the way: tried again next run, no reboot for it" in out.detail
    assert f"gpuhc watch (pid {watcher}) did not let go of NVML within 1s" in out.log[-1]["detail"], out.log
    assert n.calls() == [n.calls()[0]]  # only the read-only `systemctl show`: nothing changed


def test_a_process_named_like_gpuhc_is_not_gpuhcs_and_blocks(tmp_path):
    # Not registered in root's yield directory: whatever it calls itself, it is a holder like any other.
    n = FakeNode(tmp_path / "node", procs={77: ("gpuhc", None, GPUS)})
    plan = plan_now(n.section(), (1,), n.read_nvml(), Deadline.after(10), state_dir=str(tmp_path / "state"),
                    read_procs=n.read_procs)
    assert not plan.ok and plan.blockers[0].startswith("pid 77 (gpuhc, no service gpuhc may stop) holds")
    assert not any(s.kind == "yield" for s in plan.steps)


# What a pynvml loop held on an H100 (docs/verification.md, "The reset's holders"): the same
# files as a CUDA program, nvidia-uvm included; only what it maps of the devices tells them apart.
NVML_ON_H100 = ["/dev/nvidia-caps/nvidia-cap1", "/dev/nvidia-caps/nvidia-cap2", "/dev/nvidia-uvm", "/dev/nvidia1",
                "/dev/nvidiactl"]


def test_nvml_monitors_are_named_in_the_plan(tmp_path):
    n = FakeNode(tmp_path / "node", procs={31: ("nvtop", None, GPUS, False), 32: ("python3", None, NVML_ON_H100, False),
                                           33: ("python3", None, NVML_ON_H100, True)})
    plan = plan_now(n.section(), (1,), n.read_nvml(), Deadline.after(10), read_procs=n.read_procs)
    by_pid = {b.split()[1]: b for b in plan.blockers}
    assert "nvtop, an interactive GPU monitor; stop it, or list its unit in slurm.remediation.reset.stop_units" \
        in by_pid["31"]
    assert "an NVML client without CUDA (a monitor or exporter)" in by_pid["32"]
    assert by_pid["33"].endswith("/dev/nvidiactl")  # a CUDA program (a context mapped): not called a monitor


def test_the_sites_stop_units_are_stopped_and_started_around_the_reset(tmp_path):
    units = {"nvidia-persistenced": True, "nvidia-fabricmanager": True, "site-monitor": True}
    n = FakeNode(tmp_path / "node", units=units, procs={40: ("site-monitor", "site-monitor", GPUS)})
    blocked = plan_now(n.section(), (1,), n.read_nvml(), Deadline.after(10), read_procs=n.read_procs)
    assert not blocked.ok and "unit site-monitor.service" in blocked.blockers[0]
    plan, out = procedure(n.section(stop_units=["site-monitor"]), (1,), n.read_nvml, lambda line: None,
                          Deadline.after(60), state_dir=str(tmp_path / "state"), read_procs=n.read_procs)
    assert out.ok, out.detail
    calls = [" ".join(c.split()[1:]) for c in n.calls()[2:]]  # after the two read-only `systemctl show`
    assert calls == ["-i 1 -pm 0", "stop site-monitor", "-r -i 1", "start site-monitor", "-i 1 -pm 1"]
    assert n.state()["units"]["site-monitor"] == "active"


def test_a_request_is_honoured_within_a_bound_and_lapses_by_itself(tmp_path):
    """A reset killed before it released its request: the watcher takes NVML back at its end."""
    state = tmp_path / "state"
    w = Watcher(flow_for(tmp_path, state), _Counting())
    assert w._honour_yield(lambda s: None) is False  # no request: nothing done
    nvml_yield.ask(str(state), time.time() + 0.3)
    slept = []
    assert w._honour_yield(lambda s: (slept.append(s), time.sleep(s))) is True
    assert w.reader.released == 1 and slept and not list((state / "yield").glob("ack-*"))
    assert nvml_yield.asked(str(state)) is None  # lapsed


class _Counting:
    released = 0

    def read(self):
        from gpuhc.model.activity import Activity

        return Activity(available=True)

    def release(self):
        self.released += 1
