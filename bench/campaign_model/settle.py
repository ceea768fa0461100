"""Verdicts that harden with time alone (docs/campaign.md, "Method"): the model skips a run
whose inputs are those of the node's last run (sim.py), which is exact only where time cannot
change the verdict. Evidence held over runs, a stuck process past its spans, NVML failing on
consecutive health checks and IB downtime over its window do change it, so a run that found
anything, or stored a timed rule's first sample, leaves its node pending: run at every
health-check slot, as slurmd runs it, until its inputs have stood for the longest of those rules.
A mixin of sim.Campaign."""

from __future__ import annotations

from collections import Counter

from gpuhc.slurm.flows import entry
from gpuhc.slurm.policy.reason import parse_reason

from . import noise as N
from .host_noise import host_at
from .job_activity import stalled
from .node import HC_INTERVAL_S, T0, Node, _epoch

# Observe mode: a run with the inputs of the node's last run of its stage is re-run this often,
# so that what changes with time alone (the xid check's 24 h window) still shows, within 6 h.
OBSERVE_RERUN_S = 6 * 3600.0
# The windows of gpuhc's kernel-log judgements (checks.infiniband down_window_s 600 s, the xid
# rate rules' 1 h, the xid and nvswitch windows' 24 h): a held node's verdict can change only
# when one of its lines crosses one of them (Campaign._held_quiet).
HOLD_WINDOWS_S = (600.0, 3600.0, 86400.0)
LADDER_RECHECK_S = 1800.0  # the ladder's reboot_timeout_s (gpuhc/slurm/repair/ladder.py)


def pending_s(config) -> float:
    """The longest time over which gpuhc's verdict on unchanged inputs can still change: its
    rules that harden with time alone, their spans in ``config`` (Campaign._pending). The
    hour-counting rules (NVLink errors persisting over ``persist_window_h``, IB flaps recurring
    over ``flap_window_h``) harden with new readings, a counter's growth or a flap, each a change
    of the node's inputs that runs it anyway."""
    from gpuhc.checks import passive_checks
    from gpuhc.catalog.evidence import holds_from

    declared = {c.id: c.defaults for c in passive_checks() if c.id in ("host", "infiniband")}
    checks = {c: {**d, **(config.check_settings(c).get("thresholds") or {})} for c, d in declared.items()}
    held = max((h.span_s for h in holds_from(config.section("evidence")).values()), default=0.0)
    # a process stuck, then held; NVML failing on consecutive health checks is the ``driver``
    # hold, no longer than the longest hold
    spans = [float(checks["host"].get("dstate_fail_s") or 0.0) + held,
             float(checks["infiniband"].get("down_window_s") or 0.0)]
    return max(spans) + 2 * HC_INTERVAL_S  # and the slots that see it


class Settling:
    # ------------------------------------------------------------------ attention

    def _attention(self, name: str, stage: str = "passive") -> bool:
        node, row = self.nodes[name], self.slurm.nodes[name]
        mine = parse_reason(row.reason)
        if (mine is not None and mine.retired) or node.off:
            return False  # retired: only kept; off: a person has it, or its host is down
        if stage == "passive" and self._held_quiet(name):
            return False
        if mine is not None or not row.in_service or any(f.changing for f in node.faults):
            return True
        if stage == "epilog" and (self._active_kinds_of(node) or self._spread_reaches_the_line()):
            return True  # the active checks' dice are rolled at every epilog
        return node.settled.get(stage) != node.key()

    def _held_quiet(self, name: str) -> bool:
        """A held node whose last health check failed and sent nothing, with the same inputs and
        Slurm row since (no reboot under way): the same run again gives the same answer until
        one of its kernel lines leaves one of the checks' windows (HOLD_WINDOWS_S); with the
        ladder, at least every LADDER_RECHECK_S, its shortest own deadline."""
        memo = self.nodes[name].hold_memo
        return memo is not None and memo[0] == self._hold_key(name) and self.now() < memo[1]

    def _hold_key(self, name: str) -> tuple:
        row = self.slurm.nodes[name]
        return self.nodes[name].key(), row.base, row.reason, tuple(sorted(row.flags))

    def _hold_until(self, name: str) -> float:
        node, now = self.nodes[name], self.now()
        stamps = [_epoch(ln[:19]) for ln in node.old_lines]
        for f in node.faults:
            stamps.append(f.stamp)
        ends = [t + w for t in stamps for w in HOLD_WINDOWS_S if t + w > now]
        return min(ends) if ends else float("inf")

    def _spread_reaches_the_line(self) -> bool:
        """Whether healthy siblings' spread (active_gpu.SPREAD) can put a healthy GPU below the
        speed check's lines: then a healthy node's epilog is no longer "same inputs, same
        verdict", and each one runs. With the measured spread it cannot (0.976 at worst against
        0.95), so they settle."""
        from gpuhc.active.thresholds import DEFAULTS

        from . import active_gpu

        thr = {**DEFAULTS["gpu-speed"], **(self.config.check_settings("gpu-speed").get("thresholds") or {})}
        lines = [float(thr[k]) for k in ("straggler_fraction", "straggler_warn_fraction") if thr.get(k) is not None]
        return bool(lines) and (1 - active_gpu.SPREAD) / (1 + active_gpu.SPREAD) < max(lines)

    @staticmethod
    def _active_kinds_of(node: Node) -> set[str]:
        return {f.cls.active for f in node.hardware() if f.cls.active}

    def _watch(self, name: str) -> None:
        after = self.now()
        if self._held_quiet(name):
            after = self.nodes[name].hold_memo[1]  # the run that could differ: once a line leaves a window
            if after == float("inf"):
                return
        elif not self._attention(name):
            return
        every = HC_INTERVAL_S * self.ts
        phase = (self.names.index(name) / len(self.names)) * every  # CYCLE spreads the nodes
        k = (after - T0 - phase) // every + 1
        due = T0 + phase + k * every
        # A check already due by then stands; one due later (a held node's, at the end of a
        # window) gives way to this earlier slot: a change of its inputs is read at the next
        # slot, as slurmd's interval reads it (the superseded event finds itself stale, _on_hc).
        if self.hc_due.get(name, float("inf")) <= due:
            return
        self.hc_due[name] = due
        self.at(due, "hc", name, due)

    def _patch(self, name: str) -> dict:
        node = self.nodes[name]
        patch = dict(node.sticky)
        for ep in node.noise:
            patch = N.merge(patch, ep[1].patch)
        if name in self.running and self.noise_on:
            patch = N.merge(N.BUSY, patch)
        for f in node.hardware():
            if f.cls.grows:
                patch = N.merge(patch, f.link_counters(self.now(), node.boot, HC_INTERVAL_S * self.ts))
        jid = self.running.get(name)
        if jid is not None and self.jobs[jid].hung:  # every rank waits in the hung collective
            patch["activity"] = stalled(self.jobs[jid], self.gpus)
        patch["host"] = host_at([ep for ep in node.noise if ep[1].host], node.sticky.get("host"), self.now(), self.ts)
        return patch

    def _gpuhc(self, name: str, stage: str, env: dict | None = None):
        """gpuhc's flow for ``stage`` on the node; settles the node for the stage when the run
        sent nothing and the node is in service with no reason of gpuhc's. In observe mode
        gpuhc changes nothing, so a run whose inputs are those of its last run of the stage,
        less than 6 h ago, is not run again, its reads counted as that run's."""
        flows = {"passive": entry.healthcheck, "prolog": entry.prolog, "epilog": entry.epilog}
        node, row = self.nodes[name], self.slurm.nodes[name]
        key = node.key()
        if self.observe and not any(f.changing for f in node.faults):
            mkey = (name, stage, key, row.base, row.reason, tuple(sorted(row.flags)))
            memo = self.memo.get(mkey)
            if memo is not None and self.now() - memo[0] < OBSERVE_RERUN_S:
                self.slurm.rpcs.update(memo[1])
                self.stats.runs["observe: repeated"] += 1
                return memo[2]
            before = Counter(self.slurm.rpcs)
            out = flows[stage](self._flow(name, stage, env))
            self.memo[mkey] = (self.now(), self.slurm.rpcs - before, out)
            return out
        mark = len(self.slurm.events)
        node.hold_memo = None
        timed = node.timed_state()
        out = flows[stage](self._flow(name, stage, env))
        sent = len(self.slurm.events) != mark
        quiet = not sent and getattr(out, "exit_code", 0) == 0
        if quiet and row.in_service and parse_reason(row.reason) is None and not node.off and not self._pending(
                node, stage, key, timed != node.timed_state()):
            node.settled[stage] = key
        else:
            node.settled.pop(stage, None)
        if (stage == "passive" and not sent and not row.in_service and not row.reboot_pending
                and self.last_verdict == "fail" and not any(f.changing for f in node.faults)):
            until = self._hold_until(name)
            if self.ladder:  # the ladder's own deadlines (reboot_timeout_s) are re-read at least this often
                until = min(until, self.now() + LADDER_RECHECK_S * self.ts)
            node.hold_memo = (self._hold_key(name), until)
        return out

    def _flow(self, name: str, stage: str, env: dict | None = None):
        node = self.nodes[name]
        self.current = node
        node.write(self.now(), self.lines_cache, self._patch(name))
        return node.flow(stage, self.config, self.slurm, self.now(), env)

    def _pending(self, node: Node, stage: str, key: tuple, remembered: bool) -> bool:
        """A verdict that time alone may still harden: this run found something (not a PASS) or
        remembered something a timed rule compares the next run with (``remembered``: a stuck
        process's first sample), and the node's inputs have been these for less than the longest
        of gpuhc's time-dependent rules (``pending_s``: evidence held over runs, a process stuck
        past its spans, NVML failing on consecutive runs, IB downtime and flaps counted over a
        window). Until then it is run at every health-check slot, as slurmd runs it."""
        if self.last_verdict == "pass" and not remembered:
            node.pending.pop(stage, None)
            return False
        since = node.pending.get(stage)
        if since is None or since[0] != key:
            node.pending[stage] = since = (key, self.now())
        return self.now() - since[1] < self.pending_s * self.ts
