"""The hot commands leave with os._exit (gpuhc/cli/__init__.py, quick_exit): everything they
wrote must still come out, with the verdict's exit code, and the bench's phase marks too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from tests.helpers.paths import REPO

ROOT = str(REPO)
STRAY = os.path.join(ROOT, "examples", "scenarios", "stray-process.yaml")


def gpuhc(*args, env=None, tmp_path=None):
    env = dict(os.environ, GPUHC_STATE_DIR=str(tmp_path / "state"), **(env or {}))
    return subprocess.run([sys.executable, "-m", "gpuhc", *args], capture_output=True, text=True, env=env, timeout=120)


def test_output_exit_code_and_phase_marks_survive_the_quick_exit(tmp_path):
    marks, config = tmp_path / "phases.jsonl", tmp_path / "gpuhc.yaml"
    config.write_text("")
    out = gpuhc("check", "--stage", "prolog", "--json", "--nvml-scenario", STRAY, "--config", str(config),
                env={"GPUHC_PHASES": str(marks)}, tmp_path=tmp_path)
    assert out.returncode == 1, out.stderr
    doc = json.loads(out.stdout)  # the whole report, flushed before the exit
    assert doc["status"] == "fail" and any(r["check"] == "occupancy" and r["status"] == "fail" for r in doc["results"])
    (line,) = marks.read_text().splitlines()
    names = [name for name, _ in json.loads(line)["marks"]]
    assert names[:1] == ["main"] and {"cli", "run", "judged", "state", "written"} <= set(names)


def test_usage_errors_keep_their_exit_code_and_message(tmp_path):
    out = gpuhc("check", "--only", "no-such-check", tmp_path=tmp_path)
    assert out.returncode == 2 and "no check 'no-such-check'" in out.stderr
