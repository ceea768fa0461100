"""gpuhc/node/gpumap.py: Slurm's GPU numbers to the hardware, as slurmd numbers them (docs/facts.md,
"Slurm's GPU numbers, MIG and shared GPUs").

Also covers gpuhc/node/gres_conf.py, the parser of its inputs: most cases are a gres.conf text and a
MIG-minors table taken all the way to the hardware, and the few that stop at the parser (a bad
line, a range too large) build on the same fixture tables."""

from __future__ import annotations

import pytest

from gpuhc.node.gpumap import build, identity, natural_key, scope, select, slurm_devices
from gpuhc.node.gres_conf import GpuMapError, parse_gres_conf, parse_mig_minors
from gpuhc.model.nvml import GpuReading, MigInstance, NvmlReading
from gpuhc.sources.scenario import load_scenario
from tests.helpers.paths import SCENARIOS

# Lines NVIDIA publishes from a real mig-minors table (MIG user guide, "Device Nodes and
# Capabilities"; nvidia-container-toolkit's nvcaps comments): the formula the fixtures use must
# give these exactly.
PUBLISHED = ["config 1", "monitor 2", "gpu0/gi0/access 3", "gpu0/gi0/ci0/access 4", "gpu0/gi0/ci1/access 5",
             "gpu3/gi3/ci3/access 439", "gpu6/gi11/ci7/access 920", "gpu31/gi14/ci7/access 4322"]


def table(gpus: int) -> str:
    """The driver's whole mig-minors table for ``gpus`` GPUs (15 GPU instances of 8 compute
    instances each per GPU), in the driver's layout."""
    lines = ["config 1", "monitor 2"]
    for g in range(gpus):
        for gi in range(15):
            base = 3 + g * 135 + gi * 9
            lines.append(f"gpu{g}/gi{gi}/access {base}")
            lines += [f"gpu{g}/gi{gi}/ci{ci}/access {base + 1 + ci}" for ci in range(8)]
    return "\n".join(lines) + "\n"


def test_the_fixture_table_holds_the_published_lines():
    assert set(PUBLISHED) <= set(table(32).splitlines())


def gpu(i, minor=None, pci=None, mig=None, uuid=None):
    return GpuReading(index=i, name="NVIDIA A100-SXM4-80GB", uuid=uuid or f"GPU-{i}", pci_bus_id=pci or f"0000:{i + 16:02x}:00.0",
                      minor=i if minor is None else minor, mig_mode=mig is not None or None, mig=mig or [])


def nvml(*gpus):
    return NvmlReading(available=True, gpus=list(gpus))


# ---------------------------------------------------------------------------- gres.conf


def test_gres_conf_records_for_this_node_only():
    text = """# comment
AutoDetect=off
NodeName=gpu[01-04] Name=gpu Type=a100 File=/dev/nvidia[0-3]
NodeName=gpu[05-08] Name=gpu Type=h100 File=/dev/nvidia[0-7]
Name=shard Count=8 \\
    File=/dev/nvidia0
"""
    conf = parse_gres_conf(text, "gres.conf", "gpu03")
    assert conf.autodetect == "off"
    assert [(r.name, r.files) for r in conf.records] == [
        ("gpu", ("/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2", "/dev/nvidia3")), ("shard", ("/dev/nvidia0",))]


@pytest.mark.parametrize("text,where", [
    ("Name=gpu File", "gres.conf:1"),
    ("NodeName=gpu[01 Name=gpu File=/dev/nvidia0", "gres.conf:1"),
    ("\n\nInclude /etc/slurm/more.conf", "gres.conf:3"),
])
def test_bad_gres_conf_names_file_and_line(text, where):
    with pytest.raises(GpuMapError, match=where):
        parse_gres_conf(text, "gres.conf", "gpu01")


def test_file_record_is_one_device_per_file_multiplefiles_one_per_record():
    conf = parse_gres_conf("Name=gpu File=/dev/nvidia[3,1]\n"
                           "Name=gpu MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap21\n", "g", "n")
    devs = slurm_devices(conf, None, {})
    assert [(d.index, d.files) for d in devs] == [
        (0, ("/dev/nvidia3",)), (1, ("/dev/nvidia1",)), (2, ("/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap21"))]


def test_hand_written_order_is_kept_and_gpus_are_found_by_minor():
    # Slurm's 0 is /dev/nvidia0, which is NVML's gpu2 here: never NVML's gpu0.
    conf = parse_gres_conf("Name=gpu File=/dev/nvidia[0-3]\n", "g", "n")
    t = build(conf, nvml(gpu(0, minor=2), gpu(1, minor=3), gpu(2, minor=0), gpu(3, minor=1)), {})
    assert [(m.index, m.gpu, m.pci) for m in t] == [(0, 2, "0000:12:00.0"), (1, 3, "0000:13:00.0"),
                                                     (2, 0, "0000:10:00.0"), (3, 1, "0000:11:00.0")]


def test_a_device_file_no_gpu_has_is_mapped_to_nothing():
    conf = parse_gres_conf("Name=gpu File=/dev/nvidia[0-2]\n", "g", "n")
    t = build(conf, nvml(gpu(0), gpu(1)), {})
    assert (t[2].gpu, t[2].present, t[2].minor) == (None, False, 2)


# ---------------------------------------------------------------------------- MIG


MIG7 = [MigInstance(gi, 0, f"MIG-{gi}") for gi in (9, 7, 8, 11, 12, 13, 14)]  # NVML's slot order


def test_autodetect_orders_like_slurmd_by_device_files_then_links():
    """Whole GPUs by NVML index (links order), MIG devices by their device-file string in
    natural order: GPU minor, then the GPU instance's capability minor."""
    minors = parse_mig_minors(table(2))
    conf = parse_gres_conf("AutoDetect=nvml\n", "g", "n")
    devs = slurm_devices(conf, nvml(gpu(0, mig=list(MIG7)), gpu(1, minor=1)), minors)
    assert devs[0].files == ("/dev/nvidia1",) and devs[0].index == 0  # MIG devices have no links: last
    gis = [minors[int(d.files[1].rsplit("cap", 1)[1])][1] for d in devs[1:]]
    assert gis == [7, 8, 9, 11, 12, 13, 14]  # not NVML's slot order 9, 7, 8, ...
    assert devs[1].unique_id == "MIG-7"


def test_natural_order_is_numeric_not_textual():
    assert sorted(["/dev/nvidia10", "/dev/nvidia9", "/dev/nvidia1"], key=natural_key) == \
        ["/dev/nvidia1", "/dev/nvidia9", "/dev/nvidia10"]


def test_slice_index_12_of_eight_mig_gpus_is_gpu1_gi13():
    s = load_scenario(str(SCENARIOS / "healthy-8xa100-mig.yaml"))
    conf = parse_gres_conf(s.gres["conf"], "g", "gpu101")
    t = build(conf, s.nvml, parse_mig_minors(s.gres["mig_minors"]))
    assert len(t) == 56
    devices, where = select(t, {"SLURM_JOB_GPUS": "12"}, "gres.conf")
    m = devices[0]
    assert (m.gpu, m.gi, m.ci, m.mig_uuid) == (1, 13, 0, "MIG-7a3c010d-5b1e-5c7d-9e40-a1b2c3d4e5f6")
    job = scope(devices)
    assert (job.gpus, job.slices) == ([1], {1: [(13, 0)]})


def test_gres_conf_naming_only_the_gpu_instance_takes_the_whole_instance():
    # A site's gres.conf (ComputeCanada/puppet-magic_castle, nvidia_gres.sh) lists the parent and
    # the GPU instance's capability alone.
    minors = parse_mig_minors(table(1))
    conf = parse_gres_conf("Name=gpu Type=1g.10gb MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap66\n", "g", "n")
    (m,) = build(conf, nvml(gpu(0, mig=list(MIG7))), minors)
    assert (m.gi, m.ci, m.mig_uuid) == (7, None, "MIG-7")


@pytest.mark.parametrize("files,match", [
    ("/dev/nvidia0,/dev/nvidia-caps/nvidia-cap99999", "no MIG capability"),
    ("/dev/nvidia1,/dev/nvidia-caps/nvidia-cap66", "belongs to GPU minor 0"),
    ("/dev/nvidia0,/dev/nvidia1", "names 2 /dev/nvidia"),
])
def test_devices_that_cannot_be_told_are_refused(files, match):
    conf = parse_gres_conf(f"Name=gpu MultipleFiles={files}\n", "g", "n")
    with pytest.raises(GpuMapError, match=match):
        build(conf, nvml(gpu(0, mig=list(MIG7)), gpu(1)), parse_mig_minors(table(2)))


def test_a_slice_gone_from_the_gpu_is_mapped_but_not_present():
    conf = parse_gres_conf("Name=gpu MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap66,/dev/nvidia-caps/nvidia-cap67\n",
                           "g", "n")
    (m,) = build(conf, nvml(gpu(0, mig=[])), parse_mig_minors(table(1)))
    assert (m.gi, m.ci, m.mig_uuid, m.present) == (7, 0, None, False)


def test_shared_gpus_are_marked_from_shard_and_mps_records():
    conf = parse_gres_conf("Name=gpu File=/dev/nvidia[0-1]\nName=shard Count=16 File=/dev/nvidia1\n", "g", "n")
    t = build(conf, nvml(gpu(0), gpu(1)), {})
    assert [m.shared for m in t] == [False, True]
    assert scope(t).shared == frozenset({1})


# ---------------------------------------------------------------------------- the job's


def test_cuda_visible_devices_names_devices_by_unique_id_or_old_mig_form():
    t = build(parse_gres_conf("AutoDetect=nvml\n", "g", "n"), nvml(gpu(0, mig=list(MIG7), uuid="GPU-2fa5cf01")),
              parse_mig_minors(table(1)))
    by_uuid, _ = select(t, {"CUDA_VISIBLE_DEVICES": "MIG-13"}, "s")
    old, _ = select(t, {"CUDA_VISIBLE_DEVICES": "MIG-GPU-2fa5cf01/13/0"}, "s")  # drivers before R470
    assert by_uuid[0].gi == old[0].gi == 13


def test_slurm_job_gpus_wins_and_an_index_slurm_lacks_is_refused():
    t = identity(nvml(gpu(0), gpu(1)))
    devices, where = select(t, {"SLURM_JOB_GPUS": "1", "CUDA_VISIBLE_DEVICES": "0"}, "s")
    assert [m.gpu for m in devices] == [1] and where == "SLURM_JOB_GPUS=1 CUDA_VISIBLE_DEVICES=0"
    with pytest.raises(GpuMapError, match="SLURM_JOB_GPUS=12: this node has no GPU 12: it has 2 GPUs, numbered 0,1"):
        select(t, {"SLURM_JOB_GPUS": "12"}, "s")
    with pytest.raises(GpuMapError, match="none of this node's GPUs: it has 2 GPUs, numbered 0,1"):
        select(t, {"CUDA_VISIBLE_DEVICES": "GPU-nope"}, "s")
    assert select(t, {}, "s")[0] is None


@pytest.mark.parametrize("token", ["\u0661", "\u00b9", "\uff11"])
def test_an_index_in_other_digits_than_ascii_names_no_gpu(token):
    """Arabic-Indic one, superscript one, fullwidth one: not GPU 1 (int() would take the first
    and third, and raise on the second); a device name that is no device."""
    t = identity(nvml(gpu(0), gpu(1)))
    with pytest.raises(GpuMapError, match="none of this node's GPUs: it has 2 GPUs, numbered 0,1"):
        select(t, {"SLURM_JOB_GPUS": token}, "s")


def test_nvml_without_minors_cannot_be_mapped():
    g = gpu(0)
    g.minor = None
    with pytest.raises(GpuMapError, match="minor"):
        build(parse_gres_conf("Name=gpu File=/dev/nvidia0\n", "g", "n"), nvml(g), {})


def test_unique_ids_win_over_indices_whatever_slurmd_sorted():
    t = build(parse_gres_conf("AutoDetect=nvml\n", "g", "n"), nvml(gpu(0, mig=list(MIG7))), parse_mig_minors(table(1)))
    devices, where = select(t, {"SLURM_JOB_GPUS": "0", "CUDA_VISIBLE_DEVICES": "MIG-13"}, "s")
    assert devices[0].gi == 13 and where == "CUDA_VISIBLE_DEVICES=MIG-13 SLURM_JOB_GPUS=0"


def test_an_mps_job_counts_the_mps_records_devices():
    conf = parse_gres_conf("Name=gpu File=/dev/nvidia[0-3]\nName=mps Count=200 File=/dev/nvidia[2-3]\n", "g", "n")
    t = build(conf, nvml(gpu(0), gpu(1), gpu(2), gpu(3)), {}, "mps")
    assert [(m.index, m.gpu, m.shared) for m in t] == [(0, 2, True), (1, 3, True)]


@pytest.mark.parametrize("line", ["Name=gpu File=/dev/nvidia[0-99999999]", "NodeName=n[0-9999999] Name=gpu File=/dev/nvidia0"])
def test_a_range_too_large_is_refused_before_it_is_expanded(line):
    with pytest.raises(GpuMapError, match="gres.conf:1"):
        parse_gres_conf(line, "gres.conf", "n1")
