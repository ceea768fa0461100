"""The floor script (bench/nvml_floor.py) asks NVML for exactly what gpuhc's reader asks for:
its hand-written lists must not drift from gpuhc/sources/nvml_fields.py."""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest

from tests.helpers.fake_pynvml import FakeGpu, FakeNvml
from gpuhc.sources import nvml_fields
from gpuhc.sources.nvml import NvmlLive
from tests.helpers.paths import REPO

ROOT = str(REPO)


def floor():
    spec = importlib.util.spec_from_file_location("nvml_floor", os.path.join(ROOT, "bench", "nvml_floor.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_floor_reads_the_same_fields_as_gpuhc():
    f = floor()
    assert f.DEVICE_FIELDS == tuple(c for _, c in nvml_fields.DEVICE_FIELDS)
    assert f.LINK_FIELDS == tuple(c for _, c in nvml_fields.LINK_FIELDS)
    assert f.DL_FIELDS == tuple(c for name, c in nvml_fields.LINK_FIELDS if name in nvml_fields.DL_COUNTERS)
    assert f.LEGACY_LINK_FIELDS == tuple(c for _, c in nvml_fields.LEGACY_LINK_FIELDS)
    assert f.SIMPLE_GETTERS == tuple((g, arg) for _, g, arg, _ in nvml_fields.SIMPLE_GETTERS)


def fake_node() -> FakeNvml:
    return FakeNvml([FakeGpu(uuid=f"GPU-{i}", pci=f"00000000:{0x18 + i:02X}:00.0") for i in range(2)])


@pytest.mark.parametrize("argv, gpus, rotation", [
    (["passive"], None, 3),
    (["passive", "--dl-rotation", "1"], None, 1),
    (["prolog", "--gpus", "1"], [1], 3),
    (["prolog", "--gpus", "1", "--dl-rotation", "1"], [1], 1),
])
def test_the_floor_asks_the_driver_for_the_same_field_values_as_the_stage(monkeypatch, capsys, argv, gpus, rotation):
    """The floor is honest only if it asks for what a run of the stage asks: the same (field,
    link) pairs of the same GPUs, with the DL counters on one slice of the links (the first, as
    a run with no remembered pointer reads)."""
    floor_nv, gpuhc_nv = fake_node(), fake_node()
    monkeypatch.setitem(sys.modules, "pynvml", floor_nv)
    monkeypatch.setattr(sys, "argv", ["nvml_floor.py", *argv])
    floor().main()
    assert f"every {rotation}. link" in capsys.readouterr().out
    NvmlLive(clock_samples=1, module=gpuhc_nv, gpus=gpus, dl_rotation=rotation).read()
    assert sorted(floor_nv.asked) == sorted(gpuhc_nv.asked)
    dl = gpuhc_nv.asked_links("NVML_FI_DEV_NVLINK_ERROR_DL_CRC")
    assert len(dl) == (2 if gpus is None else 1) * 18 // rotation
