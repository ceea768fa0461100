"""Which gpuhc the numbers come from: the commit and whether the tree had changes (docs/campaign.md
quotes it with the results)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def provenance() -> dict:
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True,
                                  timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    return {"gpuhc_commit": git("rev-parse", "HEAD") or None,
            "gpuhc_tree_changed": bool(git("status", "--porcelain", "--", "gpuhc", "etc")),
            "run_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
