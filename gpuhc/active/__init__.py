"""Active checks: make the GPUs work and judge what comes back.

Entry point for the runner: :func:`run_active` (stage ``epilog`` or ``bootstrap``). The GPU work
runs in a child process (``python -m gpuhc.active.worker``) that the parent kills at its
deadline, because a hung kernel cannot be interrupted from a Python thread; the parent turns
the worker's raw measurements into :class:`gpuhc.model.result.Result` with pure judge functions.

This package imports nothing heavy at load: the config validator imports it for
``ACTIVE_CHECK_IDS`` on every node, every few minutes. Each active check is declared once, in
:mod:`gpuhc.active.registry`.

Status rules (documented in docs/verification-active.md):
- ``fail`` (always with a draining action): wrong numbers (a checksum, a memory word, an
  all-reduce sum), an uncorrectable ECC error reported to the worker, a GPU/link/bandwidth far
  below its profile or its siblings, hardware throttling under load, a DCGM hardware test failed.
- ``warn``: slow but within the fail band; P2P unavailable over PCIe; NUMA/NIC affinity changed.
- ``error`` (gpuhc could not judge, never drains): timeout, out of GPU memory, CuPy or NCCL
  missing while GPUs are present, any other CUDA error. A GPU busy with another process is the
  occupancy check's ``fail`` (docs/checks.md), unless the caller cannot tell whose it is.
  The one time-out that is a finding: a P2P or NCCL task with no answer at several times its
  healthy time while the same GPUs computed, a stalled link (:mod:`gpuhc.active.stall`), a
  ``fail`` held over epilogs before it drains.
- ``n/a``: no GPU on the node; P2P and NCCL bandwidth with a single GPU; dcgmi not installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuhc.active.registry import IDS as ACTIVE_CHECK_IDS  # light: declarations only

if TYPE_CHECKING:
    from gpuhc.active.context import ActiveContext
    from gpuhc.model.result import Result

INSTALL_HINT = "active checks need `pip install gpuhc[gpu]`"


def run_active(stage: str, ctx: "ActiveContext") -> "list[Result]":
    """Run the stage's active checks within ``ctx.budget_s``; never raises for bad hardware,
    missing software or bad config (those become results)."""
    from gpuhc.active.orchestrate import run

    return run(stage, ctx)


def capture_topology(timeout_s: float = 60.0) -> dict:
    """The ``topology`` section for a `gpuhc baseline` file, read from this node now."""
    from gpuhc.active.orchestrate import read_topology

    return read_topology(timeout_s)
