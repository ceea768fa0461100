"""The floor script (bench/nvml_floor.py) asks NVML for exactly what gpuhc's reader asks for:
its hand-written lists must not drift from gpuhc/sources/nvml_fields.py."""

from __future__ import annotations

import importlib.util
import os

from gpuhc.sources import nvml_fields

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def floor():
    spec = importlib.util.spec_from_file_location("nvml_floor", os.path.join(ROOT, "bench", "nvml_floor.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_floor_reads_the_same_fields_as_gpuhc():
    f = floor()
    assert f.DEVICE_FIELDS == tuple(c for _, c in nvml_fields.DEVICE_FIELDS)
    assert f.LINK_FIELDS == tuple(c for _, c in nvml_fields.LINK_FIELDS)
    assert f.LEGACY_LINK_FIELDS == tuple(c for _, c in nvml_fields.LEGACY_LINK_FIELDS)
    assert f.SIMPLE_GETTERS == tuple((g, arg) for _, g, arg, _ in nvml_fields.SIMPLE_GETTERS)
