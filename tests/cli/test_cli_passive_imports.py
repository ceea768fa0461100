"""The passive health check imports nothing it does not run (issue 47): an import graph, not a timing.

`gpuhc check --stage passive` runs on every node every few minutes and before every job; a
module-level import of a heavy library in a check (rich, yaml, hostlist, the Slurm or sweep
packages, the active checks' machinery) is paid on each of those runs. Each test runs the
passive path in a fresh interpreter, as a node does (the parse memo warm, as after a node's first
run), and reads ``sys.modules`` at its exit: a forbidden module there fails the test with the
chain that imported it, found by re-running with an import hook.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCENARIO = os.path.join(ROOT, "examples", "scenarios", "healthy-8xh100.yaml")
SHIPPED = os.path.join(ROOT, "etc", "gpuhc.yaml")

# Libraries a passive run never needs: tables for a terminal (the report of a run whose stdout is
# not a terminal is plain text), the YAML parser (the parse memo, gpuhc/files/parsecache.py, holds
# every file once read), host lists, the plotting and MPI stacks, CuPy; and click, whose
# parser a plain command line does without (gpuhc/cli/fast.py).
# calendar (and locale with it, which pynvml's subprocess needs only on a live run): about 2 ms
# of modules for one sum (gpuhc/sources/kernel_log_prefix.py).
HEAVY = ("rich", "yaml", "hostlist", "orjson", "matplotlib", "numpy", "mpi4py", "cupy", "prometheus_client", "click",
         "calendar")
# tempfile (with shutil, random, bz2 and lzma): ~4 ms that gpuhc itself never needs
# (gpuhc.files.fsutil has what the health check uses); pynvml imports it (through ctypes.util), so it is
# held off only where NVML is not read.
WITHOUT_NVML = ("tempfile",)
# threading: a replay reads every source in place (gpuhc/run/read.py), so it starts no thread; a
# live run does (NVML early, each live source), and pynvml imports it too.
REPLAY_ONLY = ("threading",)
# gpuhc's own packages that a passive run does not run, and the few modules of them it does,
# each by name so that anything more is caught: the config validator reads each subsystem's
# declared settings (gpuhc/config/load.py SUBSYSTEM_SECTIONS) and what they name; a live run reads
# Slurm's GPU count for this node from slurm.conf (docs/slurm.md, "Expected GPUs"); the report is
# shown by gpuhc/export/output.py (its package imports nothing).
NOT_RUN = ("gpuhc.slurm", "gpuhc.sweep", "gpuhc.fleet", "gpuhc.active", "gpuhc.export", "gpuhc.postmortem.job",
           "gpuhc.text.plot", "gpuhc.postmortem.retire", "gpuhc.state.baseline")
ALLOWED = {"gpuhc.slurm", "gpuhc.slurm.settings", "gpuhc.slurm.read", "gpuhc.slurm.read.releases",
           "gpuhc.sweep", "gpuhc.sweep.settings", "gpuhc.sweep.stats",
           "gpuhc.fleet", "gpuhc.fleet.settings",
           "gpuhc.active", "gpuhc.active.registry", "gpuhc.active.settings", "gpuhc.active.thresholds",
           "gpuhc.slurm.read.slurmconf", "gpuhc.export", "gpuhc.export.output", "gpuhc.export.hooks"}

# Runs gpuhc's __main__ as `python -m gpuhc` does and writes sys.modules at the exit (the
# health check leaves with os._exit, which skips atexit: the dump wraps it).
PROBE = """
import json, os, runpy, sys
out, sys.argv = sys.argv[1], ["gpuhc", *sys.argv[2:]]
real_exit = os._exit
def dump(code):
    with open(out, "w") as f:
        json.dump(sorted(sys.modules), f)
    real_exit(code)
os._exit = dump
try:
    runpy.run_module("gpuhc", run_name="__main__", alter_sys=True)
except SystemExit as e:
    dump(e.code if isinstance(e.code, int) else 1)
"""

# The same, printing who imported each module named on the command line (to explain a failure).
WHO = """
import os, runpy, sys, traceback
names, sys.argv = set(sys.argv[1].split(",")), ["gpuhc", *sys.argv[2:]]
class Who:
    def find_spec(self, name, path=None, target=None):
        if name in names:
            names.discard(name)
            frames = [f for f in traceback.extract_stack()[:-1] if "importlib" not in f.filename]
            print(name + " imported by: " + " <- ".join(f"{os.path.basename(f.filename)}:{f.lineno}"
                                                            for f in reversed(frames[-6:])), file=sys.stderr)
sys.meta_path.insert(0, Who())
try:
    runpy.run_module("gpuhc", run_name="__main__", alter_sys=True)
except SystemExit:
    pass
"""


def forbidden(modules: list[str]) -> list[str]:
    heavy = HEAVY if "pynvml" in modules else HEAVY + WITHOUT_NVML
    if "gpuhc.sources.nvml" not in modules:  # a replay: nothing live was read
        heavy += REPLAY_ONLY
    bad = [m for m in modules if m.split(".")[0] in heavy]
    bad += [m for m in modules if m.startswith(tuple(p + "." for p in NOT_RUN)) or m in NOT_RUN]
    return sorted(m for m in set(bad) if m not in ALLOWED)


def passive_modules(tmp_path, args: list[str]) -> list[str]:
    env = dict(os.environ, GPUHC_CACHE_DIR=str(tmp_path / "cache"), GPUHC_STATE_DIR=str(tmp_path / "state"),
               PYTHONPATH=ROOT)
    env.pop("GPUHC_PHASES", None)
    out = tmp_path / "modules.json"
    for _ in range(2):  # the first run fills the parse memo, as a node's first run after an install does
        proc = subprocess.run([sys.executable, "-c", PROBE, str(out), *args], env=env, cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode in (0, 1, 3), proc.stderr[-2000:]
    modules = json.loads(out.read_text())
    bad = forbidden(modules)
    if bad:
        first = [m for m in bad if m.rsplit(".", 1)[0] not in bad]  # a package, not each of its modules
        who = subprocess.run([sys.executable, "-c", WHO, ",".join(first), *args], env=env, cwd=ROOT,
                             capture_output=True, text=True, timeout=120)
        pytest.fail("the passive path imports what it does not run:\n" + who.stderr[-4000:])
    return modules


def empty_config(tmp_path) -> str:
    path = tmp_path / "empty.yaml"
    path.write_text("")
    return str(path)


def test_passive_replay_imports_nothing_heavy(tmp_path):
    modules = passive_modules(tmp_path, ["check", "--stage", "passive", "--config", empty_config(tmp_path),
                                         "--nvml-scenario", SCENARIO])
    assert "gpuhc.checks.xid" in modules  # the probe saw the checks run, not an early exit


def test_passive_replay_with_the_shipped_config_imports_nothing_heavy(tmp_path):
    text = open(SHIPPED, encoding="utf-8").read()
    for old in ("/var/lib/prometheus/node-exporter", "/var/log/gpuhc", "/var/lib/gpuhc"):
        text = text.replace(old, str(tmp_path / old.strip("/").replace("/", "-")))
    config = tmp_path / "gpuhc.yaml"
    config.write_text(text)
    modules = passive_modules(tmp_path, ["check", "--stage", "passive", "--config", str(config),
                                         "--nvml-scenario", SCENARIO, "--json"])
    assert "gpuhc.checks.xid" in modules


def test_passive_live_run_imports_nothing_heavy(tmp_path):
    """This machine as it is (no GPU in CI: NVML says so, and the run cannot judge, exit 3):
    the live sources' imports are held to the same list."""
    modules = passive_modules(tmp_path, ["check", "--stage", "passive", "--config", empty_config(tmp_path)])
    assert "gpuhc.sources.nvml" in modules or "gpuhc.run.nvml_early" in modules


def test_the_probe_sees_a_heavy_import(tmp_path):
    """The guard can fail: a run that does import what the list forbids is named."""
    assert forbidden(["gpuhc.checks.xid", "yaml", "rich.console", "gpuhc.slurm.act.actuator",
                      "gpuhc.slurm.settings", "gpuhc.sweep.stats"]) == ["gpuhc.slurm.act.actuator", "rich.console", "yaml"]
    assert forbidden(["gpuhc.checks.xid", "tempfile"]) == ["tempfile"]
    assert forbidden(["gpuhc.checks.xid", "tempfile", "pynvml"]) == []
    assert forbidden(["gpuhc.checks.xid", "threading"]) == ["threading"]  # a replay
    assert forbidden(["gpuhc.checks.xid", "gpuhc.sources.nvml", "pynvml", "threading"]) == []  # a live run
