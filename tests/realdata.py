"""Where the shared real-world samples are (../shared/realdata, see its README).

They sit beside the checkout in this workplace and in CI (a copy of shared/ beside the clone);
GPUHC_REALDATA points elsewhere. Tests that read them skip, saying so, where they are absent
(outside this workplace): they are reference data, not the project's own fixtures.
"""

from __future__ import annotations

import os
from pathlib import Path

_REPO = Path(__file__).resolve().parent.parent


def _find() -> Path:
    candidates = [os.environ.get("GPUHC_REALDATA"), _REPO.parent / "shared" / "realdata", "/work/shared/realdata"]
    for c in candidates:
        if c and Path(c).is_dir():
            return Path(c)
    return _REPO.parent / "shared" / "realdata"  # absent: the tests skip and name this path


ROOT = _find()
