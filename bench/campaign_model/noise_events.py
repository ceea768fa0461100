"""The noise's events (noise.py's kinds drawn at their rates, laid over a node while they last)
and the sampled health checks of busy nodes. A mixin of sim.Campaign."""

from __future__ import annotations

from . import noise as N
from .active_gpu import PCI
from .node import HC_INTERVAL_S, T0, restamp


class NoiseEvents:
    # ------------------------------------------------------------------ events: noise

    def _draw_noise(self, horizon: float) -> None:
        rng = self.noise_rng
        for kind in N.KINDS:
            if kind.trigger != "random" or not kind.per_node_day:
                continue
            rate = kind.per_node_day * len(self.names) / 86400.0
            t = T0 + rng.expovariate(rate) * self.ts
            while t < horizon:
                self.at(t, "noise", kind.name, rng.choice(self.names))
                t += rng.expovariate(rate) * self.ts
        if self.busy_share > 0:  # sampled health checks of busy nodes
            rate = self.busy_share * len(self.names) / (HC_INTERVAL_S * self.ts)
            t = T0 + rng.expovariate(rate)
            while t < horizon:
                self.at(t, "busy_sample", rng.choice(self.names))
                t += rng.expovariate(rate)

    def _on_noise(self, kind_name: str, name: str) -> None:
        kind, node = N.BY_NAME[kind_name], self.nodes[name]
        if node.off:
            return
        self.stats.noise[kind.name] += 1
        node.version += 1
        if kind.lines:
            lines = list(kind.lines)
            if any(N.ONE_GPU in ln for ln in lines):  # one GPU's driver lines: the GPU they hit is drawn
                gpu = "PCI:" + self.noise_rng.choice(PCI)[:-2]
                lines = [ln.replace(N.ONE_GPU, gpu) for ln in lines]
            node.old_lines += restamp(lines, self.now())
        if kind.sticky:
            node.sticky = N.merge(node.sticky, kind.sticky)
        if kind.loses_s[1] > 0:  # the records of the span are overwritten: gone until the log restarts
            node.lost.append((self.now() - self.noise_rng.uniform(*kind.loses_s) * self.ts, self.now()))
        if kind.lasting:
            ep = (next(self.seq), kind, self.now() + self.noise_rng.uniform(*kind.lasts_s) * self.ts, self.now())
            node.noise.append(ep)
            self.at(ep[2], "noise_end", name, ep[0])
        self._watch(name)

    def _on_noise_end(self, name: str, ep_id: int) -> None:
        node = self.nodes[name]
        if all(ep[0] != ep_id for ep in node.noise):
            return  # ended already (its job's teardown was over)
        node.noise = [ep for ep in node.noise if ep[0] != ep_id]
        node.version += 1
        self._watch(name)

    def _on_busy_sample(self, name: str) -> None:
        if name not in self.running or self._attention(name) or name in self.hc_due:
            return
        self.stats.runs["busy sampled"] += 1
        mark = len(self.slurm.events)
        self._gpuhc(name, "passive")
        self._after(mark)
        self._watch(name)

