"""The campaign's stand-ins for the GPU reset and the reboot (bench/campaign_model/repairs.py)."""

from __future__ import annotations

import inspect
import sys

from tests.helpers.paths import REPO

sys.path.insert(0, str(REPO / "bench"))

from campaign_model.repairs import Repairs  # noqa: E402


def test_the_reset_stand_in_takes_every_argument_the_real_procedure_takes():
    """The campaign puts ``_reset`` in place of gpuhc/slurm/repair/reset_run.py's ``procedure``. A
    parameter the ladder starts passing that the stand-in lacks makes every reset of the model a
    TypeError the climb reports as gpuhc's own error, and the ladder's numbers change without a
    word (it happened once: the NVML process lists' reader)."""
    from gpuhc.slurm.repair.reset_run import procedure

    real = list(inspect.signature(procedure).parameters)
    stand_in = list(inspect.signature(Repairs._reset).parameters)[1:]  # less self
    assert stand_in == real
