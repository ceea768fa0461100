"""Benign noise on every node: what a healthy fleet shows that is not a fault (docs/campaign.md,
"Noise"). Each kind is a scenario fragment laid over the node's scenario while it lasts (the
format of gpuhc/sources/scenario.py's steps) and, where the driver logs it, real kernel-log
lines (sources in bench/campaign_model/scenarios/README.md), moved to the episode's time.

Rates are this model's assumptions, sized from what the issue and public reports describe as
common; every one is listed in docs/campaign.md's assumptions table. A counter that grows
(correctable ECC, IB symbol errors, corrected AER) keeps its new value until the node's next
reboot, as the driver's volatile counters and sysfs counters do.
"""

from __future__ import annotations

from .host_noise import HOST_KINDS
from .noise_class import NoiseClass

DAY = 86400.0


def _occ(name: str, used_mib: int, pid: int, uid: int, gpus=range(8)) -> dict:
    return {"occupancy": {"gpus": [
        {"index": i, "memory_used_mib": used_mib if i in gpus else 0, "memory_total_mib": 81559,
         **({"processes": [{"pid": pid, "name": name, "used_mib": used_mib - 3, "kinds": "compute", "uid": uid}]}
            if i in gpus else {})} for i in range(8)]}}


# Real driver lines (sources: scenarios/README.md), written on gpu3's PCI address (ONE_GPU); each
# episode moves them to one of the node's eight GPUs, drawn (noise_events.py): two applications'
# timeouts on one node a day apart are on the same GPU one time in eight, not every time (which
# drained healthy nodes for "Xid 109 x2 on gpu3" in the model alone).
ONE_GPU = "PCI:0000:5d:00"
XID119 = ("2025-03-04T10:03:12,000000+00:00 NVRM: Xid (PCI:0000:5d:00): 119, pid=2024380, name=nvidia-smi, "
          "Timeout after 6s of waiting for RPC response from GPU3 GSP! Expected function 103 (GSP_RM_ALLOC) "
          "(0x2081 0x4).",)
XID109 = ("2025-03-04T10:03:12,000000+00:00 NVRM: Xid (PCI:0000:5d:00): 109, pid=1797828, name=pt_main_thread, "
          "Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x58005",)
XID45 = ("2025-03-04T10:03:12,000000+00:00 NVRM: Xid (PCI:0000:5d:00): 45, pid=12542, name=VLLM::Worker, "
         "channel 0x00000002",)
XID94 = tuple(f"2025-03-04T10:03:12,{us:06d}+00:00 NVRM: Xid (PCI:0000:5d:00): 94, pid=1248209, name=python3.10, "
              f"Ch 0000000{c}" for us, c in ((521616, 8), (552642, 9), (561522, "a"), (570101, "b"),
                                             (578496, "c"), (587265, "d"), (630019, "e")))

BUSY = {"defaults": {"utilization_gpu": 100, "temp_gpu_c": 62, "temp_mem_c": 70, "power_w": 655.0,
                     "sm_clock_mhz": 1755, "clock_event_samples": [0x4, 0x4, 0x4]}}  # SW power cap
KINDS: tuple[NoiseClass, ...] = (
    NoiseClass("monitor-context", 0.05, (120, 1200), _occ("nv-hostengine", 512, 3311, 0),
               source="a DCGM host engine holding a context on every GPU, as root as its systemd unit runs it "
                      "(ours: one per 20 node-days)"),
    # A process's GPU memory is freed as it finishes exiting, and Slurm runs the epilog only once
    # the job's processes are gone: a teardown holds the node COMPLETING, never reaches the
    # epilog or the next prolog (measured on H200, docs/verification.md, "The teardown"). Slurm
    # drains a node whose teardown outlasts UnkillableStepTimeout (60 s) itself, "Kill task
    # failed": not drawn here (the draw stays under it).
    NoiseClass("teardown-lag", trigger="job-end", share=0.01, lasts_s=(6, 60),
               patch=_occ("python3", 1638, 48211, 1000, {2}),
               source="the job's processes still exiting at its end, 6-60 s (1 % of job ends; measured: 0.15-0.25 s "
                      "for GPU memory alone, 10-12 s with 48 GiB of pinned host memory)"),
    NoiseClass("xid119-single", 0.01, (0, 0), lines=XID119, source="one GSP timeout that does not repeat"),
    NoiseClass("xid109", 0.02, (0, 0), lines=XID109, source="context-switch timeout of an application"),
    NoiseClass("xid45-after-kill", trigger="job-kill", share=0.3, lines=XID45,
               source="preemptive channel teardown when a job is killed"),
    NoiseClass("xid94-storm", 0.005, (0, 0), lines=XID94, source="contained ECC error, the application restarts"),
    NoiseClass("ecc-corrected", 0.05, sticky={"gpus": {1: {"ecc_volatile_corrected": 12}}},
               source="correctable ECC single-bit errors"),
    NoiseClass("ib-symbol-errors", 0.05,
               sticky={"ib_ports": [{"device": "mlx5_4", "port": 1, "counters": {"symbol_error": 7}}]},
               source="IB symbol errors below the link's error budget"),
    NoiseClass("aer-corrected", 0.05, sticky={"aer": [{"pci": "0000:9a:00.0", "correctable": 3}]},
               source="PCIe AER corrected errors on a GPU's link"),
    NoiseClass("nvml-timeout", 0.009, (1, 300),
               {"nvml": {"available": False, "error": "Timeout"}},
               source="NVML busy for one run (a GPU in a long RM call)"),
    # The tail of the same: long enough to span two or three health checks; gpuhc drains for
    # NVML failing on consecutive checks only once they span the driver's hold (evidence.driver,
    # 20 min), as a wedged driver does (ours: a tenth of them).
    NoiseClass("nvml-timeout-long", 0.001, (300, 900),
               {"nvml": {"available": False, "error": "Timeout"}},
               source="NVML busy 5-15 min: a long RM call on a healthy GPU, past one health-check interval"),
    # A flood of kernel messages (a user's program printing in a loop, an mlx5 storm) wraps the
    # ring buffer between two reads: the records since gpuhc's last read are gone, a driver line
    # among them included. gpuhc warns "N kernel log record(s) were lost" (docs/checks.md, xid),
    # a warning that changes no act and is not played here; what the model plays is the lost line.
    NoiseClass("kernel-log-loss", 0.01, loses_s=(30, 300),
               source="a kernel-message flood overwrites the records since the last read (ours: one per 100 "
                      "node-days, 30-300 s of records; a file source's rotation loses lines the same way)"),
    NoiseClass("busy", patch=BUSY, source="a running job: GPUs hot and power-capped (health checks sampled)"),
    *HOST_KINDS,
)
BY_NAME = {k.name: k for k in KINDS}
# Health checks of a busy node that has nothing else to look at: this share of them is run
# (the rest would replay the same busy scenario); stated with the results.
BUSY_SHARE = 0.0002
# slurmctld too slow to answer one of gpuhc's RPCs: real Slurm's message for it.
SLURM_TIMEOUT_SHARE = 0.005
SLURM_TIMEOUT = "slurm_load_node error: Socket timed out on send/recv operation"
# Driver upgrades ride on host maintenance: this share of maintenance reboots installs a new driver.
DRIVER_UPGRADE_SHARE = 0.5
NEW_DRIVER = "580.105.08"


def merge(base: dict, over: dict) -> dict:
    """Lay ``over`` on ``base`` as the scenario format does within one step: GPU fields by index,
    IB ports by (device, port), AER by PCI address, anything else replaced. Counters add up
    (two episodes of correctable errors are the sum)."""
    out = dict(base)
    for k, v in over.items():
        if k == "gpus":
            g = {i: dict(f) for i, f in (out.get("gpus") or {}).items()}
            for i, f in v.items():
                cur = g.setdefault(i, {})
                for fk, fv in f.items():
                    cur[fk] = cur.get(fk, 0) + fv if isinstance(fv, int) and fk.startswith("ecc") else fv
            out["gpus"] = g
        elif k in ("ib_ports", "aer"):
            key = (lambda e: (e["device"], e["port"])) if k == "ib_ports" else (lambda e: e["pci"])
            rows = {key(e): e for e in out.get(k) or []}
            for e in v:
                cur = rows.get(key(e))
                if cur is None:
                    rows[key(e)] = e
                elif k == "aer":
                    rows[key(e)] = {**cur, "correctable": cur.get("correctable", 0) + e.get("correctable", 0)}
                else:
                    c = dict(cur.get("counters") or {})
                    for ck, cv in (e.get("counters") or {}).items():
                        c[ck] = c.get(ck, 0) + cv
                    rows[key(e)] = {**cur, "counters": c}
            out[k] = list(rows.values())
        elif k == "host":  # sticky host counters (EDAC's) add up; host_noise.host_at lays the rest
            edac = {mc: dict(c) for mc, c in ((out.get("host") or {}).get("edac") or {}).items()}
            for mc, counts in (v.get("edac") or {}).items():
                row = edac.setdefault(mc, {})
                for ck, cv in counts.items():
                    row[ck] = row.get(ck, 0) + cv
            out[k] = {**(out.get("host") or {}), **v, "edac": edac}
        else:
            out[k] = v
    return out
