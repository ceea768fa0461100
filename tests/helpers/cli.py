"""``python -m gpuhc`` in a subprocess, as an admin or Slurm runs it, and the check that a run
failed with one clear line (tests/README.md, bad input)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.helpers.paths import REPO as ROOT


def gpuhc(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("GPUHC_CONFIG", None)
    env.pop("GPUHC_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "gpuhc", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=env)


def one_line_error(p: subprocess.CompletedProcess, code: int = 2) -> str:
    """The run failed with ``code`` and said why on stderr, without a traceback."""
    assert p.returncode == code, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr and "internal error" not in p.stderr, p.stderr
    return p.stderr

