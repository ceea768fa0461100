"""Reboots in the real campaign (docs/campaign.md, "Trusting the model"), on the model's clock.

Slurm's part is all real: gpuhc's ladder asks `scontrol reboot ASAP nextstate=DOWN`, slurmctld
runs RebootProgram once the node is idle, the node's slurmd stops and registers again with a new
boot time, the boot unit's `gpuhc quarantine retest` decides. What stands in is the machine
(tests/helpers/slurm_cluster_files.py, SlurmCluster(reboot=True)): between slurmd's stop and its next
start it runs bin/down, which asks this harness; the harness holds the machine off until the
model's reboot would be over, then heals the node's scenario with the model's outcome for that
reboot (the faults the model's k-th reboot of the node repaired, the application's faults, the
kernel log), and answers.

The model's reboot lasts ``10 s + reboot_s`` (compressed) from the request (sim.Campaign
`_after`: Slurm issues it ~10 s after an idle node's request, docs/slurm.md; `_on_reboot_start`
waits for a running job first). The machine here is up at the same instant counted from the
same request, so Slurm's own delay to RebootProgram and the machine's stop (a second or two on
a busy box: ``issue_s`` in the record) fall inside the reboot instead of being added to it; a
machine that comes later than that boots at once, and the lateness shows in the comparison.

The boot unit's wait for slurmd to register (examples/systemd/gpuhc-retest.service's
ExecStartPre, a 5 s poll) is compressed like every other interval, and the start of its
`gpuhc quarantine retest` is recorded (``retest`` in calls.log): the model decides its retest a
compressed minute after the boot (sim.Campaign `_on_reboot_done`).
"""

from __future__ import annotations

import time
from pathlib import Path

from .sim import T0

ASK_SH = """#!/bin/sh
# The campaign's {what} stand-in (bench/campaign_model/real.py, real_boot.py): asks the harness,
# which waits the model's compressed {what} time, repairs the node's fault with the model's
# outcome, and answers.
d={dir}
node={node}
echo "$(date +%s.%N) $node $*" > "$d/req.$node.$$"
n=0
while [ ! -e "$d/done.$node.$$" ] && [ $n -lt {polls} ]; do sleep 0.05; n=$((n+1)); done
"""
UNIT_POLL = "sleep 5;"  # the retest unit's ExecStartPre, between two reads of the node's state
AND = " && \\\n"  # how tests/helpers/slurm_cluster_files.py joins the unit's commands in bin/boot


def ask_script(path: Path, what: str, requests: Path, node: str, polls: int) -> None:
    requests.mkdir(parents=True, exist_ok=True)
    path.write_text(ASK_SH.format(what=what, dir=requests, node=node, polls=polls))
    path.chmod(0o755)


def install(cluster, workdir: Path, compression: float) -> Path:
    """The machine's time off (bin/down) and the boot unit on the compressed clock (bin/boot);
    returns the directory of the machines' requests. Called on the started cluster: the first
    boot of every machine has run its unit already, uncompressed, before the campaign's start."""
    requests = workdir / "boots"
    ask_script(cluster.workdir / "bin" / "down", "reboot", requests, '"$1"', 20 * 600)
    boot = cluster.workdir / "bin" / "boot"
    text = boot.read_text()
    commands = text.split(AND)
    if text.count(UNIT_POLL) != 1 or len(commands) != 2 or "quarantine retest" not in commands[1]:
        raise RuntimeError(f"{boot}: not the retest unit's two commands this campaign compresses "
                           f"(examples/systemd/gpuhc-retest.service changed?)")
    mark = f'echo "$(date +%s.%N) retest $node" >> {cluster.log_dir}/calls.log'
    text = AND.join([commands[0], mark, commands[1]]).replace(UNIT_POLL, f"sleep {5.0 / compression:.3f};")
    tmp = boot.with_suffix(".new")
    tmp.write_text(text)
    tmp.chmod(0o755)
    tmp.replace(boot)  # the node script reads it at each boot: never half of it
    return requests


class Reboots:
    """The machines that are off, and when each comes back: the harness's side of bin/down."""

    def __init__(self, campaign, requests: Path, reboot_s: float):
        self.c, self.dir, self.reboot_s = campaign, requests, reboot_s
        self.came: dict[str, float] = {}  # request file -> when it came (epoch)
        self.asked: dict[str, float] = {}  # node -> when gpuhc asked (s from the start)
        self.busy: dict[str, float] = {}  # node -> last seen running a job (s from the start)
        self.count: dict[str, int] = {}  # node -> reboots done
        self.pending: dict[str, bool] = {}  # node -> Slurm showed a reboot asked or under way
        self.log: list = []  # (node, asked, machine off, up) in s from the start
        # The model's reboots per node, in order: when each ended (s from its start).
        self.model_done: dict[str, list[float]] = {}
        for t, n, what, _ in campaign.model.slurm.events:
            if what == "rebooted":
                self.model_done.setdefault(n, []).append(t - T0)

    def off(self, node: str) -> bool:
        """The machine is off: no slurmd to run a health check."""
        return any(r.split(".")[1] == node for r in self.came)

    def seen(self, node: str, flags, running: bool, decided: float | None) -> None:
        """A poll of Slurm's table: a reboot newly asked is dated by the run that asked it."""
        if running:
            self.busy[node] = self.c.rel()
        pending = bool({"REBOOT_REQUESTED", "REBOOT_ISSUED"} & flags)
        if pending and not self.pending.get(node):  # dated once per request, answered in tick()
            self.asked[node] = decided if decided is not None else self.c.rel()
        self.pending[node] = pending

    def due(self, node: str) -> float:
        """When the model's machine is up again: the request (or the end of the job Slurm
        waited for, ASAP), plus Slurm's 10 s to issue it and the reboot, compressed."""
        start = self.asked.get(node, self.c.rel())
        start = max(start, self.busy.get(node, start))
        return start + 10.0 * self.c.model.ts + self.reboot_s

    def tick(self) -> None:
        for req in sorted(self.dir.glob("req.*")):
            node = req.name.split(".")[1]
            came = self.came.setdefault(req.name, time.time())
            if self.c.rel() < self.due(node):
                continue
            self._boot(node)
            self.log.append((node, round(self.asked.get(node, -1.0), 2), round(came - self.c.t0, 2),
                             round(self.c.rel(), 2)))
            self.asked.pop(node, None)
            (self.dir / ("done." + req.name[4:])).touch()
            req.unlink()
            del self.came[req.name]

    def _boot(self, name: str) -> None:
        """The model's outcome of this node's k-th reboot: the faults it repaired are gone, the
        others show again once the retest touches the GPU (sim.Campaign `_on_reboot_done`)."""
        k = self.count.get(name, 0)
        self.count[name] = k + 1
        ended = self.model_done.get(name, [])
        node = self.c.nodes[name]
        for f in list(node.faults):
            mf = self.c.model.faults[f.id]
            healed = mf.how == "reboot" and k < len(ended) and abs(mf.end - T0 - ended[k]) < 1e-6
            if f.cls.app or healed:
                self.c.repair(f, "reboot", keep_lines=False)
            else:
                f.stamp = time.time() + 60.0 * self.c.model.ts + 1.0
        node.old_lines, node.boot = [], time.time()
        self.c.rec.reboots.append((self.c.rel(), name))
        self.c.write_all()
