"""Lemon memory's store: the node's fault history, kept in its state and rebuilt from the event log.

The history must outlive what a resume, a reboot or a lost state directory wipes, so
every drain gpuhc decides is written twice: into the node's state (``lemons.faults``, read at
the next drain; a few hundred bytes) and, through the run's event-log line (``slurm.fault``),
into the event log. A state without the ``lemons`` key (new, lost, or moved aside as corrupt)
gets its history back from the event log at the next drain; ``slurm.lemon.event_logs`` names
other logs too (a shared glob of every node's shipped log), so a GPU moved from another node
brings its record. Only drains read any of this, never a healthy run: the hot path pays nothing.
The rule itself is pure (:mod:`gpuhc.slurm.repair.lemons`).

What never counts, and what wipes the slate: a run in the site's test mode (a
replayed fault, ``sources.test_scenario``) records no fault; a person's word that the node is
mended (:func:`forgive`: the resume of a node gpuhc held that someone else did, seen by
:mod:`gpuhc.slurm.flows.handover`, which ``gpuhc quarantine release`` is; ``gpuhc quarantine forget``
on the node) stamps ``lemons.cleared_at``, and drains before it no longer count. The stamp is in
the node's state: a state rebuilt from the event log has no stamp (docs/repair.md says so).

Shared causes: with ``fleet.switch.topology_file`` set (Slurm's topology.conf, local
config: no Slurm call), a drain judged here leaves out every fault of a switch incident (the
same check on K nodes under one leaf within the window, :mod:`gpuhc.slurm.policy.shared_cause`). A
node sees its neighbours' faults only through ``slurm.lemon.event_logs`` naming their shipped
logs; with its own log alone it sees no group, and ``gpuhc fleet lemons`` is where a switch
incident is told apart (docs/repair.md "Lemon memory").
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any, Iterable

from gpuhc.slurm.repair.lemons import Fault, LemonSettings, SharedCauses, fault_of, judge, lemon_reason, noun
from gpuhc.slurm.policy.drain import Act, Decision

STATE_KEY = "lemons"
MAX_FAULTS = 512  # kept in the state, newest; far more than any K


def read_faults(paths: Iterable[str], since: float, problems: list[str], per_node: bool = True) -> list[Fault]:
    """The faults recorded in event logs since ``since``: verified drains only (a withheld or
    observed drain is no fault).

    A lemon count retires nodes, so its evidence is read under the rule for files root trusts
    (:func:`gpuhc.files.fsutil.check_trusted_file`: a log users can write, or reach through their
    link, is refused and said), and (``per_node``, what a node's retirement reads) a log speaks
    for one node only: the node its first event names. A fault line that names another node, or
    whose run was another node's, is skipped and said once per file (docs/security.md, "Acting
    safely"). ``gpuhc fleet lemons`` (``per_node`` False) only lists, from a fleet's merged log."""
    from gpuhc.export.eventlog import expand_paths, read_events
    from gpuhc.files.fsutil import UnsafePath, check_trusted_file

    out: list[Fault] = []
    for path in expand_paths(paths):
        try:
            if os.path.islink(path) or os.path.isfile(path):  # a missing one or a FIFO: the reader says it
                check_trusted_file(path, "lemon event log")
        except UnsafePath as e:
            problems.append(str(e))
            continue
        owner, foreign = None, 0
        for doc in read_events([path], b'"fault":{', problems):  # opened without following a link
            owner = owner if owner is not None else doc.get("node")
            fault = Fault.from_dict(doc["slurm"].get("fault")) if doc["slurm"].get("acted") else None
            if fault is None:
                continue
            if fault.node != doc.get("node") or (per_node and doc.get("node") != owner):
                foreign += 1
                continue
            if fault.time >= since:
                out.append(fault)
        if foreign:
            problems.append(f"{path}: {foreign} fault line(s) for another node than the log's own ({owner}) skipped")
    return out


def merge(*groups: Iterable[Fault]) -> list[Fault]:
    """One record per (node, time): the state and the event log hold the same drains."""
    seen: dict[tuple[str, float], Fault] = {}
    for f in (f for g in groups for f in g):
        seen.setdefault((f.node, round(f.time, 3)), f)
    return sorted(seen.values(), key=lambda f: f.time)


def cleared_at(doc: dict[str, Any]) -> float | None:
    rec = doc.get(STATE_KEY)
    t = rec.get("cleared_at") if isinstance(rec, dict) else None
    return float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) else None


def forgive(doc: dict[str, Any], now: float) -> None:
    """A person said the node is mended: its drains up to ``now`` stop counting (inside the
    caller's state transaction)."""
    rec = doc.get(STATE_KEY) if isinstance(doc.get(STATE_KEY), dict) else {}
    doc[STATE_KEY] = {**rec, "cleared_at": now}


def forget(flow, who: str) -> None:
    """``gpuhc quarantine forget``: wipe this node's lemon history on purpose, logged."""
    from gpuhc.state.node import StateStore

    with StateStore(flow.opts.state_dir).transaction() as doc:
        forgive(doc, flow.now())
    flow.log(f"lemon memory: history of {flow.node} forgotten by {who}: drains before now no longer count", loud=True)


def stored(doc: dict[str, Any]) -> list[Fault] | None:
    """The history in a state document; None when the document has none (rebuild it)."""
    rec = doc.get(STATE_KEY)
    if not isinstance(rec, dict) or not isinstance(rec.get("faults"), list):
        return None
    return [f for f in map(Fault.from_dict, rec["faults"][-MAX_FAULTS:]) if f is not None]


class LemonCheck:
    """A failing run's lemon question: would this drain make the node (or a GPU) a lemon? The
    history is read only when the policy's answer is a drain: a node gpuhc already holds fails
    every few minutes, and its runs must not read logs."""

    def __init__(self, fault: Fault, settings: LemonSettings, flow):
        self.fault, self.settings, self.flow = fault, settings, flow
        self._history: list[Fault] | None = None
        self.cleared_at: float | None = None  # lemons.cleared_at, read with the history
        self.present: frozenset[str] | None = None  # the node's GPU serials now

    @classmethod
    def for_flow(cls, flow, report, reason: str, now: float) -> LemonCheck | None:
        """None when the rule is off."""
        settings = LemonSettings.from_section(flow.slurm["lemon"])
        if not settings.enabled or getattr(flow.opts.sources, "test_scenario", None):
            return None  # a test-mode run replays a fault the site chose: never a lemon's drain
        check = cls(fault_of(report.results, report.snapshot, flow.node, reason, now), settings, flow)
        nvml = getattr(report.snapshot, "nvml", None)
        serials = frozenset(g.serial for g in (getattr(nvml, "gpus", None) or []) if g.serial)
        check.present = serials or None  # no serials read: nothing known to be replaced
        return check

    @property
    def history(self) -> list[Fault]:
        """The state's history, and the event logs' when the state has none or
        ``slurm.lemon.event_logs`` names shared ones; an unreadable source is logged and the
        rule decides on what was read (never a reason to fail the run)."""
        if self._history is not None:
            return self._history
        from gpuhc.state.node import StateStore

        flow, problems = self.flow, []
        try:
            doc = StateStore(flow.opts.state_dir).read()
            history, self.cleared_at = stored(doc), cleared_at(doc)
        except Exception as e:  # a damaged state: the event log still has the history
            problems.append(f"state: {e}")
            history = None
        own = flow.opts.config.section("output").get("event_log")
        rebuild = history is None and own and os.path.lexists(own)  # none yet: a new node, nothing to rebuild
        paths = list(flow.slurm["lemon"]["event_logs"]) + ([own] if rebuild else [])
        if paths:
            found = read_faults(paths, self.fault.time - self.settings.window_s, problems)
            if rebuild and found:
                flow.log(f"lemon memory: no history in the state: rebuilt {len(found)} drain{'s' * (len(found) != 1)} "
                         "from the event log")
            history = merge(history or [], found)
            if rebuild:
                # Kept, so that the next run reads it from the state instead of rebuilding (and
                # saying so) again: in observe mode no verified drain ever stores it otherwise.
                self._save(history)
        for p in problems:
            flow.log(f"lemon memory: {p}", loud=True)
        self._history = history or []
        return self._history

    def causes(self) -> SharedCauses | None:
        """The topology that groups faults into switch incidents, from ``fleet.switch`` when it
        names a topology file; None (every fault the node's own) when it names none. The file
        decides retirements, so it is read under the rule for files root trusts; one that cannot
        be read is said and the rule runs without it."""
        from gpuhc.files.fsutil import check_trusted_file
        from gpuhc.config.topology import read_topology_conf

        switch = self.flow.opts.config.section("fleet")["switch"]
        path = switch.get("topology_file")
        if not path:
            return None
        try:
            check_trusted_file(path, "lemon topology file")
            return SharedCauses.from_section(read_topology_conf(path), switch)
        except Exception as e:  # a missing or unsafe file: judge as before, and say it
            self.flow.log(f"lemon memory: topology not read, switch incidents not told apart ({e})", loud=True)
            return None

    def apply(self, decision: Decision) -> Decision:
        """A drain of a lemon becomes its retirement, with the lemon reason."""
        if decision.act is not Act.DRAIN:
            return decision
        mine = (self.fault.node, round(self.fault.time, 3))  # a recorded panic is in the history already
        history = [f for f in self.history if (f.node, round(f.time, 3)) != mine]
        st = judge(self.fault, history, self.settings, self.cleared_at, self.present, self.causes())
        if st is None:
            return decision
        n = len(st.faults)
        what = f"drained {n} times" if noun(st.faults) == "drains" else f"{n} faults (drains, hardware panics)"
        why = f"{decision.why}; lemon: {st.kind} {st.key} {what} in {self.settings.window_text}"
        reason = lemon_reason(st, self.settings, decision.reason)
        # The memory keeps the reason the node carries (RETIRED ...): an admin's later resume is
        # reported with it, not with the drain's reason it replaced.
        return replace(decision, why=why, reason=reason, memory=replace(decision.memory, reason=reason))

    def remember(self, decision: Decision, extra: dict[str, Any]) -> None:
        """After a verified drain: the fault goes into the state and (``extra``) the event log."""
        if decision.act is not Act.DRAIN:
            return
        extra["fault"] = self.fault.to_dict()
        self._save(merge(self.history, [self.fault]))

    def add(self, faults: list[Fault], keep: bool) -> None:
        """Faults that are no drain of this run (a previous boot's hardware panics,
        :mod:`gpuhc.slurm.repair.lemon_panics`) join the history this run judges; ``keep``: and
        the state's (observe mode keeps nothing, as it keeps no drain)."""
        self._history = merge(self.history, faults)
        if keep:
            self._save(self._history)

    def _save(self, faults: list[Fault]) -> None:
        """This node's own faults inside the window, into the state."""
        from gpuhc.state.node import StateStore

        keep = [f for f in faults if f.node == self.fault.node and f.time > self.fault.time - self.settings.window_s]
        try:
            with StateStore(self.flow.opts.state_dir).transaction() as doc:
                doc[STATE_KEY] = {**({"cleared_at": cleared_at(doc)} if cleared_at(doc) is not None else {}),
                                  "faults": [f.to_dict() for f in keep[-MAX_FAULTS:]]}
        except Exception as e:  # the event log still carries the fault
            self.flow.log(f"lemon memory not saved ({e})", loud=True)
