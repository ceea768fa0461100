"""One modelled node: the scenario its GPUs replay right now, and gpuhc's flows run on it.

The flows are gpuhc's own (:mod:`gpuhc.slurm.flows.entry`, the ladder in :mod:`gpuhc.slurm.repair.remediate`,
the boot-time retest's rules in :mod:`gpuhc.slurm.repair.quarantine`), judged by the real runner on
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

from gpuhc.slurm.flows import entry
from gpuhc.slurm.act.scontrol import Scontrol
from gpuhc.sources import SourceSpec

from .faults import EXAMPLES, OWN, Fault
from .log_shapes import render

T0 = 1741082400.0  # 2025-03-04T10:00:00Z, the example scenarios' time: the campaign's clock starts here
HC_INTERVAL_S = 300.0  # slurm/slurm.conf.example HealthCheckInterval
HEALTHY = EXAMPLES / "healthy-8xh100.yaml"
ONE_FLAP = OWN / "ib-flap-once.yaml"  # a flap that builds, before it flaps in earnest
_STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d),(\d{6})\+00:00 ")
# Every GPU idle: without an occupancy section the ladder counts a GPU as busy (remediate.busy_of).
IDLE = {"occupancy": {"gpus": [{"index": i, "memory_used_mib": 0, "memory_total_mib": 81559} for i in range(8)]}}


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
def _stripped(path: Path, workdir: Path) -> tuple[Path, str, bool]:
    """The fault's scenario without its kernel log (``extends`` appends lists: the node's own,
    restamped lines replace them), host, time and steps, written once per campaign for the
    node's scenario to extend; its steps as YAML (they stay the node's own, since a parent's
    steps are not inherited); and whether it lists the GPUs' processes."""
    import yaml

    doc = yaml.safe_load(path.read_text()) or {}
    steps = doc.pop("steps", None)
    for key in ("kernel_log", "hostname", "time"):
        doc.pop(key, None)
    if doc.get("extends"):
        doc["extends"] = str((path.parent / doc["extends"]).resolve())
    out = workdir / "_scenarios" / path.name
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(doc, sort_keys=False, width=1 << 16))
    text = yaml.safe_dump({"steps": steps}, sort_keys=False, width=1 << 16) if steps else ""
    return out, text, "occupancy" in doc


_DUMPS: dict[str, str] = {}


def _dump(patch: dict) -> str:
    """The patch as YAML, dumped once per distinct patch (dumping per run was a third of a run)."""
    import yaml

    k = json.dumps(patch, sort_keys=True)
    if k not in _DUMPS:
        if len(_DUMPS) > 4096:  # a growing link's counters make a new patch at every run
            _DUMPS.clear()
        _DUMPS[k] = yaml.safe_dump(patch, sort_keys=False, width=1 << 16)
    return _DUMPS[k]


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
        self.old_lines: list[str] = []  # repaired faults' and noise's lines, in the kernel log until a reboot
        self.lost: list[tuple[float, float]] = []  # spans of kernel records a flood overwrote (noise), until a reboot
        self.boot = 0.0
        self.noise: list = []  # (id, noise.NoiseClass, end, start) episodes laid over the scenario now
        self.sticky: dict = {}  # counters noise raised, until the next reboot; a new driver for good
        self.driver: str | None = None
        self.version = 0  # bumped by every change of the kernel log, counters or driver
        self.settled: dict[str, tuple] = {}  # stage -> key of its last run that changed nothing
        self.pending: dict[str, tuple] = {}  # stage -> (key, since): a verdict time may still harden (settle.py)
        self.history: list[float] = []  # when its hardware faults arose (repair odds fall with them)
        self.off = False  # a person has it (RMA, cable, maintenance) or its host is down: gpuhc cannot run
        self.admin_hold = False  # drained by an admin, not by gpuhc
        self.hold_memo: tuple | None = None  # (inputs, until): a held node's failing run, unchanged
        self.parts_epoch = 0  # bumped when a person swaps its faulty part (a lemon's returns stop)
        self.shape = "iso"  # how its kernel log reaches gpuhc (log_shapes.py): the campaign draws it

    def timed_state(self) -> str:
        """What gpuhc's timed rules keep in the node's state: the host check's stuck-process
        samples, the IB downtime, the evidence held over runs (other slices change at every run
        with their own stamps, and their rules judge on WARNs, which keep a node running anyway)."""
        try:
            doc = json.loads((Path(self.state_dir) / "state.json").read_text())
        except (OSError, ValueError):
            return ""
        checks = doc.get("checks") if isinstance(doc.get("checks"), dict) else {}
        return json.dumps([checks.get("host"), checks.get("infiniband"), doc.get("evidence")], sort_keys=True)

    def key(self) -> tuple:
        """What the node's next run reads, less the clock: equal keys, equal verdicts."""
        return (tuple((f.id, f.stamp, f.building) for f in self.faults), tuple(ep[0] for ep in self.noise),
                self.version)

    def boot_id(self) -> str:
        """The node's boot as the kernel names it (/proc/sys/kernel/random/boot_id): a new one
        at every boot, so gpuhc's rules that start again at a reboot see each of the model's."""
        return f"{self.name}-boot-{self.boot:.3f}"

    def rebooted(self, now: float) -> None:
        """A boot: the kernel log and the volatile counters start again."""
        self.old_lines, self.lost, self.boot = [], [], now
        self.sticky = {"driver_version": self.driver} if self.driver else {}
        self.version += 1

    def hardware(self) -> list[Fault]:
        return [f for f in self.faults if not f.cls.app]

    def base(self) -> Path:
        hw = self.hardware()
        if not hw:
            return HEALTHY
        return ONE_FLAP if hw[0].building else hw[0].cls.scenario

    def write(self, now: float, lines_cache: dict, patch: dict | None = None) -> None:
        """The scenario for a run at ``now``: the first hardware fault's (or the healthy one),
        the noise laid over it (``patch``), the node's kernel-log lines, and a line stamped now."""
        stripped, steps, has_occupancy = _stripped(self.base(), self.dir.parent)
        lines = list(self.old_lines)
        for f in self.faults:
            path = ONE_FLAP if f.building else f.cls.scenario
            if path not in lines_cache:
                lines_cache[path] = kernel_lines(path)
            lines += restamp(lines_cache[path], f.stamp)
        lines = sorted(ln for ln in lines if _epoch(ln[:19]) >= self.boot
                       and not any(a <= _epoch(ln[:19]) <= b for a, b in self.lost))
        patch = dict(patch or {})
        if not has_occupancy and "occupancy" not in patch:
            patch.update(IDLE)
        text = (f"extends: {json.dumps(str(stripped))}\n" + steps
                + (_dump(patch) if patch else "")
                + f"hostname: {self.name}\nboot_id: {json.dumps(self.boot_id())}\nkernel_log:\n"
                + "".join(f"  - {json.dumps(render(ln, self.shape, self.name))}\n" for ln in lines))
        clock = render(iso(now) + " systemd[1]: Started gpuhc check (campaign clock).", self.shape, self.name)
        now_line = f"  - {json.dumps(clock)}\n"
        self.scenario.write_text(text + now_line + f"time: {now}\n")

    def flow(self, stage: str, config, slurm, now: float, env: dict | None = None) -> entry.Flow:
        from gpuhc.run.report import RunOptions

        opts = RunOptions(stage=stage, config=config, sources=SourceSpec(nvml_scenario=str(self.scenario)),
                          state_dir=self.state_dir, hostname=self.name, now=now)
        return entry.Flow(stage=stage, opts=opts, log=entry.Log(f"gpuhc {stage} {self.name}", None, False, False),
                          make_scontrol=lambda deadline: Scontrol(run=slurm, deadline=deadline), env=env or {})


def retest(flow: entry.Flow) -> str:
    """The boot-time retest (`gpuhc quarantine retest` from examples/systemd/gpuhc-retest.service)
    with the modelled Slurm: gpuhc's own flow (gpuhc/slurm/repair/retest.py), handed this node's Flow.
    Returns the plan carried out, or "error" where Slurm did not answer: the CLI turns that
    SlurmError into its exit code (gpuhc/errors.py), the unit runs again at the next boot, and the
    node stays as it was (the model's slurmctld timeouts reach the retest too)."""
    from gpuhc.errors import SlurmError
    from gpuhc.slurm.repair.retest import retest as retest_flow

    try:
        return retest_flow(flow).act
    except SlurmError:
        return "error"
