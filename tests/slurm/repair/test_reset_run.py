"""The GPU reset procedure (gpuhc/slurm/repair/reset_plan.py, reset_probe.py, reset_run.py) against a
faked node (tests/helpers/reset_fakes.py): real executables for systemctl and nvidia-smi that record the
order of every call, a /proc tree, NVML through gpuhc's NVML source over the fake library."""

from __future__ import annotations

import json
import time

import pytest
import yaml
from click.testing import CliRunner

from gpuhc.cli.quarantine_cmd import quarantine
from gpuhc.model.deadline import Deadline
from gpuhc.model.snapshot import Snapshot
from gpuhc.slurm.repair import reset_run
from gpuhc.slurm.repair.reset_probe import ProbeSettings, holders, minor_of, plan_now, probe, unit_of
from gpuhc.slurm.repair.reset_run import procedure
from tests.helpers.paths import FIXTURES
from tests.helpers.reset_fakes import FakeNode

DCGM = (4242, "nv-hostengine", "nvidia-dcgm", [f"/dev/nvidia{i}" for i in range(4)] + ["/dev/nvidiactl"])
PERSISTENCED = (1111, "nvidia-persiste", "nvidia-persistenced", [f"/dev/nvidia{i}" for i in range(4)])
FM = (2222, "nv-fabricmanage", "nvidia-fabricmanager", ["/dev/nvidiactl", "/dev/nvidia-nvswitchctl"])


def node(tmp_path, **kw) -> FakeNode:
    kw.setdefault("procs", {p[0]: p[1:] for p in (DCGM, PERSISTENCED, FM)})
    return FakeNode(tmp_path, **kw)


def run(n: FakeNode, targets=(1,), **reset):
    lines: list[str] = []
    plan, out = procedure(n.section(**reset), targets, n.read_nvml, lines.append, Deadline.after(60),
                          read_procs=n.read_procs)
    return plan, out, lines


def test_hopper_resets_one_gpu_after_quiescing_what_holds_it_and_restores_in_reverse(tmp_path):
    n = node(tmp_path)
    plan, out, lines = run(n)
    assert out.ok and not out.fallthrough, lines
    assert plan.scope == (1,) and not plan.together and "Hopper" in plan.scope_why
    assert n.calls() == [
        "systemctl show --property=Id,LoadState,ActiveState -- nvidia-persistenced nvidia-fabricmanager "
        "nvidia-imex nvidia-dcgm nv-hostengine dcgm-exporter nvsm",
        "nvidia-smi -i 1 -pm 0",  # persistence off: persistenced lets go (NVIDIA/NVSentinel#1692)
        "systemctl stop nvidia-dcgm",  # holds gpu1; Fabric Manager does not, so it keeps running
        "nvidia-smi -r -i 1",
        "systemctl start nvidia-dcgm",
        "nvidia-smi -i 1 -pm 1",
    ]
    st = n.state()
    assert st["gpus"]["1"]["resets"] == 1 and "resets" not in st["gpus"]["0"]
    assert st["units"] == {"nvidia-persistenced": "active", "nvidia-fabricmanager": "active",
                           "nvidia-dcgm": "active"}
    assert [r["step"] for r in out.log][-2:] == ["wait-fabric", "verify"]
    assert any("verify uuids: ok: NVML lists the same 4 GPUs" in x for x in lines), lines


def test_a_baseboard_that_must_reset_as_one_is_reset_as_one(tmp_path):
    # Ampere on NVSwitch with Fabric Manager stopped: nvidia-smi(1) says every NVLinked GPU goes
    # into the same reset command.
    n = node(tmp_path, model="NVIDIA A100-SXM4-80GB", fabric=None,
             units={"nvidia-persistenced": True, "nvidia-fabricmanager": False, "nvidia-dcgm": True},
             procs={p[0]: p[1:] for p in (DCGM, PERSISTENCED)})
    plan, out, lines = run(n, targets=(2,))
    assert out.ok, lines
    assert plan.together and plan.scope == (0, 1, 2, 3) and "Ampere NVSwitch" in plan.scope_why
    calls = n.calls()[1:]
    assert [c for c in calls if " -r " in c] == ["nvidia-smi -r -i 0,1,2,3"]
    # the whole sequence NVIDIA's break-fix guide runs: every running service stopped, newest
    # dependant first, and started back in the opposite order
    assert calls == ["nvidia-smi -i 0 -pm 0", "nvidia-smi -i 1 -pm 0", "nvidia-smi -i 2 -pm 0",
                     "nvidia-smi -i 3 -pm 0", "systemctl stop nvidia-dcgm", "systemctl stop nvidia-persistenced",
                     "nvidia-smi -r -i 0,1,2,3", "systemctl start nvidia-persistenced", "systemctl start nvidia-dcgm",
                     "nvidia-smi -i 0 -pm 1", "nvidia-smi -i 1 -pm 1", "nvidia-smi -i 2 -pm 1",
                     "nvidia-smi -i 3 -pm 1"]


def test_ampere_with_fabric_manager_resets_alone_and_keeps_fabric_manager(tmp_path):
    n = node(tmp_path, model="NVIDIA A100-SXM4-80GB", fabric=None,
             procs={2222: ("nv-fabricmanage", "nvidia-fabricmanager", ["/dev/nvidia2"])})
    n.change(fm_facilitates=True)
    plan, out, lines = run(n, targets=(2,))
    assert out.ok and plan.scope == (2,) and "Fabric Manager running" in plan.scope_why, lines
    assert not any("fabricmanager" in c for c in n.calls()[1:])


@pytest.mark.parametrize("fail", ["stop nvidia-dcgm", "-r -i 1", "check-holders", "fabric", "uuid"])
def test_services_are_restored_on_every_failure_path_and_the_ladder_falls_through(tmp_path, monkeypatch, fail):
    n = node(tmp_path)
    if fail == "check-holders":  # a user's process nobody may stop appears after planning
        reset = {}
    else:
        reset = {}
        if fail == "fabric":
            n.change(fabric_stuck=True)
            # the reset sends the fabric back to "in progress"; Fabric Manager must be restarted
            # for it to complete, and here it never does
            reset = {"fabric_timeout_s": 2.0}
        elif fail == "uuid":
            n.change(uuid_after_reset={"1": "GPU-ffffffff-0000-0000-0000-000000000000"})
        else:
            n.change(fail=[fail])
    if fail == "check-holders":
        plan, out, lines = _plan_then_add_holder(n, monkeypatch)
    else:
        plan, out, lines = run(n, **reset)
    assert not out.ok and out.fallthrough, lines
    st = n.state()
    assert st["units"]["nvidia-dcgm"] == "active" and st["gpus"]["1"]["pm"] == 1, (n.calls(), lines)
    calls = n.calls()
    if "-r -i 1" in calls:
        assert calls.index("nvidia-smi -i 1 -pm 1") > calls.index("systemctl start nvidia-dcgm")
    if fail == "uuid":
        assert any("GPUs differ from before the reset" in x for x in lines), lines


def _plan_then_add_holder(n, monkeypatch):
    """Plan while the node is quiet; a process grabs the GPU before the reset (NVIDIA/NVSentinel#1243
    saw a client that opens NVML in a loop do this)."""
    real = reset_run._Run.holders_gone

    def grabbed(self, step):
        st = n.state()
        n.add_proc(st, 7777, "python3", None, ["/dev/nvidia1"])
        n.save(st)
        return real(self, step)

    monkeypatch.setattr(reset_run._Run, "holders_gone", grabbed)
    plan, out, lines = run(n)
    assert any("check-holders 1: FAILED: still held by pid 7777 (python3, no unit)" in x for x in lines), lines
    assert not any(" -r " in c for c in n.calls())
    return plan, out, lines


def test_an_unknown_holder_blocks_the_plan_and_nothing_is_touched(tmp_path):
    n = node(tmp_path, procs={9: ("my-monitor", None, ["/dev/nvidia1", "/dev/nvidiactl"], False),
                              DCGM[0]: DCGM[1:]})
    plan, out, lines = run(n)
    # it maps NVML's library and not CUDA's: a monitor; the plan says so
    assert not plan.ok and plan.blockers == (
        "pid 9 (my-monitor, no service gpuhc may stop) holds /dev/nvidia1, /dev/nvidiactl: an NVML client "
        "without CUDA (a monitor or exporter); stop it, or list its unit in slurm.remediation.reset.stop_units",)
    assert out.fallthrough and n.calls() == [n.calls()[0]]  # only the read-only `systemctl show`


def test_holders_are_found_by_device_minor_not_by_index(tmp_path):
    # /dev/nvidiaN is the driver's minor number, which need not follow NVML's PCI order
    n = node(tmp_path, minors=[3, 2, 1, 0], procs={5: ("python3", None, ["/dev/nvidia2"])})
    s = ProbeSettings.from_section(n.section()["reset"])
    assert minor_of(s.proc_root, "00000000:19:00.0") == 2
    plan = plan_now(n.section(), (1,), n.read_nvml(), Deadline.after(10), read_procs=n.read_procs)
    assert plan.devices[1] == "/dev/nvidia2" and "pid 5 (python3" in plan.blockers[0]
    assert plan_now(n.section(), (0,), n.read_nvml(), Deadline.after(10), read_procs=n.read_procs).ok


def test_probe_reads_units_cgroups_and_escapes_names_processes_chose(tmp_path):
    n = node(tmp_path, procs={66: ("evil\x1b[2J\nname", None, ["/dev/nvidia0"]), DCGM[0]: DCGM[1:]})
    s = ProbeSettings.from_section(n.section()["reset"])
    found, problems = holders(s.proc_root, Deadline.after(10))
    assert not problems
    by_pid = {h.pid: h for h in found}
    assert by_pid[4242].unit == "nvidia-dcgm.service" and "/dev/nvidiactl" in by_pid[4242].devices
    assert "\x1b" not in by_pid[66].comm and "\n" not in by_pid[66].comm
    facts = probe(n.read_nvml(), s, Deadline.after(10), read_procs=n.read_procs)
    assert facts.services == {"nvidia-persistenced": True, "nvidia-fabricmanager": True, "nvidia-dcgm": True}
    assert facts.nvswitch and [g.arch for g in facts.gpus] == ["hopper"] * 4
    assert unit_of("12:pids:/system.slice/nvidia-dcgm.service\n0::/system.slice/foo.service/x\n") == \
        "nvidia-dcgm.service"
    # a user's delegated subtree may hold a cgroup of any name: it is not the service
    assert unit_of("0::/user.slice/user-1000.slice/user@1000.service/app.slice/nvidia-dcgm.service\n") is None


def test_a_broken_systemctl_or_missing_proc_is_a_problem_not_a_guess(tmp_path):
    n = node(tmp_path)
    broken = tmp_path / "systemctl-broken"
    broken.write_text("#!/bin/sh\necho 'Failed to connect to bus: Host is down' >&2\nexit 1\n")
    broken.chmod(0o755)
    plan = plan_now(n.section(systemctl=str(broken), proc_root=str(tmp_path / "gone")), (1,),
                    n.read_nvml(), Deadline.after(10), read_procs=n.read_procs)
    assert not plan.ok
    text = " ".join(plan.blockers)
    assert "services unknown" in text and "Host is down" in text and "gone" in text
    assert "minor number unknown" in text


def test_without_systemd_there_is_no_service_to_stop_and_holders_still_count(tmp_path):
    # The H100 machine of docs/verification.md is a VM without systemd: no unit to stop; a CUDA
    # process still blocks, and without it the plan goes ahead.
    n = node(tmp_path, units={}, procs={902: ("python3", None, ["/dev/nvidia-uvm", "/dev/nvidia0", "/dev/nvidia1",
                                                                 "/dev/nvidiactl"])})
    plan = plan_now(n.section(systemctl=str(tmp_path / "no-systemctl")), (1,), n.read_nvml(), Deadline.after(10),
                    read_procs=n.read_procs)
    assert plan.services == {} and plan.blockers == (
        "pid 902 (python3, no service gpuhc may stop) holds /dev/nvidia-uvm, /dev/nvidia0, /dev/nvidia1, "
        "/dev/nvidiactl",)
    n2 = node(tmp_path / "b", units={}, procs={}, nvswitch=False)
    plan = plan_now(n2.section(systemctl=str(tmp_path / "no-systemctl")), (1,), n2.read_nvml(), Deadline.after(10),
                    read_procs=n2.read_procs)
    assert plan.ok and [s.kind for s in plan.steps] == ["persistence-off", "check-holders", "reset", "persistence-on",
                                                        "wait-fabric", "verify"]


def test_nvswitch_is_seen_from_the_fabric_where_its_device_files_are_not(tmp_path):
    s = ProbeSettings(("nvidia-fabricmanager",), str(tmp_path / "none"), "", "", 5.0)
    n = node(tmp_path, nvswitch=False, units={}, procs={})
    assert probe(n.read_nvml(), ProbeSettings(s.services, s.systemctl, str(n.root / "proc"), str(n.root / "dev"), 5),
                 Deadline.after(10)).nvswitch
    n2 = node(tmp_path / "b", nvswitch=False, units={}, procs={}, fabric=None)
    assert not probe(n2.read_nvml(), ProbeSettings(s.services, s.systemctl, str(n2.root / "proc"),
                                                   str(n2.root / "dev"), 5), Deadline.after(10)).nvswitch


def test_the_minor_number_is_read_from_the_drivers_own_information_file(tmp_path):
    real = FIXTURES / "reset" / "information-h100-580.159.04"
    d = tmp_path / "driver" / "nvidia" / "gpus" / "0000:00:06.0"
    d.mkdir(parents=True)
    (d / "information").write_bytes(real.read_bytes())
    assert minor_of(str(tmp_path), "00000000:00:06.0") == 0
    (d / "information").write_bytes(real.read_bytes().replace(b"Device Minor: \t 0", b"Device Minor: \t 17"))
    assert minor_of(str(tmp_path), "0000:00:06.0") == 17
    assert minor_of(str(tmp_path), "0000:00:07.0") is None


def slurm_shows(monkeypatch, state: str) -> None:
    """The node as Slurm shows it to `quarantine reset --plan` (tests/helpers/minislurm.py)."""
    from gpuhc.slurm.act.scontrol import Scontrol
    from tests.helpers.minislurm import MiniSlurm

    monkeypatch.setenv("SLURMD_NODENAME", "gpu001")
    table = MiniSlurm({"gpu001": (state, "gpuhc: ecc gpu1 row remap pending" if "DRAIN" in state else None)})
    monkeypatch.setattr("gpuhc.cli.quarantine_cmd._scontrol", lambda config, stage="bootstrap": Scontrol(run=table))


def test_quarantine_reset_plan_prints_the_steps_and_changes_nothing(tmp_path, monkeypatch):
    from gpuhc.sources.snapshot_format import dump_snapshot

    slurm_shows(monkeypatch, "IDLE+DRAIN")
    n = node(tmp_path / "node")
    scen = tmp_path / "scenario.yaml"
    # the node's NVML as a scenario: same GPUs (UUIDs, PCI addresses) as the fake tools know, and
    # NVML's process lists (a scenario without them leaves the plan blind to NVML's holders)
    doc = dump_snapshot(Snapshot(hostname="gpu001", time=1.7e9, nvml=n.read_nvml(), occupancy=n.read_procs()))
    scen.write_text(yaml.safe_dump(doc))
    cfg = tmp_path / "gpuhc.yaml"
    cfg.write_text(yaml.safe_dump({"slurm": {"remediation": n.section()}}))
    before = n.state()
    r = CliRunner().invoke(quarantine, ["reset", "--plan", "--gpus", "1", "--config", str(cfg),
                                        "--nvml-scenario", str(scen)])
    assert r.exit_code == 0, r.output
    assert "reset scope: gpu1 (Hopper or later" in r.output
    assert "holder pid 4242 (nv-hostengine, nvidia-dcgm.service; DCGM's host engine): /dev/nvidia0" in r.output
    assert "stop            " + str(n.root / "systemctl") + " stop nvidia-dcgm" in r.output
    assert r.output.rstrip().endswith("path: reset")
    assert n.state() == before and n.calls() == [n.calls()[0]]  # only `systemctl show`
    r = CliRunner().invoke(quarantine, ["reset", "--plan", "--json", "--config", str(cfg), "--nvml-scenario", str(scen)])
    doc = json.loads(r.output)
    assert r.exit_code == 0 and doc["ok"] and doc["scope"] == [0, 1, 2, 3]
    r = CliRunner().invoke(quarantine, ["reset", "--config", str(cfg), "--nvml-scenario", str(scen)])
    assert r.exit_code == 2 and "only --plan" in r.output
    for bad in ("x", "\u0661"):  # an Arabic-Indic one is no GPU 1
        r = CliRunner().invoke(quarantine, ["reset", "--plan", "--gpus", bad, "--config", str(cfg)])
        assert r.exit_code == 2 and "--gpus" in r.output and "ASCII digits" in r.output


def test_processes_whose_files_cannot_be_read_make_the_plan_refuse(tmp_path, monkeypatch):
    import os as _os

    n = node(tmp_path, procs={5: ("python3", None, ["/dev/nvidia3"])})
    real = _os.scandir

    def scandir(path):
        if str(path).endswith("/5/fd"):
            raise PermissionError(13, "Permission denied")
        return real(path)

    monkeypatch.setattr("gpuhc.node.holders.os.scandir", scandir)  # the fd reader (gpuhc/node/holders.py)
    found, problems = holders(str(n.root / "proc"), Deadline.after(10))
    assert 5 not in {h.pid for h in found}
    assert problems == ["the open files of 1 processes could not be read (not root?): holders may be missing"]


def test_a_service_name_systemctl_could_read_as_an_option_is_refused_with_file_and_line(tmp_path):
    from gpuhc.config.load import load_config
    from gpuhc.errors import ConfigError

    cfg = tmp_path / "gpuhc.yaml"
    cfg.write_text("slurm:\n  remediation:\n    reset:\n      services: [nvidia-dcgm, --force]\n")
    with pytest.raises(ConfigError) as e:
        load_config(str(cfg))
    assert f"{cfg}:4: slurm.remediation.reset.services: items must match" in str(e.value) and "'--force'" in str(e.value)
    cfg.write_text("slurm:\n  remediation:\n    reset:\n      services: [nvidia-dcgm, dcgm-exporter.service, getty@tty1]\n")
    assert load_config(str(cfg)).section("slurm")["remediation"]["reset"]["services"][1] == "dcgm-exporter.service"


def test_a_service_that_will_not_start_again_is_said_and_the_rest_is_still_restored(tmp_path):
    n = node(tmp_path)
    n.change(fail=["start nvidia-dcgm"])
    plan, out, lines = run(n)
    assert not out.ok and out.fallthrough and "NOT everything could be put back" in out.detail, lines
    calls = n.calls()
    assert calls.count("systemctl start nvidia-dcgm") == 3  # in order, once more at once, once more restoring
    assert n.state()["gpus"]["1"]["pm"] == 1 and n.state()["gpus"]["1"]["resets"] == 1
    assert not any(r["step"] == "verify" for r in out.log)  # no verdict on a node left half-restored


def test_a_service_start_that_fails_once_then_runs_does_not_send_the_node_to_a_reboot(tmp_path):
    # Issue 30: a start that failed and then succeeded on the retry still fell through to a reboot.
    n = node(tmp_path)
    n.change(fail_once=["start nvidia-dcgm"])
    plan, out, lines = run(n)
    assert out.ok and not out.fallthrough, lines
    assert n.calls().count("systemctl start nvidia-dcgm") == 2 and n.state()["units"]["nvidia-dcgm"] == "active"


def test_a_reset_that_never_returns_ends_in_budget_restores_and_says_wedged(tmp_path, monkeypatch):
    # Issue 30: subprocess.run(timeout=) killed the child and then waited for it without limit.
    n = node(tmp_path)
    n.change(hang=["-r -i 1"])
    monkeypatch.setattr("gpuhc.slurm.repair.gpureset.REAP_S", 0.5)
    started = time.monotonic()
    try:
        plan, out, lines = run(n, targets=(1,))
    finally:
        n.end_left_behind()
    took = time.monotonic() - started
    assert took < 10.0 + 4 * 0.5 + 8.0, took  # reset_timeout_s, the reaps, the fakes' own calls
    assert not out.ok and out.fallthrough and out.wedged, lines
    assert any("did not end when killed" in x for x in lines), lines
    st = n.state()
    assert st["units"]["nvidia-dcgm"] == "active" and st["gpus"]["1"]["pm"] == 1, n.calls()


def test_an_nvml_read_that_hangs_ends_in_budget_restores_and_says_wedged(tmp_path):
    n = node(tmp_path)
    real = n.read_nvml
    reads = []

    def hangs_after_the_reset():
        reads.append(1)
        if len(reads) > 1:  # the plan's read answers; the fabric wait's, after the reset, hangs
            n.nvml_hangs = True
        return real()

    lines: list[str] = []
    section = n.section(command_timeout_s=2.0)
    started = time.monotonic()
    plan, out = procedure(section, (1,), hangs_after_the_reset, lines.append, Deadline.after(60),
                          read_procs=n.read_procs)
    assert time.monotonic() - started < 2.0 * 3 + 8.0, lines
    assert not out.ok and out.fallthrough and out.wedged, lines
    assert any("NVML hangs" in x for x in lines), lines
    st = n.state()
    assert st["units"]["nvidia-dcgm"] == "active" and st["gpus"]["1"]["resets"] == 1


def _plan_cli(tmp_path, n):
    from gpuhc.sources.snapshot_format import dump_snapshot

    scen = tmp_path / "scenario.yaml"
    scen.write_text(yaml.safe_dump(dump_snapshot(Snapshot(hostname="gpu001", time=1.7e9, nvml=n.read_nvml()))))
    cfg = tmp_path / "gpuhc.yaml"
    cfg.write_text(yaml.safe_dump({"slurm": {"remediation": n.section()}}))
    return CliRunner().invoke(quarantine, ["reset", "--plan", "--gpus", "1", "--config", str(cfg),
                                           "--nvml-scenario", str(scen)])


@pytest.mark.parametrize("state", ["MIXED+DRAIN", "ALLOCATED"])
def test_quarantine_reset_plan_exits_1_while_slurm_shows_jobs_on_the_node(tmp_path, monkeypatch, state):
    # Issue 30: the plan said "go" (exit 0) while Slurm showed jobs on the node.
    slurm_shows(monkeypatch, state)
    r = _plan_cli(tmp_path, node(tmp_path / "node"))
    assert r.exit_code == 1, r.output
    assert f"BLOCKED: Slurm shows jobs on the node (state {state}): a reset kills whatever runs there" in r.output


# slurmd with AutoDetect=nvml on Slurm 23.02 and later: NVML's files, open for the daemon's life
# (what `ls -l /proc/$(pidof slurmd)/fd` shows there: the control device and every GPU's).
SLURMD = (1500, "slurmd", "slurmd", ["/dev/nvidiactl"] + [f"/dev/nvidia{i}" for i in range(4)])


def test_slurmd_holding_the_gpus_makes_the_plan_say_reboot_first_and_the_ladder_takes_it(tmp_path, monkeypatch):
    slurm_shows(monkeypatch, "IDLE+DRAIN")
    n = node(tmp_path / "node", procs={p[0]: p[1:] for p in (DCGM, PERSISTENCED, FM, SLURMD)})
    r = _plan_cli(tmp_path, n)
    assert r.exit_code == 1, r.output
    last = r.output.rstrip().splitlines()[-1]
    assert last.startswith("path: reboot first: slurmd (pid 1500) holds /dev/nvidia0") and "23.02" in last, last
    plan, out, lines = run(n)  # the ladder's procedure: changes nothing, falls through to the reboot rung
    assert not out.ok and out.fallthrough and all(c.startswith("systemctl show") for c in n.calls()), n.calls()


def test_a_gpu_in_mig_mode_is_not_reset(tmp_path):
    n = node(tmp_path)
    lines: list[str] = []
    plan, out = procedure(n.section(), (1,), n.read_nvml, lines.append, Deadline.after(60), lambda: (1,),
                          read_procs=n.read_procs)
    assert not out.ok and out.fallthrough and "in MIG mode" in out.detail
    assert plan.path.startswith("reboot first: gpu1 in MIG mode")
    assert n.calls() == [n.calls()[0]]  # only `systemctl show`: nothing stopped or reset


@pytest.mark.parametrize("version, says", [
    ("slurm 22.05.8", "slurm 22.05: slurmd closes NVML after detecting the GPUs: reset"),
    ("slurm 24.11.1", "slurm 24.11: with AutoDetect=nvml slurmd holds the GPUs for its life: reboot first there"),
    ("slurm 26.05.3", "slurm 26.05: with AutoDetect=nvml"),
    (None, "slurm unknown: with AutoDetect=nvml, 23.02 and later"),
])
def test_the_plan_says_what_the_slurm_release_means_for_the_reset(version, says):
    from gpuhc.slurm.repair.reset_plan import slurm_note

    assert slurm_note(version).startswith(says)


def test_a_plan_with_no_gpu_in_scope_says_so():
    """Without NVML (`quarantine reset --plan` on a node whose driver is gone) nothing is in scope:
    the plan says "no GPU", not a bare "gpu"."""
    from gpuhc.slurm.repair.reset_plan import Plan

    plan = Plan(targets=(), scope=(), together=False, scope_why="NVML unavailable", steps=(), blockers=("no NVML",),
                expected_uuids={})
    assert plan.lines()[0] == "reset scope: no GPU (NVML unavailable)"


def test_the_mapped_devices_tell_a_cuda_program_from_an_nvml_client(tmp_path):
    """Neither the files held open nor the libraries mapped can: on an H100 with driver 580 a
    pynvml loop held nvidia-uvm and mapped libcuda.so as a CUDA program does; only a context maps
    the GPU's file and nvidia-uvm (both seen there, docs/verification.md). The maps are a bounded
    read; maps unread or read only in part say nothing (None), never "a monitor"."""
    from gpuhc.node.holders import MAPS_MAX_BYTES, cuda_context

    d = tmp_path / "proc" / "7"
    d.mkdir(parents=True)
    line = "7f1c2a000000-7f1c2a008000 rw-s 00000000 00:05 4242 {}\n"
    lib = line.format("/usr/local/nvidia/lib64/libcuda.so.580.159.04") + line.format("/dev/nvidiactl")
    (d / "maps").write_text(lib)  # the pynvml loop's
    assert cuda_context(str(tmp_path / "proc"), 7) is False
    for dev in ("/dev/nvidia0", "/dev/nvidia-uvm", "/dev/nvidia17"):
        (d / "maps").write_text(lib + line.format(dev))
        assert cuda_context(str(tmp_path / "proc"), 7) is True, dev
    for other in ("/dev/nvidia-caps/nvidia-cap1", "/dev/nvidia-uvm-tools", "/home/u/dev/nvidia0x"):
        (d / "maps").write_text(lib + line.format(other))
        assert cuda_context(str(tmp_path / "proc"), 7) is False, other
    (d / "maps").write_text(lib * (MAPS_MAX_BYTES // 60 + 1) + line.format("/dev/nvidia0"))
    assert cuda_context(str(tmp_path / "proc"), 7) is None  # past the bound: unknown, not "a monitor"
    assert cuda_context(str(tmp_path / "proc"), 8) is None  # gone, or not ours to read
