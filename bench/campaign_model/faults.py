"""The fault injector: which faults arise, how often, what gpuhc can see of them, what repairs them.

Rates: every row of the Llama 3 paper's Table 5 (arXiv 2407.21783, section 3.3.4: 419
unexpected interruptions in a 54-day snapshot on 16,384 H100 GPUs, 2,048 nodes of 8), one row
of n interruptions being n / (2048 x 54) per node-day. Every row is kept, the ones gpuhc cannot
see included (silent data corruption, NCCL watchdog timeouts, host parts, host maintenance);
where a row is shared out to several classes (148 "faulty GPU", 42 switch/cable + NIC) the split
is ours and docs/campaign.md's assumptions table says so. Repair odds, lemon shares, recurrence
and human delays are this model's assumptions, named there too; ``odds`` (the sensitivity
sweep) multiplies every reset and reboot odds, ``--rate-scale`` every rate.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parent.parent / "examples" / "scenarios"
OWN = HERE / "scenarios"
LLAMA3_NODE_DAYS = 2048 * 54  # 16,384 H100 GPUs, 8 per node, 54 days
DAY = 86400.0


@dataclass(frozen=True)
class FaultClass:
    name: str
    scenario: Path  # what the node's GPUs, kernel log and IB ports look like while it lasts
    per_node_day: float
    row: str = ""  # the Llama 3 Table 5 row(s) it is drawn from
    sees: str = "health check, prolog"  # what of gpuhc can see it (docs/campaign.md's table)
    reset_fix: float = 0.0  # chance that a GPU reset repairs it
    reboot_fix: float = 0.0  # chance that a reboot repairs it
    clears_after_s: tuple[float, float] | None = None  # goes away by itself (uniform range)
    kills_job: bool = True  # a job running on the node ends when it arises
    app: bool = False  # the application's fault: must never drain
    # A person's repair, counted from the person's triage (a working day after the drain):
    # "rma" swaps a part (days), "cable" reseats or replaces a cable or port (hours to days).
    person: str = "rma"
    # A recording that grows and then stops (its last state repeats): the fault lasts this many
    # runs of the node's checks, one state each, and ends with its growth.
    grows_for_runs: int = 0
    hidden: bool = False  # its node looks healthy to the passive checks and the prolog
    active: str | None = None  # what the active checks' worker measures on it: "sdc" or "slow"
    hang: bool = False  # the job on it hangs with no signal until NCCL's watchdog ends it
    host_down: bool = False  # slurmd stops answering: Slurm marks the node DOWN, gpuhc never runs
    maintenance: bool = False  # an admin drains and reboots the node (not a fault of gpuhc's to find)
    switch: bool = False  # a leaf switch: every node under it at once
    lemon_share: float = 0.0  # recurs days after every repair that passed its retest (a true lemon)
    permanent_share: float = 0.0  # no repair ever works (fails every retest)
    builds_s: tuple[float, float] | None = None  # a flap that builds: single flaps first, this long
    # A link that degrades without going down: its error counters grow at every health check
    # for as long as it lasts (GROWTH_PER_CHECK), as a recording's few steps cannot.
    grows: bool = False
    # The kernel lines the driver logs when it ends without a reboot (a port that comes back up),
    # stamped as a scenario's, moved to the end's time.
    ends_with: tuple[str, ...] = ()
    # A host part that degrades before it dies: the node runs and shows its scenario's signs for
    # this long (uniform), then stops answering as host-down does (unless repaired by then).
    dies_after_s: tuple[float, float] | None = None
    # A bad link that stalls with no error code: every job started on the node (and the one on it
    # when it arises) hangs until NCCL's watchdog, job after job, until the node leaves service;
    # the fault does not end with its job (unlike ``hang``, a one-off in the job's own software).
    hangs_jobs: bool = False
    multi_node_only: bool = False  # it hangs (and hurts) only jobs that span nodes: a path between them


def _llama(n: float) -> float:
    return n / LLAMA3_NODE_DAYS


GPU_ODDS = dict(lemon_share=0.08, permanent_share=0.04)
HOST_DEGRADES = 0.5  # of the failing SSDs, the share that errs for hours before the host stops (ours)
MULTI_TENANT = 10.0  # applications' Xids on a shared cluster, times one training job's rate (ours)
# examples/scenarios/ib-port-down.yaml's port coming back: mlx5_core's line for a link that is up
# again (the real dmesg of tests/fixtures/kernel_log/real/08_*, an H100's mlx5_3, on that
# scenario's PCI address).
PORT_UP = ("2025-03-04T10:00:00,000000+00:00 mlx5_core 0000:4b:00.0 mlx5_3: Port: 1 Link ACTIVE",)
CLASSES: tuple[FaultClass, ...] = (
    # Faulty GPU (148): fallen off the bus 60, NVLink down 30, NVLink error bursts 30, NVLink
    # errors below gpuhc's FAIL threshold 14, a slow GPU 14 (our split).
    FaultClass("fallen-off-bus", EXAMPLES / "xid79-fallen-off-bus.yaml", _llama(60), "faulty GPU",
               reboot_fix=0.7, **GPU_ODDS),
    FaultClass("nvlink-down", EXAMPLES / "nvlink-down.yaml", _llama(30), "faulty GPU", reboot_fix=0.6, **GPU_ODDS),
    # Replays and CRC errors are retransmitted by the link layer: a burst slows a job rather than
    # ending it; it lasts the four runs in which its counters grow (docs/campaign.md).
    FaultClass("nvlink-errors", EXAMPLES / "nvlink-errors-growing.yaml", _llama(30), "faulty GPU",
               reset_fix=0.5, reboot_fix=0.6, grows_for_runs=4, kills_job=False, lemon_share=0.08),
    FaultClass("nvlink-below-fail", OWN / "nvlink-below-fail.yaml", _llama(14), "faulty GPU",
               "health check (WARN at each reading; a FAIL once it held for hours)", reboot_fix=0.6,
               clears_after_s=(1 * DAY, 7 * DAY), kills_job=False, person="cable", grows=True),
    FaultClass("slow-gpu", EXAMPLES / "healthy-8xh100.yaml", _llama(14), "faulty GPU", "epilog active checks",
               reboot_fix=0.3, kills_job=False, hidden=True, active="slow"),
    # GPU HBM3 memory (72) and GPU SRAM memory (19).
    FaultClass("ecc-uncorrectable", EXAMPLES / "ecc-uncorrectable.yaml", _llama(36 + 19), "HBM3 half + SRAM",
               reset_fix=0.8, reboot_fix=0.8, **GPU_ODDS),
    FaultClass("row-remap-pending", EXAMPLES / "row-remap-pending.yaml", _llama(36), "HBM3 half",
               reset_fix=0.95, reboot_fix=0.95),
    FaultClass("gsp-timeout", OWN / "gsp-timeout.yaml", _llama(17), "GPU system processor", reset_fix=0.7,
               reboot_fix=0.9, **GPU_ODDS),
    FaultClass("sdc", EXAMPLES / "healthy-8xh100.yaml", _llama(6), "silent data corruption",
               "epilog active checks (burn-in hashes)", kills_job=False, hidden=True, active="sdc"),
    FaultClass("thermal", EXAMPLES / "thermal-hot-gpu.yaml", _llama(6), "GPU thermal interface + sensor",
               "health check", clears_after_s=(1800, 7200), kills_job=False),
    FaultClass("power", EXAMPLES / "power-capped.yaml", _llama(3), "power supply", "health check",
               reboot_fix=0.5, clears_after_s=(3600, 14400), kills_job=False),
    # Network switch/cable (35) + NIC (7): flaps 14, flaps that build over days 7, long
    # port-downs that come back by themselves 7 (a switch-side reset) or need a person's cable or
    # transceiver 7, a leaf switch's event under several nodes at once 7 (our split).
    FaultClass("ib-flap", EXAMPLES / "ib-flapping.yaml", _llama(14), "switch/cable + NIC", "health check",
               clears_after_s=(300, 1800), kills_job=False, person="cable"),
    FaultClass("ib-flap-building", EXAMPLES / "ib-flapping.yaml", _llama(7), "switch/cable + NIC",
               "health check (single flaps first: WARN)", kills_job=False, person="cable",
               builds_s=(1 * DAY, 4 * DAY)),
    FaultClass("ib-port-down", EXAMPLES / "ib-port-down.yaml", _llama(7), "switch/cable + NIC", "health check",
               reboot_fix=0.2, clears_after_s=(4 * 3600, 12 * 3600), person="cable", ends_with=PORT_UP),
    FaultClass("ib-cable", EXAMPLES / "ib-port-down.yaml", _llama(7), "switch/cable + NIC", "health check",
               person="cable", ends_with=PORT_UP),
    FaultClass("switch-event", EXAMPLES / "ib-port-down.yaml", _llama(7), "switch/cable + NIC",
               "health check, on every node of the leaf", clears_after_s=(1200, 5400), person="cable", switch=True,
               ends_with=PORT_UP),
    FaultClass("host-maintenance", EXAMPLES / "healthy-8xh100.yaml", _llama(32), "host maintenance",
               "nothing (an admin's drain)", maintenance=True, person="admin"),
    FaultClass("nccl-hang", EXAMPLES / "healthy-8xh100.yaml", _llama(7), "NCCL watchdog timeouts", "nothing",
               hidden=True, hang=True, kills_job=False, clears_after_s=(0, 0)),
    # Host parts (11): a failing SSD usually errs for hours before the host stops (HOST_DEGRADES of
    # them, ours: "host-disk-failing"); the rest, and the chassis, IO board, CPU and memory, die at once.
    FaultClass("host-down", EXAMPLES / "healthy-8xh100.yaml", _llama(3 * (1 - HOST_DEGRADES) + 2 + 2 + 2 + 2),
               "SSD, server chassis, IO expansion board, CPU, system memory", "nothing (Slurm: DOWN, not responding)",
               host_down=True),
    FaultClass("host-disk-failing", OWN / "host-disk-errors.yaml", _llama(3 * HOST_DEGRADES), "SSD",
               "health check, prolog (storage: local I/O errors)", kills_job=False, person="host",
               dies_after_s=(2 * 3600, 2 * DAY)),
    # Not in the table and not drawn (rate 0): a job's leftover process, for tests that place one
    # (the noise's teardown lag is the drawn kind of it).
    FaultClass("stray-process", EXAMPLES / "stray-process.yaml", 0.0, "not in the table", "prolog, epilog",
               reboot_fix=1.0, kills_job=False),
    FaultClass("app-xid13-43", OWN / "app-xid13-43.yaml", _llama(54 + 2) * 0.7, "software bug + dependency",
               "health check, epilog (must not drain)", app=True),
    FaultClass("app-xid31", OWN / "app-xid31.yaml", _llama(54 + 2) * 0.3, "software bug + dependency",
               "health check, epilog (must not drain)", app=True),
    # Not in the table: Llama 3's row is one team's training job; on a shared cluster many users'
    # code crashes far more often (MULTI_TENANT times the row in all, ours). Last in this list, so
    # that the draw of every class above, and of the real campaign's classes, is unchanged.
    FaultClass("app-xid-other-users", OWN / "app-xid13-43.yaml", _llama(54 + 2) * (MULTI_TENANT - 1),
               "other users' code on a shared cluster (ours)", "health check, epilog (must not drain)", app=True),
    # Faults no recording of gpuhc's own tests stood for until now; after every class above, so
    # that their draws are unchanged. A NIC's firmware (ours: 3 of the table's 7 NIC
    # interruptions, drawn beside the network split above, which gave the row's 42 to the ports).
    FaultClass("nic-firmware", OWN / "nic-firmware-fatal.yaml", _llama(3), "NIC (ours: 3 of 7, beside the split)",
               "health check, prolog (nic-health)", reboot_fix=0.6),
    # A GPU's PCIe link trained at x8 (a riser, a slot): not an interruption, so not in the table;
    # its jobs run with half the host bandwidth (ours: as often as a GPU system processor's fault).
    FaultClass("pcie-downtrain", EXAMPLES / "pcie-width-x8.yaml", _llama(17), "not in the table (ours)",
               "health check, prolog (pcie)", reset_fix=0.3, reboot_fix=0.5, kills_job=False),
    # A wedged driver: NVML hangs until a reboot, and so does the job's next CUDA call (ours: a
    # quarter of the GPU system processor's row, whose timeouts it looks like from the host).
    FaultClass("nvml-hang", OWN / "nvml-hang.yaml", _llama(17 / 4), "not in the table (ours)",
               "health check (NVML hung on consecutive checks)", reboot_fix=0.9),
    # A bad NVLink that stalls without an error code: Llama 3 (section 3.3.4) names NVLink among
    # the failures that show as stalled loads and stores in CUDA kernels with no Xid, and gives
    # no count (ours: 3 per the table's node-days, beside it). Every job on the node hangs until
    # it leaves service; the epilog's p2p and nccl-local tasks time out or measure it slow (its
    # strength). A link retrains at a boot half the time (ours), else the baseboard's RMA.
    FaultClass("nvlink-hang", EXAMPLES / "healthy-8xh100.yaml", _llama(3), "not in the table (ours)",
               "epilog active checks (p2p FAIL when slow; a time-out, ERROR, when stalled); users' reports",
               reboot_fix=0.5, kills_job=False, hidden=True, active="link", hangs_jobs=True),
    # A NIC or IB path that stalls without counting errors (docs/sweep.md's case: the ports stay
    # Active, no counter moves): every multi-node job with the node hangs; a one-node job, on
    # NVLink only, runs. The node checks cannot see it, nor the epilog (one node's all-reduce);
    # gpuhc's sweep, off by default, is built for it (ours: 3, as the bad NVLink; repair as an IB
    # port's: a reboot 0.2, else a person's cable or transceiver).
    FaultClass("ib-hang", EXAMPLES / "healthy-8xh100.yaml", _llama(3), "not in the table (ours)",
               "nothing of the node's checks (gpuhc sweep, off by default); users' reports", reboot_fix=0.2,
               kills_job=False, hidden=True, person="cable", hangs_jobs=True, multi_node_only=True),
)
BY_NAME = {c.name: c for c in CLASSES}
# Drawn beside the table's 419 interruptions, at rates of ours: other users' crashes, and the
# three faults no recording stood for (the NIC's firmware counts 3 of the NIC row a second time).
BEYOND_TABLE = ("app-xid-other-users", "nic-firmware", "pcie-downtrain", "nvml-hang", "nvlink-hang", "ib-hang")
# The classes the real campaign (bench/campaign_model/real*.py) can play on a localhost Slurm.
REAL_CLASSES = ("fallen-off-bus", "ecc-uncorrectable", "row-remap-pending", "nvlink-errors", "nvlink-down",
                "gsp-timeout", "thermal", "power", "ib-flap", "ib-port-down", "app-xid13-43", "app-xid31")
# A repaired GPU fault of a lemon comes back after this many days (exponential mean).
LEMON_RECUR_DAYS = 3.0
# A repair's odds fall with the node's earlier hardware faults within 30 days: times this per fault.
HISTORY_FACTOR = 0.7
HISTORY_S = 30 * DAY
# A person's repair, from the triage: uniform ranges, seconds.
HOST_DOWN_S = (1 * DAY, 5 * DAY)  # a host part's repair (spare SSD, DIMM, CPU, chassis), from the fault
PERSON_S = {"rma": (3 * DAY, 10 * DAY), "cable": (0.5 * DAY, 2 * DAY), "admin": (1800.0, 4 * 3600.0),
            "host": HOST_DOWN_S}
# NCCL's watchdog ends a hung collective after PyTorch's default ProcessGroupNCCL timeout, 10 min.
NCCL_TIMEOUT_S = 600.0
# Strengths: each hidden fault is drawn with its own (ours, docs/campaign.md "Strengths"). A
# slow GPU computes this much below its siblings, uniform: the common straggler of 5-15 %
# included, which the speed check's 0.85 does not see.
SLOW = (0.05, 0.30)
# A GPU that corrupts data does so in some precisions (each of these with chance SDC_PRECISION,
# one at least: a fault in one unit's datapath, the tensor cores' or the FMA pipes'), and in a
# run that computes one of them it shows with a chance drawn log-uniform from SDC_TRIGGER
# (intermittent: a marginal cell, a voltage droop under load).
SDC_PRECISIONS = ("bf16", "fp16", "tf32", "fp32", "fp64")
SDC_PRECISION = 0.5
SDC_TRIGGER = (0.05, 1.0)
# A link that degrades (FaultClass.grows) takes this many replays per health-check interval,
# uniform, and a twelfth as many CRC errors (ours): read at the nvlink check's rotation of three
# checks, 450-7,500 a reading, between its WARN (100) and FAIL (10,000) rates. The link is
# gpu6's link 9, the one of the recordings (examples/scenarios/nvlink-errors-growing.yaml).
GROWING_LINK = (6, 9)
GROWTH_PER_CHECK = (150.0, 2500.0)
CRC_PER_REPLAY = 1 / 12
# A cable that builds (FaultClass.builds_s) flaps once, alone, again and again before it flaps
# in earnest: every this many seconds, log-uniform per fault (ours). Each single flap is a WARN
# of gpuhc's; flaps in three separate hours of a day are its FAIL.
REFLAP_S = (3600.0, 12 * 3600.0)
# A bad link (FaultClass.hangs_jobs): a job on it stalls this long after its start, uniform (its
# first collective over the link, ours). In the epilog it stalls the p2p and nccl-local tasks
# (they time out) with chance LINK_STALL, else it carries data at LINK_SLOW of its peers' rate,
# uniform (all ours); the link joins LINK_PAIR.
STALL_AT_S = (30.0, 600.0)
# A wedged driver (nvml-hang) whose NVML call never returns: in this share the calling thread
# sleeps uninterruptibly in the driver, so gpuhc's hook cannot end and slurmd kills it at
# PrologEpilogTimeout, HOOK_TIMEOUT_S in docs/slurm.md's slurm.conf (hook_kill.py); the noise's
# NVML stalls that outlast a hook are drawn with the same share (ours, to be measured on a device).
UNINTERRUPTIBLE = 0.5
HOOK_TIMEOUT_S = 90.0
LINK_STALL = 0.6
LINK_SLOW = (0.3, 0.7)
LINK_PAIR = ("gpu2", "gpu3")


def strength(cls: FaultClass, rng: random.Random) -> dict:
    """How strong one fault of ``cls`` is (empty for the classes drawn at one strength)."""
    if cls.active == "slow":
        return {"slower": rng.uniform(*SLOW)}
    if cls.active == "sdc":
        hit = [p for p in SDC_PRECISIONS if rng.random() < SDC_PRECISION] or [rng.choice(SDC_PRECISIONS)]
        lo, hi = SDC_TRIGGER
        return {"precisions": tuple(hit), "trigger": lo * (hi / lo) ** rng.random()}
    if cls.grows:
        return {"replay_per_check": rng.uniform(*GROWTH_PER_CHECK)}
    if cls.builds_s:
        lo, hi = REFLAP_S
        return {"reflap_s": lo * (hi / lo) ** rng.random()}
    if cls.name == "nvml-hang":
        return {"uninterruptible": rng.random() < UNINTERRUPTIBLE}
    if cls.hangs_jobs:
        stall_at = rng.uniform(*STALL_AT_S)
        if cls.active != "link":
            return {"stall_at_s": stall_at}
        if rng.random() < LINK_STALL:
            return {"stall_at_s": stall_at, "epilog": "stall"}
        return {"stall_at_s": stall_at, "epilog": "slow", "keep": rng.uniform(*LINK_SLOW)}
    return {}


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
    how: str | None = None  # what ended it: "reset", "reboot", "cleared by itself", "a person"...
    lemon: bool = False  # recurs days after a repair that passed
    building: bool = False  # a flap still in its single-flap phase
    recurrence: int = 0  # 0: the first occurrence; k: the k-th return of a lemon
    strength: dict = field(default_factory=dict)  # faults.strength(): how slow, which precisions

    @property
    def active(self) -> bool:
        return self.end is None

    def hurts(self, size: int) -> bool:
        """Whether it meets a job of ``size`` nodes (a path between nodes meets no one-node job)."""
        return size > 1 or not self.cls.multi_node_only

    @property
    def changing(self) -> bool:
        """Its node's inputs change at every run (a growing recording's runs, a growing link):
        no run of the node can stand for the next."""
        return bool(self.runs_left) or (self.active and self.cls.grows)

    def link_counters(self, now: float, boot: float, check_s: float) -> dict:
        """The scenario patch of a growing link at ``now``: its counters since the fault arose or
        the node booted (the driver's counters start again at a boot), ``check_s`` a health-check
        interval of the campaign's clock."""
        replay = int(self.strength.get("replay_per_check", 0.0) * max(0.0, now - max(self.start, boot)) / check_s)
        gpu, link = GROWING_LINK
        errors = {"replay": replay, "crc": int(replay * CRC_PER_REPLAY)}
        return {"gpus": {gpu: {"nvlinks": [{"link": link, "errors": errors}]}}}


def draw(rng: random.Random, nodes: list[str], days: float, rate_scale: float = 1.0,
         classes: tuple[str, ...] | None = None) -> list[tuple[float, FaultClass, str, bool]]:
    """Every fault of the campaign, in time order: (time s, class, node, permanent). Poisson
    arrivals per class over the whole cluster; ``classes`` limits the draw (the real campaign)."""
    out = []
    horizon = days * DAY
    for cls in CLASSES:
        if classes is not None and cls.name not in classes:
            continue
        rate = cls.per_node_day * len(nodes) * rate_scale / DAY  # per second, cluster-wide
        t = rng.expovariate(rate) if rate > 0 else horizon
        while t < horizon:
            permanent = rng.random() < cls.permanent_share
            out.append((t, cls, rng.choice(nodes), permanent))
            t += rng.expovariate(rate)
    return sorted(out, key=lambda f: f[0])
