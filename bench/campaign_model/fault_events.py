"""The faults' events: a drawn or injected fault arises on its node (a whole leaf for a switch,
a busy node for an application's fault or a hang), its kernel lines are stamped and grow, it
clears by itself or is repaired, a lemon comes back; and a repair's odds. A mixin of
sim.Campaign, apart from the event loop so that each stays one job (docs/campaign.md, "Method")."""

from __future__ import annotations

import random

from . import faults as F
from .node import ONE_FLAP, Node, _epoch, restamp

LEAF_NODES = 8  # nodes under one leaf switch (a rack): a switch event takes them all


class FaultEvents:
    # ------------------------------------------------------------------ events: faults

    def _on_fault(self, cls_name: str, name: str, permanent: bool, recurrence: int = 0, epoch: int = -1) -> None:
        cls = F.BY_NAME[cls_name]
        if cls.app or cls.hang:  # an application's fault, a hang: inside a job, on a node that runs one
            busy = sorted(self.running)
            if not busy:
                return
            name = self.rng.choice(busy)
        node = self.nodes[name]
        if epoch >= 0 and epoch != node.parts_epoch:
            return  # a lemon's return, but its part was swapped since
        if cls.switch:
            leaf = self.names.index(name) // LEAF_NODES
            clears = self.now() + self.rng.uniform(*cls.clears_after_s) * self.ts
            for other in self.names[leaf * LEAF_NODES:(leaf + 1) * LEAF_NODES]:
                self._arise(cls, other, False, clears_at=clears)
            return
        if cls.maintenance:
            self.maintenance(name)
            return
        if cls.host_down:
            if node.off:
                return
            node.off = True  # before the job's end: no epilog runs on a dead host
            # and no job waiting is placed there as this one's end frees it (people.host_down)
            self.slurm.set_down(name, "Not responding")
            self.host_down(self._arise(cls, name, permanent))
            return
        lemon = permanent == "lemon"
        f = self._arise(cls, name, permanent is True, recurrence=recurrence)
        if lemon or recurrence:
            f.lemon = True
        elif cls.lemon_share and not permanent:
            f.lemon = self.rng.random() < cls.lemon_share

    def _arise(self, cls: F.FaultClass, name: str, permanent: bool, clears_at: float | None = None,
               recurrence: int = 0) -> F.Fault:
        node = self.nodes[name]
        f = F.Fault(len(self.faults), cls, name, self.now(), permanent, stamp=self.now(), recurrence=recurrence)
        f.in_job = str(self.running[name]) if name in self.running else None
        # its own draws, apart from the seed's stream: a strength or a death changes no other fault's time
        own = random.Random(self.seed * 1_000_003 + f.id)
        f.strength = F.strength(cls, own)
        if cls.dies_after_s:
            self.at(self.now() + own.uniform(*cls.dies_after_s) * self.ts, "die", f.id)
        if clears_at is None and cls.clears_after_s and not permanent and not cls.hang:
            clears_at = self.now() + self.rng.uniform(*cls.clears_after_s) * self.ts
        if clears_at is not None:
            f.clears_at = clears_at
            self.at(clears_at, "clear", f.id)
        if cls.builds_s:
            f.building = True
            self.at(self.now() + self.rng.uniform(*cls.builds_s) * self.ts, "built", f.id)
            self.at(self.now() + f.strength["reflap_s"] * self.ts, "reflap", f.id)
        f.runs_left = cls.grows_for_runs  # a growing recording: over after these runs of the node
        self._stamp(f, self.now())
        self.faults.append(f)
        node.faults.append(f)
        if not cls.app:
            node.history.append(self.now())
        if f.in_job is not None and not cls.app and not cls.hang:
            self.stats.in_job.append([f.id, cls.name, None])
            self.pending_next_prolog.setdefault(name, []).append(len(self.stats.in_job) - 1)
        if f.in_job is not None:
            if cls.hang or cls.hangs_jobs:  # a bad link: the running job's next collective over it stalls
                self.hang(int(f.in_job), f)
            elif cls.kills_job or cls.app or cls.host_down:
                self.end_job(int(f.in_job), failed=True, why=cls.name)
        self._watch(name)
        return f

    def _stamp(self, f: F.Fault, t: float) -> None:
        """The fault's kernel lines start at ``t``; a recording whose lines span time (an IB
        flap's outages) keeps growing after the fault arose: the node's inputs change again
        once the last line is in the past."""
        f.stamp = t
        path = ONE_FLAP if f.building else f.cls.scenario
        if path not in self.spans:
            from .node import kernel_lines

            stamps = [_epoch(ln[:19]) for ln in kernel_lines(path)]
            self.spans[path] = max(stamps) - min(stamps) if stamps else 0.0
        if self.spans[path] > 0:
            self.at(t + self.spans[path] + 1.0, "log_grew", f.node)

    def _on_log_grew(self, name: str) -> None:
        self.nodes[name].version += 1
        self._watch(name)

    def _on_built(self, fid: int) -> None:
        f = self.faults[fid]
        if f.active and f.building:
            f.building = False
            self._stamp(f, self.now())  # the cable now flaps in earnest
            self._watch(f.node)

    def _on_reflap(self, fid: int) -> None:
        """A building cable's next single flap: the last one's lines stay in the kernel log (until
        a reboot), the new one is stamped now."""
        f = self.faults[fid]
        if not (f.active and f.building):
            return
        node = self.nodes[f.node]
        from .node import kernel_lines

        lines = self.lines_cache.setdefault(ONE_FLAP, kernel_lines(ONE_FLAP))
        node.old_lines += restamp(lines, f.stamp)
        self._stamp(f, self.now())
        node.version += 1
        self._watch(f.node)
        self.at(self.now() + f.strength["reflap_s"] * self.ts, "reflap", fid)

    def _on_clear(self, fid: int) -> None:
        f = self.faults[fid]
        if f.active:
            self._repair(self.nodes[f.node], f, "cleared by itself")
            self._watch(f.node)

    def _repair(self, node: Node, f: F.Fault, how: str, keep_lines: bool = True) -> None:
        f.end, f.how = self.now(), how
        node.faults.remove(f)
        node.version += 1
        if keep_lines:
            from .node import kernel_lines

            path = f.cls.scenario
            lines = self.lines_cache.setdefault(path, kernel_lines(path))
            node.old_lines += restamp(lines, f.stamp) + restamp(list(f.cls.ends_with), self.now())
        if f.lemon and how in ("reset", "reboot"):  # passed its retest; comes back in days
            back = self.now() + self.rng.expovariate(1.0 / (F.LEMON_RECUR_DAYS * 86400.0)) * self.ts
            self.at(back, "fault", f.cls.name, node.name, False, f.recurrence + 1, node.parts_epoch)

    def odds(self, node: Node, f: F.Fault, base: float) -> float:
        """A repair's chance: the class's odds times the sweep's factor, lower for every earlier
        hardware fault of the node within 30 days (faults.HISTORY_FACTOR)."""
        if f.permanent:
            return 0.0
        k = sum(1 for t in node.history if f.start - F.HISTORY_S * self.ts <= t < f.start)
        return min(1.0, base * self.odds_factor * F.HISTORY_FACTOR ** k)
