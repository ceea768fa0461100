"""The one table of evidence to act: for each class of evidence, what buys a WARN, a drain, a
reboot, a ticket, and whether a drain for it counts toward a lemon (docs/checks.md,
"Evidence to act", is generated from this table and a test holds the two together).

Why a table: on a 1,000-node cluster a signal that acts a little too eagerly is tens of false
drains a week, and admins then switch the tool off. Hardware evidence that the driver or
NVIDIA's catalog says needs a reset or a reboot acts at once, as it always did (the checks'
own verdicts). The node around the GPUs (service probes, mounts, scratch, corrected or
recovered PCIe AER, corrected machine checks, stuck processes) is noisier: a slow ``dcgmi``, an
NFS server's hiccup, one corrected AER on a NIC happen on healthy busy nodes. Such evidence
first warns and drains only once it is *held*: seen on consecutive runs spanning a configured
time (``evidence.<hold>`` in the config, :data:`HOLDS`; the runner keeps the count,
gpuhc/run/hold.py). gpuhc's own failures (a source that did not answer, an internal error) are
ERROR and never drain (docs/ARCHITECTURE.md, "Judging").

A finding names its class by ``Result.evidence``; a finding that names none is of its check's
class (:func:`class_of`), and a check no row names (the active checks: the GPUs under load) is
:data:`GPU`'s. Base layer: the checks, the runner, the lemon rule and ``gpuhc explain`` read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuhc.model.record import FrozenRecord
from gpuhc.model.result import Action


@dataclass(frozen=True, eq=False, repr=False)
class Hold(FrozenRecord):
    """How long evidence must stay before it drains: ``runs`` consecutive runs that saw it,
    spanning at least ``span_s`` from the first of them."""

    runs: int
    span_s: float
    why: str
    # the longest quiet time between two sightings before the count starts again; None: the
    # span (evidence seen every few minutes); longer for evidence only a job's end can show
    gap_s: float | None = None

    @property
    def gap(self) -> float:
        return self.span_s if self.gap_s is None else self.gap_s

    def text(self) -> str:
        runs = f"{self.runs} runs" + (f" over {span_text(self.span_s)}" if self.span_s else " in a row")
        return runs + (f", at most {span_text(self.gap_s)} apart" if self.gap_s is not None else "")


# An experienced site's defaults. The health check runs every 5 minutes (slurm.conf's
# HealthCheckInterval=300 in examples/slurm/), and an epilog may run seconds after it: three
# sightings alone could be one minute of a busy NFS server, so the span is what holds it.
# Fifteen minutes outlasts a service restart, a package upgrade, an NFS server's failover and
# an exporter's slow scrape, and is still short against the hours a job loses on a node whose
# DCGM, mount or scratch is really gone (four runs at the default interval).
# NVML that does not answer is held longer: a healthy GPU in a long resource-manager call (error
# recovery, page retirement, a client holding the RM lock) stalls NVML for minutes, and a drain
# for it is a drain of a good node; twenty minutes is several times the longest such stall and
# still short against a driver that stays wedged until the node reboots. A task hung in the
# driver is its own evidence (the hung-task check, `gpu-driver-hung`) and drains at once.
HOLDS: dict[str, Hold] = {
    "host": Hold(3, 900.0, "outlasts a service restart, an NFS failover, a slow scrape; four health checks"),
    "driver": Hold(3, 1200.0, "outlasts a long resource-manager call on a healthy GPU; five health checks"),
    # A GPU a little slower than its siblings (below gpu-speed's straggler_warn_fraction, above
    # its straggler_fraction) is seen only by the epilog's burn-in: one job's worth of it can be
    # another process on the GPU or a hot spell; the same GPU slow after three jobs in a row is
    # the GPU, and every synchronous job on the node runs at its pace meanwhile.
    "straggler": Hold(3, 0.0, "three epilogs in a row: a busy or hot spell passes, a slow GPU stays", 7 * 86400.0),
    # A link between GPUs that stalls the epilog's P2P copy or all-reduce while the same GPUs
    # compute (gpuhc/active/stall.py). Each epilog that sees it follows a job that most likely
    # hung on the same link, so it is held for two, not three: once can be a slow first compile
    # or a driver hiccup; twice in a row, with the burn-in completing both times, is the link.
    "link": Hold(2, 0.0, "two epilogs in a row: a one-off hiccup passes, a stalled link stays", 7 * 86400.0),
}

@dataclass(frozen=True, eq=False, repr=False)
class Evidence(FrozenRecord):
    """One class of evidence and what it buys (the columns of the table in docs/checks.md)."""

    id: str
    kind: str  # "hardware", "driver", "host" (the node around the GPUs) or "gpuhc" (gpuhc's own failure)
    what: str
    checks: tuple[str, ...]  # checks whose findings are of this class unless they name another
    warn: str
    drain: str  # "at once", "never", or how long held (filled from the hold)
    reboot: str
    ticket: str
    lemon: bool  # a drain for it counts toward lemon retirement
    # The :data:`HOLDS` entry (config ``evidence.<hold>``) a FAIL of this class must be held
    # for before it drains (a WARN until then); None: the check's verdict acts at once (a class
    # whose check holds its own evidence over hours says so in ``drain``)
    hold: str | None = None
    # What a held FAIL of this class buys (the result's action, set by gpuhc/run/hold.py): the
    # documented cure of what the evidence shows, not the check's guess (docs/checks.md,
    # "Evidence to act", says why for each); None: the check's own action
    act: Action | None = None

    def drain_text(self, holds: dict[str, Hold] | None = None) -> str:
        if self.hold is None:
            return self.drain
        h = (holds or HOLDS)[self.hold]
        return f"{self.drain} held {h.text()} (evidence.{self.hold})"

    def to_dict(self, holds: dict[str, Hold] | None = None) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "what": self.what, "checks": list(self.checks), "warn": self.warn,
                "drain": self.drain_text(holds), "reboot": self.reboot, "ticket": self.ticket, "lemon": self.lemon,
                "hold": self.hold, "act": self.act.value if self.act else None}


_CATALOG = "as NVIDIA's catalog says (gpuhc explain xid)"
# The classes of evidence that stays, named by the checks that hold it (their results' ``evidence``)
NVLINK_PERSISTENT = "nvlink-growth-persistent"
IB_FLAPS_RECURRING = "ib-flaps-recurring"

TABLE: tuple[Evidence, ...] = (
    # ---- hardware: acts as the driver or NVIDIA's catalog says, at once
    Evidence("xid", "hardware", "Xid / SXid in the kernel log", ("xid", "nvswitch"),
             "catalog's warn codes; below a rate", _CATALOG, _CATALOG, _CATALOG, True),
    Evidence("ecc-uncorrected", "hardware", "ECC uncorrected, row remapping failed or pending", ("ecc",),
             "correctable above the rate", "at once", "GPU reset or reboot (remap pending)",
             "remap failed, spare rows gone", True),
    Evidence("nvlink", "hardware", "NVLink down or errors above the FAIL rate; NVSwitch fabric", ("nvlink", "fabric", "imex"),
             f"errors below the FAIL rate (they drain once they stay: `{NVLINK_PERSISTENT}`)", "at once", "reboot",
             "link down after reboot", True),
    # Evidence that stays (gpuhc/checks/persistence.py): the check holds it over hours itself
    Evidence(NVLINK_PERSISTENT, "hardware", "NVLink errors growing below the FAIL rate, hour after hour", (),
             "each reading at the WARN rate", "at the next job boundary, once they warned in `persist_hours` "
             "distinct hours of `persist_window_h` (checks.nvlink); the reason says how long", "-",
             "at the drain (a link that degrades: reseat or replace)", True),
    Evidence("pcie-fatal", "hardware", "PCIe uncorrected (fatal) error or failed recovery; a GPU link degraded",
             ("pcie", "pcie-aer"), "-", "at once", "reboot", "after reboot", True),
    Evidence("gpu-lost", "hardware", "GPU lost: fallen off the bus, missing from NVML or the bus", ("gpu-count",),
             "-", "at once", "reboot", "still missing after reboot", True),
    Evidence("gpu", "hardware", "the GPU itself: clocks, thermal, power, and the active checks under load",
             ("clocks", "thermal", "power"), "below FAIL", "at once", "as the check says", "as the check says", True),
    # a GPU a little slow, epilog after epilog (gpu-speed's straggler_warn_fraction)
    Evidence("gpu-straggler", "hardware", "a GPU a little slower than its siblings under the epilog's burn-in, "
             "job after job", (), "each epilog", "when", "when held (clears a stuck clock or power state)", "-",
             True, "straggler", Action.DRAIN_REBOOT),
    # a link between GPUs whose P2P copy or all-reduce never ends while the GPUs compute
    Evidence("gpu-link-stall", "hardware", "the epilog's P2P copy or all-reduce stalls (times out at several "
             "times its healthy time) while the burn-in completes on the same GPUs, epilog after epilog", (),
             "each epilog", "when", "when held (a reboot retrains the links)", "stalls again after the reboot",
             True, "link", Action.DRAIN_REBOOT),
    Evidence("memory-uncorrected", "hardware", "host memory or CPU: uncorrected machine check, EDAC UE",
             ("machine-check",), "-", "at once", "-", "at once", True),
    # the NIC and its cable are the node's hardware; a fault many nodes under one leaf share
    # counts for the switch instead (gpuhc/slurm/policy/shared_cause.py)
    Evidence("network", "hardware", "InfiniBand / RoCE port down, flapping or erroring: the cable's or NIC's",
             ("infiniband",), "below FAIL", "at once", "-", "as the check says", True),
    # a port that keeps dropping is its cable or transceiver: replaced, not the node (no lemon)
    Evidence(IB_FLAPS_RECURRING, "hardware", "single InfiniBand flaps of one port recurring over a day", (),
             "each flap", "at the next job boundary, once down in `flap_hours` distinct hours of `flap_window_h` "
             "(checks.infiniband); the reason says how long", "-", "at the drain (the cable or transceiver)", False),
    # firmware and IPoIB: the site's rollout and network configuration, warned unless it says fail
    Evidence("node-config", "host", "a node that lost CPUs or DIMMs at boot (baseline), MIG layout gone; GPU or "
             "HCA firmware not alike, an IPoIB interface down on an ACTIVE port",
             ("host", "mig-layout", "firmware", "ipoib"), "-", "at once", "-", "at once", False),
    Evidence("job-leftover", "host", "a process left on a GPU, a job hung or slowed: the job's, not the node's",
             ("occupancy", "jobs"), "-", "as the check says", "-", "-", False),
    # ---- the node around the GPUs: warns, drains only when held
    # The act of each (docs/checks.md, "Evidence to act", says why): a reboot only where it is
    # the documented cure, else a drain and a person (a ticket)
    Evidence("service", "host", "GPU service not running or not answering its probe (retried in the run)",
             ("services",), "at once", "when", "never (a restart of the service is the cure)", "when held",
             False, "host", Action.DRAIN_TICKET),
    Evidence("mount", "host", "site-named mount missing or slower than its bound; a process stuck on it",
             (), "at once", "when", "never (the file server is the fault)", "when held", False, "host",
             Action.DRAIN_TICKET),
    Evidence("scratch", "host", "local scratch nearly full", (), "below scratch_warn_pct", "below scratch_fail_pct and",
             "-", "when held (a person cleans it)", False, "host", Action.DRAIN_TICKET),
    Evidence("aer-corrected", "host", "PCIe AER corrected or non-fatal recovered errors, as a rate", (),
             "at corrected_warn", "at corrected_fail (off) and", "-", "when held", False, "host", Action.DRAIN_TICKET),
    Evidence("mce-corrected", "host", "corrected machine checks / memory errors, as a rate", (),
             "at corrected_warn", "at corrected_fail (off) and", "-", "when held", False, "host", Action.DRAIN_TICKET),
    # the storage around the node: one NFS server's hiccup never drains a partition
    Evidence("remote-storage", "host", "an NFS server not responding (no OK since), I/O errors on a network "
             "block device, an NVMe namespace with no path left; NFS lock reclaim failures warn", (), "at once",
             "when", "never (the server is the fault)", "when held", False, "host", Action.DRAIN_TICKET),
    Evidence("kernel-health", "host", "soft lockup, a previous boot's panic (software), file-max limit reached",
             ("kernel-health",), "at once, once", "never", "-", "-", False),
    # a file-system wait drains as its mount's evidence (``mount``); FUSE never drains
    Evidence("stuck-process", "host", "process stuck in uninterruptible sleep, no progress between runs; drains "
             "only in the GPU driver holding a GPU", (), "after dstate_warn_s", "after dstate_fail_s and",
             "when held (the driver's state is wedged)", "-", False, "host", Action.DRAIN_REBOOT),
    # a task stuck inside the GPU driver (the kernel's hung-task report, its stack the kernel's own)
    Evidence("gpu-driver-hung", "driver", "a task hung in the GPU driver (hung-task report, stack in nvidia*)",
             ("hung-task",), "-", "at once", "reboot", "-", False),
    # the ConnectX firmware's own fatal words (the cable and the port are the network row's)
    Evidence("nic-firmware", "hardware", "ConnectX (mlx5) firmware fatal, command time-outs; slot power, module or adapter heat",
             ("nic-health",), "slot power, module or adapter heat, TX time-out", "at once", "-", "at once", True),
    # a local disk is the node's own: a job's checkpoints and scratch are on it, and a failed
    # member, a disabled controller or a read-only file system stays until a person acts
    Evidence("disk", "hardware", "local disk: md member failed, NVMe controller disabled, I/O errors, "
             "file system read-only", ("storage",), "an NVMe command time-out (the driver resets and retries)",
             "at once", "-", "at once", True),
    # the panic's own reason names the hardware (machine check, NMI, hardware error): a person reads it
    Evidence("panic-hardware", "hardware", "a previous boot's kernel panic whose reason is the hardware's", (),
             "at once", "never (the node is up again; the machine-check check fails on the error itself)", "-",
             "-", True),
    # counted by the health check's flow (gpuhc/slurm/flows/wedged.py), held by its own hold
    Evidence("nvml-wedged", "driver", "NVML hung or failed on consecutive health checks (driver wedged?)", ("nvml",),
             "each run: gpuhc could not judge (ERROR)", "when", "when held (a reboot is the cure)", "-", False, "driver",
             Action.DRAIN_REBOOT),
    # ---- gpuhc's own failures
    Evidence("gpuhc", "gpuhc", "gpuhc could not judge: a source or probe of its own timed out, an internal error",
             ("state",), "ERROR", "never", "never", "never", False),
)

_BY_ID = {e.id: e for e in TABLE}
_BY_CHECK = {c: e for e in TABLE for c in e.checks}
GPU = _BY_ID["gpu"]  # a check no row names: the active checks judge the GPUs under load


def span_text(seconds: float) -> str:
    if seconds >= 86400 and seconds % 86400 == 0:
        return f"{seconds / 86400:g} d"
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds >= 60:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


def by_id(class_id: str) -> Evidence:
    return _BY_ID[class_id]


def class_of(check: str, evidence: str | None = None) -> Evidence:
    """A finding's class: the one it names, else its check's, else :data:`GPU`'s."""
    if evidence is not None and evidence in _BY_ID:
        return _BY_ID[evidence]
    return _BY_CHECK.get(check, GPU)


def counts_toward_lemon(check: str, evidence: str | None = None) -> bool:
    return class_of(check, evidence).lemon


def holds_from(section: dict[str, Any] | None) -> dict[str, Hold]:
    """The holds as the config's ``evidence`` section sets them (a missing one: the default)."""
    out = {}
    for name, h in HOLDS.items():
        got = (section or {}).get(name) or {}
        gap = got.get("gap_s", h.gap_s)
        out[name] = Hold(int(got.get("runs", h.runs)), float(got.get("span_s", h.span_s)), h.why,
                         None if gap is None else float(gap))
    return out


def schema() -> dict[str, Any]:
    """The config's ``evidence`` section, from :data:`HOLDS` (declared once, here)."""
    from gpuhc.text.schema import Key

    return {name: {"runs": Key(int, h.runs, f"consecutive runs that must see {name} evidence before it drains",
                               min=1, max=1000),
                   "span_s": Key(float, h.span_s, f"and the time they must span, from the first ({h.why})",
                                 min=0.0, max=30 * 86400.0),
                   "gap_s": Key(float, h.gap_s, "the longest time between two sightings before the count starts "
                                "again (null: span_s)", min=1.0, max=30 * 86400.0, nullable=True)}
            for name, h in HOLDS.items()}


def markdown(holds: dict[str, Hold] | None = None) -> str:
    """The table docs/checks.md carries, as this module declares it."""
    head = "| class | kind | what | checks | WARN | drain | reboot | ticket | lemon |\n" + "|---" * 9 + "|\n"
    rows = [f"| `{e.id}` | {e.kind} | {e.what} | {', '.join(e.checks) or '(tagged)'} | {e.warn} | "
            f"{e.drain_text(holds)} | {e.reboot} | {e.ticket} | {'yes' if e.lemon else 'no'} |" for e in TABLE]
    return head + "\n".join(rows) + "\n"
