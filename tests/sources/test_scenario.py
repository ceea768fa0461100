"""Scenario replay: the format (defaults, templates, steps, extends), its sources, and its errors.

Through ``load_scenario``, the one way in: it also covers the document checks behind it
(gpuhc/sources/scenario_validate.py, snapshot_validate.py) and the records built from them
(snapshot_build.py), which a file can only reach through the loader and whose errors are worded
for the file it names."""

from __future__ import annotations

import glob
import os
import textwrap

import pytest

from gpuhc.errors import SourceError
from gpuhc.model.kernel import EventKind
from gpuhc.sources import SourceSpec, build_sources
from gpuhc.sources.scenario import load_scenario
from tests.helpers.paths import REPO

ROOT = str(REPO)
EXAMPLES = sorted(glob.glob(os.path.join(ROOT, "examples", "scenarios", "*.yaml")))
DEMO = os.path.join(ROOT, "gpuhc", "data", "scenarios", "demo-8xh100.yaml")

BASE = """\
driver_version: "580.95.05"
cuda_driver_version: "13.0"
defaults:
  name: NVIDIA H100 80GB HBM3
  uuid: GPU-{index}
  nvlinks: {count: 4, active: true, errors: {replay: 0}}
  clock_event_samples: [0x1]
"""


def write(tmp_path, text: str, name: str = "s.yaml") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


# ----------------------------------------------------------------------------- format


def test_defaults_templates_and_list_entries(tmp_path):
    p = write(tmp_path, BASE + 'gpus:\n  - {pci_bus_id: "0000:18:00.0"}\n  - {pci_bus_id: "B3:00.0", name: Other}\n')
    s = load_scenario(p)
    a, b = s.nvml.gpus
    assert (a.index, a.uuid, a.name, a.pci_bus_id) == (0, "GPU-0", "NVIDIA H100 80GB HBM3", "0000:18:00.0")
    assert (b.index, b.uuid, b.name) == (1, "GPU-1", "Other")
    assert b.pci_bus_id == "B3:00.0"  # stored as written; checks compare with norm_pci
    assert len(a.nvlinks) == 4 and a.nvlinks[3].errors == {"replay": 0} and a.nvlinks[3].active is True
    assert a.clock_event_samples == [1]
    assert s.nvml.available and s.nvml.driver_version == "580.95.05" and s.nvml.cuda_driver_version == "13.0"
    assert (s.steps, s.step) == (1, 0)


def test_count_with_index_mapping_overrides(tmp_path):
    p = write(tmp_path, BASE + """\
  pci_bus_id: "0000:{index}0:00.0"
count: 3
gpus:
  2: {temp_gpu_c: 91, nvlinks: [{link: 1, active: false}, {link: 2, errors: {crc: 5}}]}
""")
    s = load_scenario(p)
    assert [g.index for g in s.nvml.gpus] == [0, 1, 2]
    g = s.nvml.gpus[2]
    assert g.temp_gpu_c == 91 and s.nvml.gpus[0].temp_gpu_c is None and g.pci_bus_id == "0000:20:00.0"
    assert [link.active for link in g.nvlinks] == [True, False, True, True]
    assert g.nvlinks[2].errors == {"replay": 0, "crc": 5}  # merged into the inherited counters


def test_float_fields_accept_integers(tmp_path):
    p = write(tmp_path, BASE + 'gpus:\n  - {pci_bus_id: "0000:18:00.0", power_w: 70, power_limit_w: 700}\n')
    g = load_scenario(p).nvml.gpus[0]
    assert g.power_w == 70.0 and isinstance(g.power_limit_w, float)


def test_steps_grow_and_clamp(tmp_path):
    p = write(tmp_path, BASE + """\
        gpus: [{pci_bus_id: "0000:18:00.0"}, {pci_bus_id: "0000:2a:00.0"}]
        kernel_log: ["2025-03-04T10:00:00,000000+00:00 systemd[1]: boot"]
        steps:
          - gpus: {1: {nvlinks: [{link: 0, errors: {replay: 50}}]}}
          - gpus: {0: {ecc_volatile_uncorrected: 1}}
            kernel_log: ["2025-03-04T10:05:00,000000+00:00 systemd[1]: later"]
            count: 1
        """.replace("        ", ""))
    replay = [load_scenario(p, k).nvml.gpus[-1].nvlinks[0].errors["replay"] for k in range(2)]
    assert replay == [0, 50]
    s2 = load_scenario(p, 2)
    assert s2.steps == 3 and s2.step == 2 and len(s2.nvml.gpus) == 1  # count dropped GPU 1 at step 2
    assert s2.nvml.gpus[0].ecc_volatile_uncorrected == 1
    assert s2.kernel_lines is not None and len(s2.kernel_lines) == 2  # lines appended, not replaced
    assert load_scenario(p, 99).step == 2  # clamps to the last state
    assert load_scenario(p, None).step == 0


def test_kernel_log_lines_go_through_the_real_parser(tmp_path):
    p = write(tmp_path, BASE + """gpus: [{pci_bus_id: "0000:5d:00.0"}]
kernel_log:
  - "2025-03-04T10:03:12,448120+00:00 NVRM: Xid (PCI:0000:5d:00): 79, pid=1, name=x, GPU has fallen off the bus."
""")
    s = load_scenario(p)
    assert s.has_kernel_log and not s.has_sysfs
    log = s.kernel_log_source().read()
    assert [(e.kind, e.code, e.pci) for e in log.events] == [(EventKind.XID, 79, "0000:5d:00.0")]
    assert log.last_time is not None and "scenario kernel_log" in log.source


def test_a_recordings_boot_reaches_the_kernel_log_so_two_boots_are_told_apart(tmp_path):
    """A port's downtime and the kernel-log cursor start again at a reboot, which a live node
    tells by its boot_id; a replay gives it as ``boot_id`` (both kinds of kernel section)."""
    lines = BASE + 'boot_id: "b-1"\nkernel_log: ["2025-03-04T10:03:12,448120+00:00 NVRM: loading"]\n'
    assert load_scenario(write(tmp_path, lines)).kernel_log_source().read().boot_id == "b-1"
    events = BASE + 'boot_id: "b-2"\nkernel: {events: []}\nsteps: [{boot_id: "b-3"}]\n'
    assert load_scenario(write(tmp_path, events, "e.yaml"), 0).kernel_log_source().read().boot_id == "b-2"
    assert load_scenario(write(tmp_path, events, "e.yaml"), 1).boot_id == "b-3"
    assert load_scenario(write(tmp_path, BASE + "kernel_log: []\n", "n.yaml")).kernel_log_source().read().boot_id is None
    with pytest.raises(SourceError, match=r"boot_id.*must be"):
        load_scenario(write(tmp_path, BASE + "boot_id: 7\n", "bad.yaml"))


def test_recorded_kernel_events_replay_exactly(tmp_path):
    p = write(tmp_path, BASE + """gpus: [{pci_bus_id: "0000:5d:00.0"}]
kernel:
  source: /dev/kmsg
  last_time: 1741082700
  events:
    - {kind: xid, time: 1741082592.4, message: "Xid 79", pci: "0000:5d:00.0", code: 79}
    - {kind: ib_link, time: 1741082600, message: "Port: 1 Link DOWN", device: mlx5_1, port: 1, state: DOWN}
steps:
  - kernel: {events: [{kind: sxid, time: 1741082650, message: "SXid 20034", code: 20034}], last_time: 1741082800}
""")
    log = load_scenario(p, 1).kernel_log_source().read()
    assert [e.kind for e in log.events] == [EventKind.XID, EventKind.IB_LINK, EventKind.SXID]
    assert log.last_time == 1741082800.0 and log.source == "/dev/kmsg" and log.events[1].time == 1741082600.0


def test_ib_defaults_ports_and_aer_merge_in_steps(tmp_path):
    p = write(tmp_path, BASE + """gpus: [{pci_bus_id: "0000:18:00.0"}]
ib_defaults: {port: 1, state: ACTIVE, phys_state: LinkUp, rate_gbps: 400, counters: {link_downed: 0, symbol_error: 0}}
ib_ports: [{device: mlx5_0}, {device: mlx5_1}]
aer: [{pci: "18:00.0", correctable: 0, fatal: 0}]
steps:
  - ib_ports: [{device: mlx5_1, port: 1, state: DOWN, counters: {link_downed: 1}}, {device: mlx5_2}]
    aer: [{pci: "0000:18:00.0", correctable: 3}]
""")
    s0, s1 = load_scenario(p, 0), load_scenario(p, 1)
    assert s0.has_sysfs and [p.subject for p in s0.sysfs_source().ib_ports()] == ["mlx5_0/1", "mlx5_1/1"]
    assert s0.ib_ports[0].rate_gbps == 400.0 and s0.aer[0].pci == "0000:18:00.0"
    ports = {p.subject: p for p in s1.sysfs_source().ib_ports()}
    assert ports["mlx5_1/1"].state == "DOWN" and ports["mlx5_1/1"].phys_state == "LinkUp"
    assert ports["mlx5_1/1"].counters == {"link_downed": 1, "symbol_error": 0}
    assert ports["mlx5_2/1"].state == "ACTIVE"  # a new port gets ib_defaults
    assert s1.sysfs_source().aer()[0].correctable == 3 and s1.aer[0].fatal == 0


def test_nvml_unavailable_has_no_gpus(tmp_path):
    p = write(tmp_path, BASE + 'gpus: [{pci_bus_id: "0000:18:00.0"}]\nnvml: {available: false, error: "driver not loaded"}\n')
    r = load_scenario(p).nvml_source().read()
    assert (r.available, r.error, r.gpus) == (False, "driver not loaded", [])


def test_sources_hand_out_copies(tmp_path):
    p = write(tmp_path, BASE + 'gpus: [{pci_bus_id: "0000:18:00.0"}]\n')
    src = load_scenario(p).nvml_source()
    first = src.read()
    first.gpus[0].name = "changed"
    assert src.read().gpus[0].name == "NVIDIA H100 80GB HBM3"


def test_extends_applies_on_top_of_the_parent_base(tmp_path):
    write(tmp_path, BASE + 'gpus: [{pci_bus_id: "0000:18:00.0"}, {pci_bus_id: "0000:2a:00.0"}]\n'
          "steps:\n  - gpus: {0: {temp_gpu_c: 99}}\n", name="parent.yaml")
    os.makedirs(tmp_path / "sub")
    child = write(tmp_path, "extends: ../parent.yaml\ndefaults: {vbios: X}\ncount: 3\n"
                  "gpus: {1: {name: Child}, 2: {pci_bus_id: '0000:3a:00.0'}}\n",
                  name="sub/child.yaml")
    s = load_scenario(child, 5)
    assert [g.name for g in s.nvml.gpus] == ["NVIDIA H100 80GB HBM3", "Child", "NVIDIA H100 80GB HBM3"]
    assert all(g.vbios == "X" for g in s.nvml.gpus) and s.nvml.gpus[2].uuid == "GPU-2"
    assert s.steps == 1 and s.nvml.gpus[0].temp_gpu_c is None  # the parent's steps are not inherited


def test_a_parent_is_merged_once_per_text_and_what_a_child_adds_stays_the_childs(tmp_path, monkeypatch):
    """A long process (the campaign model) loads many files that extend the same scenarios: a
    parent whose files read the same is not parsed, validated and merged again, and an edit to
    it, or to its own parent, is seen at the next load."""
    from gpuhc.sources import scenario

    write(tmp_path, BASE + 'gpus: [{pci_bus_id: "0000:18:00.0"}, {pci_bus_id: "0000:2a:00.0"}]\n', name="grand.yaml")
    write(tmp_path, "extends: grand.yaml\ndefaults: {vbios: P}\n", name="parent.yaml")
    a = write(tmp_path, "extends: parent.yaml\ngpus: {0: {name: A, nvlinks: [{link: 1, errors: {crc: 9}}]}}\n",
              name="a.yaml")
    b = write(tmp_path, "extends: parent.yaml\n", name="b.yaml")
    parsed, real = [], scenario.load_file_text
    monkeypatch.setattr(scenario, "load_file_text", lambda text, path: parsed.append(os.path.basename(path))
                        or real(text, path))
    monkeypatch.setattr(scenario, "_bases", {})
    assert load_scenario(a).nvml.gpus[0].name == "A"
    fresh_b = load_scenario(b)
    assert parsed == ["a.yaml", "parent.yaml", "grand.yaml", "b.yaml"]
    assert [(g.name, g.vbios, g.nvlinks[1].errors) for g in fresh_b.nvml.gpus] == \
        [("NVIDIA H100 80GB HBM3", "P", {"replay": 0})] * 2  # nothing of a.yaml's
    for _ in range(2):
        assert load_scenario(a).nvml.gpus[0].nvlinks[1].errors == {"replay": 0, "crc": 9}
        assert load_scenario(b) == fresh_b
    assert parsed.count("grand.yaml") == 1 and parsed.count("parent.yaml") == 1
    write(tmp_path, BASE.replace("H100 80GB HBM3", "H200") + 'gpus: [{pci_bus_id: "0000:18:00.0"}]\n',
          name="grand.yaml")
    assert [g.name for g in load_scenario(b).nvml.gpus] == ["NVIDIA H200"] and parsed.count("grand.yaml") == 2
    write(tmp_path, "extends: grand.yaml\ndefaults: {vbios: P}\ncount: {}\n", name="parent.yaml")
    with pytest.raises(SourceError, match="parent.yaml"):  # a broken parent is never served from before
        load_scenario(b)


def test_build_sources_uses_every_section_of_a_scenario():
    spec = SourceSpec(nvml_scenario=os.path.join(ROOT, "examples", "scenarios", "ib-flapping.yaml"))
    src = build_sources(spec)
    assert src.replay is True
    assert len(src.nvml.read().gpus) == 8
    assert len(src.sysfs.ib_ports()) == 8 and len(src.sysfs.aer()) == 8
    assert sum(e.kind == EventKind.IB_LINK for e in src.kernel_log.read().events) == 7


def test_pci_gpus_are_normalised_and_a_step_replaces_them(tmp_path):
    p = write(tmp_path, BASE + 'gpus: [{pci_bus_id: "0000:18:00.0"}]\npci_gpus: ["18:00.0", "0000:DB:00.0"]\n'
              "steps:\n  - pci_gpus: []\n")
    assert load_scenario(p, 0).sysfs_source().nvidia_gpus() == ["0000:18:00.0", "0000:db:00.0"]
    assert load_scenario(p, 1).sysfs_source().nvidia_gpus() == []
    assert load_scenario(p, 0).has_sysfs  # pci_gpus alone is a sysfs recording


def test_a_scenario_without_pci_gpus_never_reads_the_live_bus(tmp_path):
    p = write(tmp_path, BASE + 'gpus: [{pci_bus_id: "0000:18:00.0"}]\n')
    src = build_sources(SourceSpec(nvml_scenario=p))
    # IB/AER still come from the live tree (as before), but the GPUs on the bus are unknown: a
    # replayed 1-GPU node must not "lose" the real machine's 8 GPUs.
    assert src.pci is not None and src.pci.nvidia_gpus() is None
    tree = build_sources(SourceSpec(nvml_scenario=p, sysfs_root=str(tmp_path)))
    assert tree.pci is None and tree.sysfs.nvidia_gpus() is None  # the tree has no sys/bus/pci


def test_the_scenario_bus_is_what_a_healthy_node_shows():
    src = build_sources(SourceSpec(nvml_scenario=os.path.join(ROOT, "examples", "scenarios", "healthy-8xh100.yaml")))
    assert src.pci is None and src.sysfs.nvidia_gpus() == sorted(g.pci_bus_id for g in src.nvml.read().gpus)


# ----------------------------------------------------------------------------- the shipped files


@pytest.mark.parametrize("path", EXAMPLES + [DEMO], ids=os.path.basename)
def test_every_shipped_scenario_loads_at_every_step(path):
    first = load_scenario(path, 0)
    for k in range(first.steps + 1):
        s = load_scenario(path, k)
        assert s.description and s.has_kernel_log and s.has_sysfs  # hermetic: nothing read live
        assert s.kernel_log_source().read().last_time is not None
        if s.nvml.available:
            assert all(g.name and g.uuid and g.pci_bus_id for g in s.nvml.gpus)


def test_the_examples_cover_every_fault_class():
    names = {os.path.basename(p) for p in EXAMPLES}
    for want in ("healthy-8xh100", "healthy-8xh200", "xid79-fallen-off-bus", "ecc-uncorrectable",
                 "row-remap-pending", "nvlink-down", "nvlink-errors-growing", "pcie-width-x8", "hw-slowdown",
                 "thermal-hot-gpu", "power-capped", "ib-port-down", "ib-flapping", "fabric-not-ready",
                 "gpu-missing-7", "nvml-unavailable"):
        assert want + ".yaml" in names


def test_demo_node_matches_the_healthy_example():
    demo = load_scenario(DEMO)
    healthy = load_scenario(os.path.join(ROOT, "examples", "scenarios", "healthy-8xh100.yaml"))
    assert demo.nvml == healthy.nvml and demo.ib_ports == healthy.ib_ports and demo.pci_gpus == healthy.pci_gpus


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "text, line, words",
    [
        ("gpuz: []\n", 1, "gpuz: unknown key 'gpuz'"),
        (BASE + "gpus:\n  - {pci_bus_id: x, temprature: 3}\n", 9, "gpus.0.temprature: unknown GPU field 'temprature'"),
        (BASE + "gpus:\n  - pci_bus_id: x\n    temp_gpu_c: hot\n", 10, "gpus.0.temp_gpu_c: must be an integer"),
        (BASE + "gpus:\n  - pci_bus_id: x\n    ecc_mode: 1\n", 10, "ecc_mode: must be true or false"),
        ("cuda_driver_version: 12.4\n", 1, "cuda_driver_version: must be a string (quote it)"),
        ('gpus: [{uuid: a, pci_bus_id: "0000:18:00.0"}]\n', 1, "GPU 0 has no name"),
        (BASE + "count: 1\ngpus: {3: {name: x}}\n", 9, "gpus.3: GPU 3 does not exist"),
        (BASE + "gpus:\n  - {pci_bus_id: x, nvlinks: [{active: false}]}\n", 9, "each NVLink needs its `link`"),
        (BASE + "gpus:\n  - {pci_bus_id: x, nvlinks: {active: true}}\n", 9, "needs `count`"),
        (BASE + "gpus:\n  - {pci_bus_id: x, clock_event_samples: [-1]}\n", 9, "non-negative"),
        (BASE + "gpus: [{pci_bus_id: x}]\nsteps:\n  - gpus: {0: {bogus: 1}}\n", 10, "steps.0.gpus.0.bogus"),
        (BASE + "gpus: [{pci_bus_id: x}]\nkernel_log: [a]\nkernel: {events: []}\n", 10, "not both"),
        ("kernel:\n  events:\n    - {kind: xyz, message: m}\n", 3, "kernel.events.0.kind: kind must be one of"),
        ("kernel_log: a line\n", 1, "kernel_log must be a list"),
        ("ib_ports:\n  - {device: mlx5_0, speed: 400}\n", 2, "unknown IB port field 'speed'"),
        ("ib_ports:\n  - {state: ACTIVE}\n", 2, "an IB port needs `device`"),
        ("defaults: {index: 3}\n", 1, "set index per GPU"),
        ("gpus: {x: {}}\n", 1, "GPU keys must be GPU indices"),
        ("extends: nowhere.yaml\n", 1, "no such scenario"),
        ("pci_gpus: 0000:18:00.0\n", 1, "pci_gpus: pci_gpus must be a list of PCI addresses"),
        ('pci_gpus:\n  - "0000:18:00.0"\n  - gpu7\n', 3, "pci_gpus.1: must be a PCI address"),
        ("steps:\n  - pci_gpus: [7]\n", 2, "steps.0.pci_gpus.0: must be a PCI address"),
        ("gpus: [\n", 2, "not valid YAML"),
        ("- a\n- b\n", None, "a scenario must be a mapping"),
    ],
)
def test_broken_scenarios_name_file_line_and_key(tmp_path, text, line, words):
    p = write(tmp_path, text)
    with pytest.raises(SourceError) as e:
        load_scenario(p, 0)
    msg = str(e.value)
    assert words in msg
    assert msg.startswith(p + (f":{line}:" if line else ""))


def test_missing_file_is_a_source_error(tmp_path):
    with pytest.raises(SourceError, match="cannot read scenario"):
        load_scenario(str(tmp_path / "nope.yaml"))


def test_extends_loop_is_caught(tmp_path):
    write(tmp_path, "extends: b.yaml\n", name="a.yaml")
    write(tmp_path, "extends: a.yaml\n", name="b.yaml")
    with pytest.raises(SourceError, match="loop"):
        load_scenario(str(tmp_path / "a.yaml"))


def test_a_recordings_syslog_stamps_are_of_its_own_year(tmp_path):
    """A syslog line prints no year. A recording replayed later is dated by its own ``time``,
    not today's clock: mlx5's port lines of a 2025 recording (the shape of the real dmesg of
    tests/fixtures/kernel_log/real/08_*) read as 2025, so the port's DOWN and ACTIVE lines bound
    its downtime then (the campaign's syslog-shaped nodes held a port down for ever)."""
    import time

    path = tmp_path / "s.yaml"
    path.write_text(
        f"extends: {REPO / 'examples' / 'scenarios' / 'healthy-8xh100.yaml'}\n"
        "time: 1741172700.0\n"  # 2025-03-05T11:05:00Z
        "kernel_log:\n"
        '  - "Mar  4 10:05:00 gpu001 kernel: mlx5_core 0000:4b:00.0 mlx5_3: Port: 1 Link DOWN"\n'
        '  - "Mar  4 11:05:00 gpu001 kernel: mlx5_core 0000:4b:00.0 mlx5_3: Port: 1 Link ACTIVE"\n')
    log = load_scenario(str(path)).kernel_log_source().read()
    assert log.last_time is not None and time.gmtime(log.last_time)[:4] == (2025, 3, 4, 11)
