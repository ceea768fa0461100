"""One kind of benign noise (noise.py draws them; host_noise.py's are the node around the GPUs)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class NoiseClass:
    name: str
    per_node_day: float = 0.0  # episodes per node-day (trigger "random")
    lasts_s: tuple[float, float] = (0.0, 0.0)
    patch: dict = field(default_factory=dict)  # laid over the scenario while it lasts
    lines: tuple[str, ...] = ()  # logged when it starts
    trigger: str = "random"  # random | job-end (share of a node's job ends) | job-kill
    share: float = 0.0
    sticky: dict = field(default_factory=dict)  # counters added for good (until a reboot)
    loses_s: tuple[float, float] = (0.0, 0.0)  # the kernel records of this many seconds before it are lost
    # The node around the GPUs while it lasts (host_noise.host_at lays it over the healthy host):
    # services and mounts by name, stuck processes added to the list, anything else replaced.
    host: dict = field(default_factory=dict)
    # Its stuck processes make progress (a long NFS read: the main thread sleeps and wakes, so its
    # CPU time and context switches grow with the time since the episode began).
    progress: bool = False
    source: str = ""

    @property
    def lasting(self) -> bool:
        """An episode that is laid over the node until it ends (not only logged or counted)."""
        return bool(self.patch or self.host)
