"""Shared test setup: the real-Slurm cluster fixtures and the ``gpu`` marker's skip rule.

``tests/`` is put on ``sys.path`` here (pyproject has no ``pythonpath``) so test modules can
``from slurm_cluster import SlurmCluster`` and the fixtures below are registered for every test.
"""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# The parse memo (gpuhc/parsecache.py) of this session's runs, in-process and in subprocesses,
# goes to a directory of its own rather than the machine's /var/cache/gpuhc.
if "GPUHC_CACHE_DIR" not in os.environ:
    import atexit
    import shutil
    import tempfile

    os.environ["GPUHC_CACHE_DIR"] = tempfile.mkdtemp(prefix="gpuhc-test-cache-")
    atexit.register(shutil.rmtree, os.environ["GPUHC_CACHE_DIR"], True)

from slurm_cluster import slurm_cluster, slurm_cluster_module  # noqa: E402,F401  (fixtures)


def _gpu_present() -> bool:
    """True when NVML initialises: the only honest test for "this machine has an NVIDIA GPU"."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return pynvml.nvmlDeviceGetCount() > 0
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # `gpu` tests are the only ones allowed to skip, and only where no GPU is present.
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if gpu_items and not _gpu_present():
        skip = pytest.mark.skip(reason="needs an NVIDIA GPU (NVML found none)")
        for item in gpu_items:
            item.add_marker(skip)
