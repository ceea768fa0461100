"""gpu-count: NVML reachable, every expected GPU present, none lost."""

from __future__ import annotations


from tests.helpers.snapshots import PCI_IDS, baseline_for, healthy_node, no_nvml, results_of, with_gpu, without_gpu

from gpuhc.checks.base import NVML, PCI, STAGES
from gpuhc.checks.gpu_count import CHECKS
from gpuhc.model.result import Action, Status
from gpuhc.model.snapshot import Snapshot
from tests.helpers.paths import REPO

CHECK = CHECKS[0]


def judge(snapshot, **kw):
    return results_of(CHECK, snapshot, **kw)


def test_runs_in_every_stage_including_prolog():
    assert CHECK.id == "gpu-count" and set(CHECK.stages) == set(STAGES)


def test_healthy_node_with_expected_count_passes():
    (r,) = judge(healthy_node(), expected=8)
    assert r.status is Status.PASS and r.message == "8 of 8 GPUs visible" and r.action is Action.NONE


def test_nvml_unavailable_fails_with_drain_reboot():
    (r,) = judge(no_nvml("Driver Not Loaded"), expected=8)
    assert r.status is Status.FAIL and r.action is Action.DRAIN_REBOOT
    assert r.message == "NVML unavailable: Driver Not Loaded (driver not loaded / GPU lost)"


def test_no_nvml_reading_at_all_fails_too():
    (r,) = judge(Snapshot(hostname="n1", time=0.0, nvml=None))
    assert r.status is Status.FAIL and "NVML unavailable" in r.message


def test_missing_gpu_against_configured_count():
    (r,) = judge(without_gpu(healthy_node(), 3), expected=8)
    assert r.status is Status.FAIL and r.action is Action.DRAIN_REBOOT
    assert r.message == "7 of 8 GPUs visible" and (r.value, r.threshold) == (7, 8)


def test_missing_gpu_named_by_pci_from_the_baseline():
    base = baseline_for(healthy_node())
    (r,) = judge(without_gpu(healthy_node(), 3), baseline=base)
    assert r.status is Status.FAIL
    assert r.message == "7 of 8 GPUs visible; missing gpu3 (0000:5d:00.0)"


def test_slurm_count_then_baseline_then_config():
    """docs/slurm.md, "Expected GPUs": slurm.conf's Gres= first, then the node's own baseline,
    then the config's count (a fallback written for many nodes at once)."""
    base = baseline_for(healthy_node(4))
    (r,) = judge(healthy_node(8), expected=8, expected_from="slurm.conf (/etc/slurm/slurm.conf:12)", baseline=base)
    assert r.status is Status.PASS and r.message == "8 of 8 GPUs visible"
    (r,) = judge(healthy_node(8), expected=8, baseline=base)  # a configured count: the baseline's 4 first
    assert r.status is Status.WARN and r.message == "8 GPUs visible, baseline count is 4"
    (r,) = judge(healthy_node(8), expected=4)
    assert r.status is Status.WARN and r.message == "8 GPUs visible, configured count is 4"


def test_a_node_slurm_gives_no_gpus_is_a_cpu_node():
    """slurm.conf's NodeName line has no gpu in Gres=: no NVML is what the node should look like,
    whatever the config's fleet-wide count says."""
    (r,) = judge(no_nvml("NVML Shared Library Not Found"), expected=0, expected_from="slurm.conf (s.conf:3)")
    assert r.status is Status.PASS and r.message == "no GPUs expected (Slurm gives this node no GPUs), no NVIDIA driver"
    (r,) = judge(no_nvml("Driver Not Loaded"), expected=8, expected_from="slurm.conf (s.conf:4)")
    assert r.status is Status.FAIL and r.action is Action.DRAIN_REBOOT


def test_more_gpus_than_expected_only_warns():
    (r,) = judge(healthy_node(8), expected=4)
    assert r.status is Status.WARN and not r.action.drains
    assert r.message == "8 GPUs visible, configured count is 4"


def test_same_count_different_bus_ids_warns():
    base = baseline_for(healthy_node())
    snap = with_gpu(healthy_node(), 5, pci_bus_id="0000:ac:00.0")
    (r,) = judge(snap, baseline=base)
    assert r.status is Status.WARN and "gpu5 (0000:ab:00.0) not seen" in r.message


def test_gpu_lost_as_named_by_the_nvml_source_fails_for_a_reboot():
    snap = with_gpu(healthy_node(), 2, name="unknown (NVML: GPU is lost)", uuid="", pci_bus_id="")
    (r,) = judge(snap, expected=8)
    assert r.status is Status.FAIL and r.action is Action.DRAIN_REBOOT and r.subject == "gpu2"
    assert r.message == "gpu2 lost: GPU is lost"


def test_gpu_lost_flag_fails_and_keeps_bus_id():
    snap = healthy_node()
    snap.nvml.gpus[6].lost = True  # a source may mark the GPU instead of renaming it
    (r,) = judge(snap, expected=8)
    assert r.status is Status.FAIL and r.message == "gpu6 (0000:ba:00.0) lost: GPU is lost"


def test_without_expectation_any_gpus_pass_and_none_warns():
    (r,) = judge(healthy_node(2))
    assert r.status is Status.PASS and r.message == "2 GPUs visible"
    (r,) = judge(healthy_node(0))
    assert r.status is Status.WARN


def test_prolog_subset_still_counts_the_whole_node():
    (r,) = judge(without_gpu(healthy_node(), 7), expected=8, gpus=[0, 1])
    assert r.status is Status.FAIL and r.message.startswith("7 of 8")


def test_results_are_json_able():
    import json

    results = judge(without_gpu(healthy_node(), 1), baseline=baseline_for(healthy_node()))
    assert results and any(r.status is Status.FAIL for r in results)
    for r in results:
        assert json.loads(json.dumps(r.to_dict())) == r.to_dict()  # no default=: plain JSON only
        json.dumps(r.to_dict())


# ----------------------------------------------------------------------------- the PCI bus


def on_bus(snap, pcis=PCI_IDS):
    snap.pci_gpus = list(pcis)
    return snap


def test_reads_the_pci_bus_as_an_optional_source():
    # Waited for within the check's timeout, then judged without: a wedged sysfs read must not
    # hold NVML's verdict hostage.
    assert CHECK.needs == (NVML,) and CHECK.optional == (PCI,)


def test_gpu_on_the_bus_but_not_in_nvml_fails_without_any_expected_count():
    (r,) = judge(on_bus(without_gpu(healthy_node(), 7)))
    assert r.status is Status.FAIL and r.action is Action.DRAIN_REBOOT
    assert r.subject == "0000:db:00.0" and r.value == "0000:db:00.0"
    assert r.message == "gpu at 0000:db:00.0 on the PCI bus but not visible to NVML (fallen off the bus?)"


def test_every_invisible_gpu_is_named_in_bus_order():
    snap = on_bus(without_gpu(without_gpu(healthy_node(), 5), 1))
    results = judge(snap)
    assert [(r.status, r.subject) for r in results] == [(Status.FAIL, "0000:2a:00.0"), (Status.FAIL, "0000:ab:00.0")]


def test_bus_ids_are_compared_normalised():
    snap = on_bus(healthy_node(), [p.upper().replace("0000:", "") for p in PCI_IDS])  # "18:00.0"
    snap.nvml.gpus[0].pci_bus_id = "00000000:18:00.0"  # NVML's 8-digit domain
    (r,) = judge(snap)
    assert r.status is Status.PASS and r.message == "8 GPUs visible"


def test_all_gpus_on_the_bus_visible_passes_and_unknown_bus_changes_nothing():
    (r,) = judge(on_bus(healthy_node()), expected=8)
    assert r.status is Status.PASS and r.message == "8 of 8 GPUs visible"
    (r,) = judge(without_gpu(healthy_node(), 7))  # pci_gpus None: not read, nothing to compare
    assert r.status is Status.PASS and r.message == "7 GPUs visible"


def test_short_count_names_the_gpu_on_the_bus_in_one_result():
    (r,) = judge(on_bus(without_gpu(healthy_node(), 7)), expected=8)
    assert r.status is Status.FAIL and r.action is Action.DRAIN_REBOOT and r.subject == "node"
    assert r.message == ("7 of 8 GPUs visible; gpu at 0000:db:00.0 on the PCI bus but not visible to NVML "
                         "(fallen off the bus?)")
    (r,) = judge(on_bus(without_gpu(without_gpu(healthy_node(), 7), 0)), baseline=baseline_for(healthy_node()))
    assert r.message == ("6 of 8 GPUs visible; missing gpu0 (0000:18:00.0), gpu7 (0000:db:00.0); gpus at "
                         "0000:18:00.0, 0000:db:00.0 on the PCI bus but not visible to NVML (fallen off the bus?)")


def test_a_gpu_the_bus_has_beyond_the_expected_count_still_fails():
    snap = on_bus(healthy_node(4), PCI_IDS[:5])
    (r,) = judge(snap, expected=4)  # the count is right, the node still lost a GPU
    assert (r.status, r.subject, r.action) == (Status.FAIL, "0000:9a:00.0", Action.DRAIN_REBOOT)


def test_prolog_reports_a_gpu_gone_from_nvml_whoever_asked():
    (r,) = judge(on_bus(without_gpu(healthy_node(), 7)), gpus=[0, 1])
    assert r.status is Status.FAIL and r.subject == "0000:db:00.0"


def test_a_lost_gpu_without_bus_id_is_not_reported_twice():
    snap = on_bus(with_gpu(healthy_node(), 2, name="unknown (NVML: GPU is lost)", uuid="", pci_bus_id=""))
    (r,) = judge(snap)
    assert r.status is Status.FAIL and r.action is Action.DRAIN_REBOOT and r.subject == "gpu2"
    # One nameless lost GPU cannot stand for two unmatched bus GPUs: then both are named.
    results = judge(on_bus(without_gpu(snap, 3)))
    assert sorted(r.subject for r in results) == ["0000:3a:00.0", "0000:5d:00.0", "gpu2"]


def test_the_bus_comparison_can_be_turned_off():
    # A container given 2 of the host's 8 GPUs sees all 8 in sysfs: the site says pci_bus: false.
    (r,) = judge(on_bus(healthy_node(2)), pci_bus=False)
    assert r.status is Status.PASS and r.message == "2 GPUs visible"


def test_nvml_unavailable_says_only_that():
    snap = on_bus(no_nvml())
    (r,) = judge(snap)
    assert r.status is Status.FAIL and r.message.startswith("NVML unavailable")


class _HungBus:
    """Scenario sysfs whose PCI listing never answers (a wedged sysfs read)."""

    def __init__(self, inner, gate):
        self.inner, self.gate = inner, gate

    def ib_ports(self):
        return self.inner.ib_ports()

    def aer(self):
        return self.inner.aer()

    def nvidia_gpus(self):
        self.gate.wait()
        return self.inner.nvidia_gpus()


def _run(tmp_path, monkeypatch=None, hang=False):
    import os
    import threading

    from gpuhc.config.load import Config, defaults, schema
    from gpuhc.run.runner import run_stage
    from gpuhc.run.report import RunOptions
    from gpuhc.sources import SourceSpec, build_sources

    scenario = os.path.join(str(REPO),
                            "examples", "scenarios", "gpu-missing-7.yaml")
    gate = threading.Event()  # never set while the run lasts
    if hang:
        def hung(spec, step=None):
            src = build_sources(spec, step)
            src.sysfs = _HungBus(src.sysfs, gate)
            return src
        monkeypatch.setattr("gpuhc.run.runner.build_sources", hung)
    data = defaults(schema())
    data["checks"] = {"gpu-count": {"timeout_s": 0.5}}
    opts = RunOptions(stage="passive", config=Config(data), sources=SourceSpec(nvml_scenario=scenario),
                      state_dir=str(tmp_path / "s"), hostname="gpu001", only=("gpu-count",))
    try:
        return run_stage(opts)
    finally:
        gate.set()


def test_runner_reads_the_bus_for_gpu_count(tmp_path):
    (r,) = _run(tmp_path).results
    assert r.status is Status.FAIL and r.subject == "0000:db:00.0"


def test_a_hung_bus_read_does_not_hold_nvml_s_verdict(tmp_path, monkeypatch):
    report = _run(tmp_path, monkeypatch, hang=True)
    (r,) = report.results
    assert r.status is Status.PASS and r.message == "7 GPUs visible"  # judged without the bus
    assert any("gpu-count: judged without pci" in n for n in report.notes)


# ----------------------------------------------------------------------------- what the boards are


def test_a_baseline_of_this_node_adds_nothing():
    (r,) = judge(healthy_node(), baseline=baseline_for(healthy_node()))
    assert r.status is Status.PASS and r.message == "8 of 8 GPUs visible"


def test_another_model_than_the_baseline_is_the_wrong_board():
    snap = with_gpu(healthy_node(), 4, name="NVIDIA H100 PCIe")
    base = baseline_for(healthy_node())
    results = judge(snap, baseline=base, gpus=[0])  # node-wide, also in the prolog
    fails = [r for r in results if r.status is Status.FAIL]
    assert [(r.subject, r.action) for r in fails] == [("gpu4", Action.DRAIN_TICKET)]
    assert fails[0].message == "gpu4 (0000:9a:00.0) is NVIDIA H100 PCIe, baseline has NVIDIA H100 80GB HBM3 (wrong board?)"
    assert (fails[0].value, fails[0].threshold) == ("NVIDIA H100 PCIe", "NVIDIA H100 80GB HBM3")


def test_the_node_model_is_used_when_the_baseline_has_no_per_gpu_name():
    base = baseline_for(healthy_node(2))
    for info in base["gpus"].values():
        del info["name"]
    base["gpu_model"] = "NVIDIA H200"
    results = judge(healthy_node(2), baseline=base)
    assert [(r.status, r.subject) for r in results] == [(Status.PASS, "node"), (Status.FAIL, "gpu0"), (Status.FAIL, "gpu1")]


def test_a_lost_gpu_is_not_also_the_wrong_model():
    snap = with_gpu(healthy_node(), 2, name="unknown (NVML: GPU is lost)", uuid="", pci_bus_id="")
    results = judge(snap, baseline=baseline_for(healthy_node()))
    assert [(r.status, r.action) for r in results] == [(Status.FAIL, Action.DRAIN_REBOOT)]
    assert results[0].message == "gpu2 lost: GPU is lost"


def test_another_driver_warns_and_softens_a_renamed_model():
    base = baseline_for(healthy_node())
    snap = healthy_node()
    snap.nvml.driver_version = "580.95.05"
    (p, w) = judge(snap, baseline=base)
    assert p.status is Status.PASS
    assert w.status is Status.WARN and not w.action.drains and w.subject == "node"
    assert w.message == ("driver 580.95.05, baseline captured with 550.90.07 "
                         "(re-capture the baseline after a driver roll-out)")
    # A new driver may name the same board differently: not a drain while the driver changed too.
    renamed = with_gpu(snap, 0, name="NVIDIA H100 SXM5 80GB")
    statuses = {(r.subject, r.status) for r in judge(renamed, baseline=base)}
    assert ("gpu0", Status.WARN) in statuses and Status.FAIL not in {s for _, s in statuses}


def test_another_serial_at_a_baseline_bus_id_warns():
    base = baseline_for(healthy_node())
    for pci, info in base["gpus"].items():
        info["serial"] = "1652320000" + pci[5:7]
    snap = healthy_node()
    for g in snap.nvml.gpus:
        g.serial = "1652320000" + g.pci_bus_id[5:7]
    (r,) = judge(snap, baseline=base)
    assert r.status is Status.PASS
    snap.nvml.gpus[5].serial = "1652320099999"
    snap.nvml.gpus[6].serial = None  # NOT_SUPPORTED: nothing to compare
    (_, w) = judge(snap, baseline=base)
    assert w.status is Status.WARN and w.subject == "gpu5" and not w.action.drains
    assert w.message == "gpu5 (0000:ab:00.0) serial 1652320099999, baseline has 1652320000ab (board swapped? re-capture the baseline)"


def test_without_a_baseline_nothing_is_compared():
    snap = with_gpu(healthy_node(), 4, name="NVIDIA H100 PCIe", serial="x")
    (r,) = judge(snap, expected=8)
    assert r.status is Status.PASS


def test_prolog_fails_a_job_gpu_nvml_does_not_list_with_no_expected_count():
    """SLURM_JOB_GPUS=6,7 on a node whose NVML lists no GPU 7 (and no bus to tell): before, a
    warning and exit 0, so the job started on a GPU that had vanished."""
    results = judge(without_gpu(healthy_node(), 7), gpus=[6, 7])
    failing = [r for r in results if r.status is Status.FAIL]
    assert [(r.value, r.action) for r in failing] == [([7], Action.DRAIN_REBOOT)]
    assert failing[0].message == ("allocated GPU(s) 7 not listed by NVML (it lists 0, 1, 2, 3, 4, 5, 6): "
                                  "gone from the node?")


def test_job_gpus_that_nvml_lists_pass():
    (r,) = judge(healthy_node(), gpus=[6, 7])
    assert r.status is Status.PASS


# ------------------------------------------------------------------ CPU nodes (docs/slurm.md, "Mixed clusters")

# What NVML's own start says on a node with no NVIDIA driver: the library is absent
# (gpuhc/sources/nvml_util.py's reasons for NVML_ERROR_LIBRARY_NOT_FOUND / DRIVER_NOT_LOADED).
NO_LIBRARY = "NVML Shared Library Not Found"


def cpu_node(bus=()):
    snap = no_nvml(NO_LIBRARY, hostname="cpu001")
    snap.pci_gpus = list(bus)
    return snap


def test_cpu_node_declared_with_zero_expected_passes_without_nvml():
    (r,) = judge(cpu_node(), expected=0)
    assert r.status is Status.PASS and r.action is Action.NONE
    assert r.message == "no GPUs expected (node.expected_gpus: 0), no NVIDIA driver"
    # the bus unread (a replay without pci_gpus) changes nothing: the admin said no GPUs
    (r,) = judge(no_nvml(NO_LIBRARY), expected=0)
    assert r.status is Status.PASS


def test_cpu_node_with_no_count_and_an_empty_bus_passes():
    (r,) = judge(cpu_node())
    assert r.status is Status.PASS and r.message.startswith("a CPU node: no NVIDIA GPU on the PCI bus")


def test_gpu_node_whose_driver_vanished_still_fails():
    # boards on the bus, no count configured: a GPU node without its driver
    (r,) = judge(cpu_node(PCI_IDS[:8]))
    assert r.status is Status.FAIL and r.action is Action.DRAIN_REBOOT and "NVML unavailable" in r.message
    # an expected count says GPU node whatever the bus shows (all boards gone from the bus too)
    (r,) = judge(cpu_node(), expected=8)
    assert r.status is Status.FAIL and r.action is Action.DRAIN_REBOOT
    # so does a baseline with a count
    (r,) = judge(cpu_node(), baseline=baseline_for(healthy_node()))
    assert r.status is Status.FAIL
    # and a bus that could not be read is no proof of a CPU node
    (r,) = judge(no_nvml(NO_LIBRARY))
    assert r.status is Status.FAIL


def test_gpus_on_the_bus_of_a_node_declared_cpu_warn_never_drain():
    (r,) = judge(cpu_node(PCI_IDS[:2]), expected=0)
    assert r.status is Status.WARN and r.action is Action.NONE
    assert "expected_gpus is 0, but the PCI bus lists 2 NVIDIA GPU(s)" in r.message and NO_LIBRARY in r.message


def test_nvml_answering_timeout_once_is_could_not_judge_not_a_drain():
    # NVML_ERROR_TIMEOUT is "busy", not "gone": one run cannot judge; the wedged-driver rule
    # (gpuhc/slurm/flows/wedged.py) drains a node whose NVML keeps timing out.
    for why in ("Timeout", "nvmlInit failed: Timeout", "nvmlDeviceGetCount failed: Timeout"):
        (r,) = judge(no_nvml(why), expected=8)
        assert r.status is Status.ERROR and r.action is Action.NONE, why
        assert r.message.startswith("NVML timed out: ") and "wedged driver" in r.message
    (r,) = judge(no_nvml("nvmlInit failed: Unknown Error"), expected=8)
    assert r.status is Status.FAIL  # any other reason NVML is unavailable still drains
