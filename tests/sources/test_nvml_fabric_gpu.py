"""The NVLink fabric read on a real GPU (issue 19's Hopper proof): it runs, and reports a state
or "not supported", never an error."""

from __future__ import annotations

import pytest

from gpuhc.sources.nvml import NvmlLive

_STATES = {None, "not supported", "not started", "in progress", "completed"}


@pytest.mark.gpu
def test_real_gpu_fabric_read_reports_a_state_or_not_supported():
    """Needs an NVIDIA GPU; skips only when NVML finds none."""
    r = NvmlLive(clock_samples=1).read()
    if not r.available or not r.gpus:
        pytest.skip(f"no NVIDIA GPU here: {r.error}")
    assert not [n for n in r.notes if "fabric info" in n]  # no NVML error from the fabric read
    for g in r.gpus:
        assert g.fabric_state in _STATES, g.fabric_state
        if g.fabric_state in (None, "not supported"):
            assert g.fabric_health_mask is None and g.fabric_clique_id is None
        else:
            assert g.fabric_status is not None
        assert g.c2c_errors is None or all(isinstance(v, int) and v >= 0 for v in g.c2c_errors.values())
