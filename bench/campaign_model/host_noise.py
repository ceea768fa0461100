"""The node around the GPUs, on every modelled node (docs/campaign.md, "Host"): the host
reader's fields as gpuhc/sources/host.py gives them on a healthy node, and the noise a healthy
busy fleet shows there. Without it the host, services, stuck-process, AER and machine-check
checks were n/a on every run, and whatever they drained could not show in the numbers.

The campaign's site names one NFS mount (/home) and a local scratch (policies.SITE), as an
experienced site's config does; the GPU services run as their packages install them. Each noise
kind below is laid over that host while it lasts (``NoiseClass.host``); its rate and length are
this model's, marked "ours" in docs/campaign.md's assumptions table, and the sensitivity sweep
scales them with the rest. Kernel lines are real ones (sources in tests/fixtures/host/README.md),
moved to the episode's time like the GPU noise's.
"""

from __future__ import annotations

import copy

from .noise_class import NoiseClass

NIC = "0000:07:00.0"  # the node's Ethernet NIC behind a root port, as in the recorded AER
_SERVICE = {"expected": True, "running": True, "answering": True, "error": None}
HEALTHY_HOST = {
    "pci_watch": {NIC: {"role": "nic", "upstream": ["0000:00:1d.0"]}},
    "mounts": {"/home": {"ok": True, "seconds": 0.012, "error": None, "fstype": "nfs4"}},
    "scratch": {"path": "/local/scratch", "free_bytes": 2_900_000_000_000, "total_bytes": 3_500_000_000_000},
    "edac": {"mc0": {"ce": 0, "ue": 0}, "mc1": {"ce": 0, "ue": 0}},
    "services": {"persistenced": dict(_SERVICE), "dcgm": dict(_SERVICE)},
    "dstate": [],
}

# A job's reader in a long NFS read: in state D at every look, its main thread waking between
# them (gpuhc/checks/host_stuck.py: never stuck). Its samples grow with time (``progress``).
_READER = {"pid": 48213, "start": 912345, "comm": "python", "wchan": "rpc_wait_bit_killable", "wait": "file-system",
           "cpu": 2400, "switches": 18000}
# The same wait with the server silent: no progress while it lasts.
_STALLED = dict(_READER, pid=48377, start=913002)
_FUSE = {"pid": 51022, "start": 990411, "comm": "squashfuse_ll", "wchan": "request_wait_answer", "wait": "fuse",
         "cpu": 310, "switches": 4100}
# endlessm/linux pull request 548: one corrected BadTLP on an alx NIC (tests/fixtures/host/)
_AER = ("pcieport 0000:00:1d.0: AER: Corrected error received: 0000:07:00.0",
        "alx 0000:07:00.0: AER: PCIe Bus Error: severity=Corrected, type=Data Link Layer, (Receiver ID)",
        "alx 0000:07:00.0: AER:   device [1969:e0b1] error status/mask=00000040/00002000",
        "alx 0000:07:00.0: AER:    [ 6] BadTLP")


def _stamped(lines: tuple[str, ...], every_s: float = 0.0, times: int = 1) -> tuple[str, ...]:
    """``lines`` ``times`` over, ``every_s`` apart, stamped as noise.py's lines are (restamp
    moves them to the episode's time)."""
    out = []
    for k in range(times):
        sec = int(k * every_s)
        out += [f"2025-03-04T10:{sec // 60:02d}:{sec % 60:02d},{i:06d}+00:00 {ln}" for i, ln in enumerate(lines)]
    return tuple(out)


HOST_KINDS: tuple[NoiseClass, ...] = (
    NoiseClass("nfs-reader", 0.2, (600, 3600), host={"dstate": [_READER]}, progress=True,
               source="a job's process in a long NFS read, in state D at each look but waking between them, "
                      "10-60 min (ours: one per 5 node-days)"),
    NoiseClass("nfs-hiccup", 0.05, (60, 600),
               host={"mounts": {"/home": {"ok": False, "seconds": 5.0, "error": "no answer within 5s", "fstype": "nfs4"}},
                     "dstate": [_STALLED]},
               source="the NFS server silent 1-10 min (a failover, a storm of metadata): the mount's probe times "
                      "out and a reader waits without progress (ours: one per 20 node-days)"),
    NoiseClass("dcgm-slow", 0.1, (1, 300),
               host={"services": {"dcgm": {"expected": True, "running": True, "answering": False,
                                           "error": "no answer within 3s", "attempts": 2}}},
               source="DCGM's host engine slow to answer its probe for one run (ours: one per 10 node-days)"),
    NoiseClass("fuse-stalled", 0.01, (3600, 3 * 86400), host={"dstate": [_FUSE]},
               source="a user's FUSE mount whose server stopped answering: its reader in state D for hours to "
                      "days, a user's doing (ours: one per 100 node-days)"),
    NoiseClass("scratch-filling", 0.02, (3600, 6 * 3600),
               host={"scratch": {"path": "/local/scratch", "free_bytes": 280_000_000_000,
                                 "total_bytes": 3_500_000_000_000}},
               source="a job filling local scratch to 92 % until its epilog cleans it, 1-6 h (ours: one per 50 "
                      "node-days)"),
    NoiseClass("aer-corrected-nic", 0.05, lines=_stamped(_AER),
               source="one corrected PCIe AER on the node's NIC (ours: one per 20 node-days)"),
    NoiseClass("aer-corrected-nic-burst", 0.005, lines=_stamped(_AER, every_s=300.0, times=12),
               source="a corrected-AER burst on the NIC, 12 in an hour, at the warn rate (ours: one per 200 "
                      "node-days)"),
    NoiseClass("mce-corrected", 0.02, sticky={"host": {"edac": {"mc0": {"ce": 1}}}},
               source="a corrected memory error counted by EDAC (ours: one per 50 node-days)"),
)


def host_at(episodes, sticky: dict | None, now: float, ts: float) -> dict:
    """The host section of a run at ``now``: the healthy host, the sticky counters, and each
    lasting episode ``(id, kind, end, start)`` laid over it. ``ts``: the campaign's time scale
    (seconds of virtual time per modelled second), for a reader's progress."""
    out = copy.deepcopy(HEALTHY_HOST)
    for mc, counts in ((sticky or {}).get("edac") or {}).items():
        row = out["edac"].setdefault(mc, {"ce": 0, "ue": 0})
        for k, v in counts.items():
            row[k] = row.get(k, 0) + v
    for ep in episodes:
        kind = ep[1]
        for key, value in kind.host.items():
            if key in ("services", "mounts"):
                out[key] = {**out[key], **copy.deepcopy(value)}
            elif key == "dstate":
                grown = (now - ep[3]) / ts if kind.progress else 0.0
                out[key] = out[key] + [dict(p, cpu=p["cpu"] + int(grown * 2), switches=p["switches"] + int(grown * 7))
                                       for p in value]
            else:
                out[key] = copy.deepcopy(value)
    return out
