"""Generate a realistic Slurm node dump of a large GPU cluster, for benchmarks and demos.

Writes the same cluster twice: ``scontrol show node -o`` text (22.05 layout, every key a real
node prints) and ``scontrol show node --json`` / slurmrestd JSON (23.11 layout, time objects
and all), so that a benchmark pays the real per-node cost of each format, not a toy's.
About 5 % of the nodes are out, with the mix of causes a GPU cluster sees: gpuhc drains with
per-GPU reasons, Slurm's own (Not responding, Prolog error, Kill task failed), admin tickets.

    python3 bench/gen_nodes.py --nodes 10000 --out /tmp/nodes   # -> nodes.txt, nodes.json
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

BOOT = 1_717_200_000  # 2024-06-01
NOW = 1_718_107_200  # 2024-06-11 12:00 UTC


def _t(epoch: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(epoch))


def plan(n: int, seed: int = 7) -> list[dict]:
    """Per node: name, partitions, state words, reason, user, reason time."""
    rng = random.Random(seed)
    width = max(4, len(str(n)))
    nodes = []
    for i in range(1, n + 1):
        name = f"gpu{i:0{width}d}"
        parts = ["gpu"] + (["debug"] if i % 50 == 0 else []) + (["long"] if i % 3 == 0 else [])
        base = rng.choices(["ALLOCATED", "MIXED", "IDLE"], weights=[70, 15, 15])[0]
        words, reason, user, when = [base], None, None, None
        roll = rng.random()
        if roll < 0.05:
            when = NOW - rng.randint(60, 14 * 86400)
            kind = rng.random()
            gpu = rng.randint(0, 7)
            if kind < 0.45:
                xid = rng.choice([79, 79, 48, 63, 74, 94, 95, 119])
                reason, user = f"gpuhc: xid{xid} gpu{gpu}", "root"
                words = [base, "DRAIN"]
            elif kind < 0.60:
                reason, user = rng.choice([f"gpuhc: remap Row remap pending on gpu{gpu}; reset required",
                                           f"gpuhc: nvlink link {rng.randint(0, 17)} down on gpu{gpu}",
                                           f"gpuhc: ib mlx5_{gpu}/1 down 42s in 10m"]), "root"
                words = ["IDLE", "DRAIN"]
            elif kind < 0.75:
                reason, user = "Not responding", "slurm"
                words = ["DOWN", "NOT_RESPONDING"]
            elif kind < 0.85:
                reason, user = rng.choice(["Prolog error", "Kill task failed", "Epilog error"]), "root"
                words = [base, "DRAIN"]
            else:
                reason = rng.choice(["RMA PSU ticket 4711", "swap DIMM B2 [hw ticket]", "kernel update",
                                     "NHC: check_hw_ib: No IB port is ACTIVE"])
                user = rng.choice(["root", "alice", "bob"])
                words = [rng.choice(["IDLE", "DOWN"]), "DRAIN"] if "NHC" not in reason else ["IDLE", "DRAIN"]
        nodes.append({"name": name, "partitions": parts, "state": words, "reason": reason, "user": user, "when": when})
    return nodes


def oneline(nodes: list[dict]) -> str:
    lines = []
    for nd in nodes:
        state = nd["state"][0] + ("*" if "NOT_RESPONDING" in nd["state"] else "")
        state += "".join("+" + w for w in nd["state"][1:] if w != "NOT_RESPONDING")
        alloc = 96 if nd["state"][0] == "ALLOCATED" else (48 if nd["state"][0] == "MIXED" else 0)
        line = (
            f"NodeName={nd['name']} Arch=x86_64 CoresPerSocket=48 CPUAlloc={alloc} CPUEfctv=96 CPUTot=96 "
            f"CPULoad={alloc * 0.98:.2f} AvailableFeatures=h100,ib,nvlink ActiveFeatures=h100,ib,nvlink "
            f"Gres=gpu:h100:8(S:0-1) NodeAddr={nd['name']} NodeHostName={nd['name']} Version=22.05.8 "
            "OS=Linux 6.1.0-18-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1 (2024-02-01)  RealMemory=2000000 "
            f"AllocMem={alloc * 16000} FreeMem=1800000 Sockets=2 Boards=1 State={state} ThreadsPerCore=1 "
            f"TmpDisk=3500000 Weight=1 Owner=N/A MCS_label=N/A Partitions={','.join(nd['partitions'])}  "
            f"BootTime={_t(BOOT)} SlurmdStartTime={_t(BOOT + 90)} LastBusyTime={_t(NOW - 30)} "
            f"CfgTRES=cpu=96,mem=2000000M,billing=96,gres/gpu=8 AllocTRES=cpu={alloc},gres/gpu={alloc // 12} "
            "CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s"
        )
        if nd["reason"]:
            line += f" Reason={nd['reason']} [{nd['user']}@{_t(nd['when'])}]"
        lines.append(line)
    return "\n".join(lines) + "\n"


def _num(v: int, set_: bool = True) -> dict:
    return {"set": set_, "infinite": False, "number": v}


def as_json(nodes: list[dict]) -> str:
    out = []
    for nd in nodes:
        alloc = 96 if nd["state"][0] == "ALLOCATED" else (48 if nd["state"][0] == "MIXED" else 0)
        out.append({
            "architecture": "x86_64", "burstbuffer_network_address": "", "boards": 1, "boot_time": _num(BOOT),
            "cluster_name": "big", "cores": 48, "specialized_cores": 0, "cpu_binding": 0, "cpu_load": alloc * 98,
            "free_mem": _num(1800000), "cpus": 96, "effective_cpus": 96, "specialized_cpus": "",
            "energy": {"average_watts": 0, "base_consumed_energy": 0, "consumed_energy": 0,
                       "current_watts": _num(0), "previous_consumed_energy": 0, "last_collected": 0},
            "external_sensors": {"consumed_energy": _num(0, False), "temperature": _num(0, False),
                                 "energy_update_time": 0, "current_watts": 0},
            "extra": "", "power": {"maximum_watts": _num(0, False), "current_watts": 0, "total_energy": 0,
                                   "new_maximum_watts": 0, "peak_watts": 0, "lowest_watts": 0,
                                   "new_job_time": _num(0), "state": 0, "time_start_day": 0},
            "features": ["h100", "ib", "nvlink"], "active_features": ["h100", "ib", "nvlink"],
            "gres": "gpu:h100:8(S:0-1)", "gres_drained": "N/A", "gres_used": f"gpu:h100:{alloc // 12}(IDX:0-7)",
            "instance_id": "", "instance_type": "", "last_busy": _num(NOW - 30), "mcs_label": "",
            "specialized_memory": 0, "name": nd["name"], "next_state_after_reboot": ["INVALID"],
            "address": nd["name"], "hostname": nd["name"], "state": nd["state"],
            "operating_system": "Linux 6.1.0-18-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1 (2024-02-01)",
            "owner": "", "partitions": nd["partitions"], "port": 6818, "real_memory": 2000000, "comment": "",
            "reason": nd["reason"] or "", "reason_changed_at": _num(nd["when"] or 0),
            "reason_set_by_user": nd["user"] or "", "resume_after": _num(0), "reservation": "",
            "alloc_memory": alloc * 16000, "alloc_cpus": alloc, "alloc_idle_cpus": 96 - alloc,
            "tres_used": f"cpu={alloc},gres/gpu={alloc // 12}", "tres_weighted": float(alloc),
            "slurmd_start_time": _num(BOOT + 90), "sockets": 2, "threads": 1, "temporary_disk": 3500000,
            "weight": 1, "tres": "cpu=96,mem=2000000M,billing=96,gres/gpu=8", "version": "23.11.10",
        })
    doc = {"nodes": out, "last_update": _num(NOW),
           "meta": {"plugin": {"type": "openapi/slurmctld", "data_parser": "data_parser/v0.0.40"},
                    "slurm": {"release": "23.11.10", "cluster": "big"}},
           "errors": [], "warnings": []}
    return json.dumps(doc, indent=2)


def write(out_dir: str | Path, n: int, seed: int = 7) -> tuple[Path, Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    nodes = plan(n, seed)
    text_path, json_path = out / "nodes.txt", out / "nodes.json"
    text_path.write_text(oneline(nodes))
    json_path.write_text(as_json(nodes))
    return text_path, json_path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", default="/tmp/gpuhc-nodes")
    a = ap.parse_args()
    for p in write(a.out, a.nodes, a.seed):
        print(f"{p} ({p.stat().st_size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
