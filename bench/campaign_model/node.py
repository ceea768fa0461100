"""One modelled node: the scenario its GPUs replay right now, and gpuhc's flows run on it.

The flows are gpuhc's own (:mod:`gpuhc.slurm.entry`, the ladder in :mod:`gpuhc.slurm.remediate`,
the boot-time retest's rules in :mod:`gpuhc.slurm.quarantine`), judged by the real runner on
the node's scenario, with the modelled Slurm behind ``make_scontrol``. The scenario is written
for each run: the fault's own scenario (examples/scenarios) with its kernel-log lines moved to
the fault's virtual time, and one line stamped "now" (a replay's "now" is its latest line,
docs/ARCHITECTURE.md "Reading the node"), so the xid window ages on the virtual clock.
"""

from __future__ import annotations

import functools
import json
import re
import time
from pathlib import Path

from gpuhc.slurm import entry
from gpuhc.slurm.scontrol import Scontrol
from gpuhc.sources import SourceSpec

from .faults import EXAMPLES, Fault

HEALTHY = EXAMPLES / "healthy-8xh100.yaml"
_STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d),(\d{6})\+00:00 ")
# Every GPU idle: without an occupancy section the ladder counts a GPU as busy (remediate.busy_of).
IDLE = {"occupancy": {"gpus": [{"index": i, "memory_used_mib": 0, "memory_total_mib": 81559} for i in range(8)]}}
IDLE_TEXT = "occupancy:\n  gpus:\n" + "".join(
    f"  - {{index: {i}, memory_used_mib: 0, memory_total_mib: 81559}}\n" for i in range(8))


def iso(t: float) -> str:
    sec, us = divmod(int(round(t * 1e6)), 1_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec)) + f",{us:06d}+00:00"


def _epoch(stamp: str) -> float:
    return time.mktime(time.strptime(stamp, "%Y-%m-%dT%H:%M:%S")) - time.timezone


def kernel_lines(path: Path) -> list[str]:
    """The scenario's own kernel-log lines (the driver's and the mlx5 driver's), without the
    examples' synthetic "Started gpuhc" marker."""
    import yaml

    doc = yaml.safe_load(path.read_text()) or {}
    return [ln for ln in doc.get("kernel_log") or [] if "Started gpuhc" not in ln]


@functools.lru_cache(maxsize=None)
def _body(path: Path) -> tuple[str, bool]:
    """The fault's scenario as YAML text without its kernel log (``extends`` appends lists: the
    node's own, restamped lines replace them), host and time, its ``extends`` made absolute;
    and whether it lists the GPUs' processes. Dumped once per scenario: dumping it per run
    was most of a campaign's time."""
    import yaml

    doc = yaml.safe_load(path.read_text()) or {}
    for key in ("kernel_log", "hostname", "time"):
        doc.pop(key, None)
    if doc.get("extends"):
        doc["extends"] = str((path.parent / doc["extends"]).resolve())
    return yaml.safe_dump(doc, sort_keys=False, width=1 << 16), "occupancy" in doc


def restamp(lines: list[str], at: float) -> list[str]:
    """The lines moved so that the first one happened at ``at``, keeping their spacing."""
    stamps = [_STAMP.match(ln) for ln in lines]
    first = next((_epoch(m.group(1)) for m in stamps if m), at)
    out = []
    for ln, m in zip(lines, stamps):
        if m is None:
            continue
        t = at + _epoch(m.group(1)) - first + int(m.group(2)) / 1e6
        out.append(iso(t) + " " + ln[m.end():])
    return out


class Node:
    def __init__(self, name: str, workdir: Path):
        self.name = name
        self.dir = workdir / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.state_dir = str(self.dir / "state")
        self.scenario = self.dir / "node.yaml"
        self.faults: list[Fault] = []  # active ones, hardware and application
        self.old_lines: list[str] = []  # repaired faults' lines, still in the kernel log until a reboot
        self.boot = 0.0

    def hardware(self) -> list[Fault]:
        return [f for f in self.faults if not f.cls.app]

    def write(self, now: float, lines_cache: dict) -> str:
        """The scenario for a run at ``now``; returns it without its time and "now" line."""
        hw = self.hardware()
        base = hw[0].cls.scenario if hw else HEALTHY
        lines = list(self.old_lines)
        for f in self.faults:
            if f.cls.scenario not in lines_cache:
                lines_cache[f.cls.scenario] = kernel_lines(f.cls.scenario)
            lines += restamp(lines_cache[f.cls.scenario], f.stamp)
        lines = sorted(ln for ln in lines if _epoch(ln[:19]) >= self.boot)
        body, has_occupancy = _body(base)
        text = body + f"hostname: {self.name}\n" + ("" if has_occupancy else IDLE_TEXT) + "kernel_log:\n" + "".join(
            f"  - {json.dumps(ln)}\n" for ln in lines)
        now_line = f"  - {json.dumps(iso(now) + ' systemd[1]: Started gpuhc check (campaign clock).')}\n"
        self.scenario.write_text(text + now_line + f"time: {now}\n")
        return text

    def flow(self, stage: str, config, slurm, now: float, env: dict | None = None) -> entry.Flow:
        from gpuhc.runreport import RunOptions

        opts = RunOptions(stage=stage, config=config, sources=SourceSpec(nvml_scenario=str(self.scenario)),
                          state_dir=self.state_dir, hostname=self.name, now=now)
        return entry.Flow(stage=stage, opts=opts, log=entry.Log(f"gpuhc {stage} {self.name}", None, False, False),
                          make_scontrol=lambda deadline: Scontrol(run=slurm, deadline=deadline), env=env or {})


def retest(flow: entry.Flow) -> str:
    """The boot-time retest (`gpuhc quarantine retest` from examples/systemd/gpuhc-retest.service)
    with the modelled Slurm: gpuhc's own flow (gpuhc/slurm/retest.py), handed this node's Flow.
    Returns the plan carried out."""
    from gpuhc.slurm.retest import retest as retest_flow

    return retest_flow(flow).act
