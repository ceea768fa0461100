"""The interpreter a virtual environment was made from: what install.sh must be given (PYTHON)
to build a venv of the same Python as the suite's (tests/install)."""

from __future__ import annotations

import subprocess
import sys


def base_python() -> str:
    cp = subprocess.run([sys.executable, "-c", "import sys; print(sys._base_executable)"], capture_output=True,
                        text=True, check=True)
    return cp.stdout.strip()
