"""Where the reference samples of real-world output live (kernel logs, DCGM, nccl-tests,
nvidia-smi, Slurm, IB sysfs), captured by others on real machines and kept outside this
repository by the workplace that runs its CI; GPUHC_REALDATA points at a copy. The tests that
read them skip, saying so, where they are absent: they check the parsers against the world,
beside the project's own cited fixtures under tests/fixtures/ (each with a README naming its
public source), which always run. What the parsers rely on is in docs/facts.md.
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.helpers.paths import REPO as _REPO


def _find() -> Path:
    candidates = [os.environ.get("GPUHC_REALDATA"), _REPO.parent / "shared" / "realdata", "/work/shared/realdata"]
    for c in candidates:
        if c and Path(c).is_dir():
            return Path(c)
    return _REPO.parent / "shared" / "realdata"  # absent: the tests skip and name this path


ROOT = _find()
