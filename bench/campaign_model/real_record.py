"""What one side of a campaign did, in seconds from its start (Record), and the model's run
as one (model_record): the comparison's input (real_agree.py), apart from the real side's
harness (real.py) so that the comparison and its tests read it without the harness."""

from __future__ import annotations

from dataclasses import dataclass, field

from . import faults as F
from .sim import T0, Campaign


@dataclass
class Record:
    """What one side did, in seconds from its start: the comparison's input (real_agree.py)."""
    events: list = field(default_factory=list)  # (t, node, "drain"|"resume", reason)
    faults: list = field(default_factory=list)  # F.Fault with start/end in seconds from the start
    escapes: list = field(default_factory=list)  # (t, job, node, class, arose in a job)
    jobs: dict = field(default_factory=dict)  # started, killed, ...
    notes: list = field(default_factory=list)  # what the real side could not do as the model did
    lag: list = field(default_factory=list)  # real: Slurm showed a change this long after its decision
    job_starts: list = field(default_factory=list)  # (t, nodes) of every job start (real: its prologs that let it run)
    reboots: list = field(default_factory=list)  # (t, node) of every reboot done (the machine up again)
    runs: int = 0
    rpcs: dict = field(default_factory=dict)  # real: sdiag's count per message type over the campaign
    prolog_stops: list = field(default_factory=list)  # (t, node): gpuhc's prolog failed there, Slurm requeued


def model_record(c: Campaign) -> Record:
    """The model's campaign as a Record (its virtual times made relative to its start)."""
    rec = Record(runs=c.stats.runs["real"], jobs=dict(c.stats.jobs))
    rec.events = [(t - T0, n, w, r) for t, n, w, r in c.slurm.events if w in ("drain", "resume")]
    rec.reboots = [(t - T0, n) for t, n, w, _ in c.slurm.events if w == "rebooted"]
    for f in c.faults:
        g = F.Fault(f.id, f.cls, f.node, f.start - T0, f.permanent, None if f.end is None else f.end - T0)
        g.in_job, g.how = f.in_job, getattr(f, "how", None)
        rec.faults.append(g)
    rec.escapes = [(t - T0, j, n, cls, injob) for t, j, n, cls, injob in c.stats.escapes]
    rec.job_starts = [(j.start - T0, j.nodes) for j in c.jobs.values() if j.start is not None]
    rec.prolog_stops = [(t - T0, n) for t, n in c.stats.prolog_stops]
    return rec
