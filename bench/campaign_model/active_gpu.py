"""The GPU under gpuhc's active checks, for the campaign: the worker's answers (the hardware
boundary of gpuhc/active/orchestrate.py, whose ``run_tasks`` this stands in for), so that the
shipped epilog's burn-in, speed, HBM, memtest, host-link, P2P and NCCL judges run for real.

A healthy node answers what healthy H100s measured (tests/helpers/active_results.py, from
docs/verification.md runs 7 and 8). A node with silent data corruption gives a different
burn-in hash on one GPU for a precision the burn-in computes and the fault corrupts, in the
runs where it triggers (faults.strength: which precisions, how often; a fault in precisions the
burn-in does not compute never shows there); a slow GPU computes its fault's share below its
siblings' rate. Healthy siblings are not alike: each GPU's burn-in rate of a run is drawn within
:data:`SPREAD` of the recording's (four H200s measured 672-681 bf16 and 345-353 tf32 TFLOP/s in
one run, docs/verification.md: within 1.2 % of their middle), the slow GPU's too, so a line set
too close to the siblings shows its false drains here.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

from gpuhc.active.supervise import Outcome, Session

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: tests.helpers
from tests.helpers import active_results as R  # noqa: E402


PCI = ("0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0", "0000:9a:00.0", "0000:ab:00.0",
       "0000:ba:00.0", "0000:db:00.0")  # examples/scenarios/healthy-8xh100.yaml
DEVICES = [{"cuda": i, "index": i, "pci": p, "name": "NVIDIA H100 80GB HBM3", "sm_count": 132, "subject": f"gpu{i}",
            "procs": []} for i, p in enumerate(PCI)]
SICK_GPU = "gpu5"
SPREAD = 0.012  # each GPU's burn-in rate, a run: the recording's within this share, uniform


def healthy(task: str, n: int = 8) -> dict:
    return {"topology": lambda: R.healthy_topology(n), "burnin": lambda: R.healthy_burnin(n),
            "hbm": lambda: R.healthy_hbm(n), "memtest": lambda: R.healthy_memtest(n),
            "hostlink": lambda: R.healthy_hostlink(n), "p2p": lambda: R.healthy_p2p(n),
            "nccl": lambda: R.healthy_nccl(n)}[task]()


def measure(task: str, kinds: dict[str, dict], rng: random.Random, spread: random.Random | None = None) -> dict:
    """What the worker would report for ``task`` on a node whose GPU faults are ``kinds``
    (active kind -> the fault's strength, faults.strength); ``spread`` draws the healthy
    siblings' differences (None: all alike)."""
    data = healthy(task)
    if task == "burnin":
        for dtype, dd in data["dtypes"].items():
            for g in dd["gpus"].values() if spread is not None else ():
                keep = 1.0 + spread.uniform(-SPREAD, SPREAD)
                g["tflops"] = round(g["tflops"] * keep, 1)
                g["tflops_chunk_min"] = round(g["tflops_chunk_min"] * keep, 1)
            g = dd["gpus"][SICK_GPU]
            sdc = kinds.get("sdc")
            if sdc is not None and dtype in sdc["precisions"] and rng.random() < sdc["trigger"]:
                g["hash"] = g["hash"][:-4] + "d00d"
            if "slow" in kinds:
                keep = 1.0 - kinds["slow"]["slower"]
                g["tflops"] = round(g["tflops"] * keep, 1)
                g["tflops_chunk_min"] = round(g["tflops_chunk_min"] * keep, 1)
    return data


def stand_in(kinds_of, rng: random.Random, spread: random.Random | None = None):
    """A ``run_tasks`` for gpuhc.active.orchestrate: ``kinds_of()`` names the current node's
    active-visible faults; ``spread`` (measure's) draws the healthy siblings' differences."""

    def run_tasks(tasks, spawn, deadline, startup_timeout, choose, timeout_of, progress=None) -> Session:
        hello = {"ev": "hello", "devices": [dict(d) for d in DEVICES], "nvml_count": 8, "cupy": True}
        choose(hello)
        kinds = kinds_of()
        return Session(hello=hello, outcomes={t.name: Outcome(t.name, "done", measure(t.name, kinds, rng, spread))
                                              for t in tasks})

    return run_tasks
