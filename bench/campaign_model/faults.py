"""The fault injector: which faults arise, how often, and what repairs them.

Rates (docs/facts.md, "Fault rates"; docs/campaign.md says how each class was derived): the
Llama 3 paper's 54-day table counts 419 unexpected interruptions on 16,384 H100 GPUs (2,048
nodes of 8), so one row of n interruptions is n / (2048 x 54) per node-day. Where the table
lumps several of the injector's classes together (148 "faulty GPU", 72 "HBM3"), the split is
ours and docs/campaign.md says so. The repair odds and durations are this model's assumptions,
named as such in the same document; ``--rate-scale`` multiplies every rate (a stress test, not
the published result).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parent.parent / "examples" / "scenarios"
OWN = HERE / "scenarios"
LLAMA3_NODE_DAYS = 2048 * 54  # 16,384 H100 GPUs, 8 per node, 54 days


@dataclass(frozen=True)
class FaultClass:
    name: str
    scenario: Path  # what the node's GPUs, kernel log and IB ports look like while it lasts
    per_node_day: float
    reset_fix: float = 0.0  # chance that a GPU reset repairs it
    reboot_fix: float = 0.0  # chance that a reboot repairs it
    clears_after_s: tuple[float, float] | None = None  # goes away by itself (uniform range)
    kills_job: bool = True  # a job running on the node ends when it arises
    app: bool = False  # the application's fault: must never drain
    human_fix_s: float = 24 * 3600.0  # a ticket: a person repairs it after this long
    # A recording that grows and then stops (its last state repeats): the fault lasts this many
    # runs of the node's checks, one state each, and ends with its growth.
    grows_for_runs: int = 0


def _llama(n: float) -> float:
    return n / LLAMA3_NODE_DAYS


# Llama 3 table rows -> classes (counts out of 419): faulty GPU 148 split into fallen off the bus
# 74, NVLink errors 37, link down 37; HBM3 72 split into uncorrectable ECC 36 and row remap 36,
# plus SRAM 19 to uncorrectable ECC; GPU system processor 17 -> GSP timeout; network switch and
# cable 35 + NIC 7 -> IB (flaps 21, long port-downs 21); thermal interface and sensor 6 ->
# thermal; power supply 3 -> power throttling; software bug 54 -> application Xids. A stray
# process is not in the table: 1 per 1,000 node-days is an assumption.
CLASSES: tuple[FaultClass, ...] = (
    FaultClass("fallen-off-bus", EXAMPLES / "xid79-fallen-off-bus.yaml", _llama(74), reboot_fix=0.7),
    FaultClass("ecc-uncorrectable", EXAMPLES / "ecc-uncorrectable.yaml", _llama(36 + 19), reset_fix=0.8,
               reboot_fix=0.8),
    FaultClass("row-remap-pending", EXAMPLES / "row-remap-pending.yaml", _llama(36), reset_fix=0.95, reboot_fix=0.95),
    # The recording's counters grow over its first three states and then stop (the fourth repeats
    # the third): the fault is a burst that lasts the four runs in which its counters can be
    # seen to grow, no longer; no lemon of this class. Replays and CRC errors are retransmitted
    # by the link layer, so the burst slows a job rather than ending it (a link that goes down
    # is nvlink-down's, Xid 74); docs/campaign.md, "The NVLink escape".
    FaultClass("nvlink-errors", EXAMPLES / "nvlink-errors-growing.yaml", _llama(37), reset_fix=0.5, reboot_fix=0.6,
               grows_for_runs=4, kills_job=False),
    FaultClass("nvlink-down", EXAMPLES / "nvlink-down.yaml", _llama(37), reboot_fix=0.6),
    FaultClass("gsp-timeout", OWN / "gsp-timeout.yaml", _llama(17), reset_fix=0.7, reboot_fix=0.9),
    FaultClass("thermal", EXAMPLES / "thermal-hot-gpu.yaml", _llama(6), clears_after_s=(1800, 7200), kills_job=False),
    FaultClass("power", EXAMPLES / "power-capped.yaml", _llama(3), reboot_fix=0.5, clears_after_s=(3600, 14400),
               kills_job=False),
    FaultClass("ib-flap", EXAMPLES / "ib-flapping.yaml", _llama(21), clears_after_s=(300, 1800), kills_job=False),
    FaultClass("ib-port-down", EXAMPLES / "ib-port-down.yaml", _llama(21), reboot_fix=0.2,
               clears_after_s=(4 * 3600, 12 * 3600)),
    FaultClass("stray-process", EXAMPLES / "stray-process.yaml", 1e-3, reset_fix=0.0, reboot_fix=1.0,
               kills_job=False),
    FaultClass("app-xid13-43", OWN / "app-xid13-43.yaml", _llama(54) * 0.7, app=True),
    FaultClass("app-xid31", OWN / "app-xid31.yaml", _llama(54) * 0.3, app=True),
)
BY_NAME = {c.name: c for c in CLASSES}
# A hardware fault is a lemon (only retirement ends it) with this chance: an assumption, sized
# so that a 64-node month sees about one (Meta's lemon nodes, arXiv 2410.21680).
LEMON_SHARE = 0.12
LEMON_CLASSES = ("fallen-off-bus", "ecc-uncorrectable", "nvlink-down", "gsp-timeout")


@dataclass
class Fault:
    id: int
    cls: FaultClass
    node: str
    start: float
    permanent: bool = False
    end: float | None = None  # repaired or cleared
    clears_at: float | None = None
    in_job: str | None = None  # the job it arose in
    runs_left: int = 0  # a growing recording's runs still to come (FaultClass.grows_for_runs)
    stamp: float = 0.0  # when its kernel-log lines say it happened (moves on each recurrence)

    @property
    def active(self) -> bool:
        return self.end is None


def draw(rng: random.Random, nodes: list[str], days: float, rate_scale: float = 1.0) -> list[tuple[float, FaultClass, str, bool]]:
    """Every fault of the campaign, in time order: (time s, class, node, permanent). Poisson
    arrivals per class over the whole cluster."""
    out = []
    horizon = days * 86400.0
    for cls in CLASSES:
        rate = cls.per_node_day * len(nodes) * rate_scale / 86400.0  # per second, cluster-wide
        t = rng.expovariate(rate) if rate > 0 else horizon
        while t < horizon:
            permanent = cls.name in LEMON_CLASSES and rng.random() < LEMON_SHARE
            out.append((t, cls, rng.choice(nodes), permanent))
            t += rng.expovariate(rate)
    return sorted(out, key=lambda f: f[0])
