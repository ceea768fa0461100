"""The GPU under gpuhc's active checks, for the campaign: the worker's answers (the hardware
boundary of gpuhc/active/orchestrate.py, whose ``run_tasks`` this stands in for), so that the
shipped epilog's burn-in, speed, HBM, memtest, host-link, P2P and NCCL judges run for real.

A healthy node answers what healthy H100s measured (tests/helpers/active_results.py, from
docs/verification.md runs 7 and 8), in the precisions the config's burn-in computes: the timed
``active.dtypes`` (bf16 and tf32 shipped) and its correctness pass ``active.check_dtypes`` (fp16,
fp32 and fp64 shipped; a precision in both is timed only), read from the task's parameters as the
real worker reads them. A node with silent data corruption gives a different burn-in hash on one
GPU for each precision the burn-in computes and the fault corrupts, timed or in the pass, in the
runs where it triggers (faults.strength: which precisions, how often, one draw per precision and
run; a fault in a precision the config's burn-in does not compute never shows there); a slow GPU
computes its fault's share below its siblings' rate in the timed precisions (the pass's rates are
judged by nobody). Healthy siblings are not alike: each GPU's burn-in rate of a run is drawn within
:data:`SPREAD` of the recording's (four H200s measured 672-681 bf16 and 345-353 tf32 TFLOP/s in
one run, docs/verification.md: within 1.2 % of their middle), the slow GPU's too, so a line set
too close to the siblings shows its false drains here. A bad link (faults.LINK_PAIR) either
stalls the peer copy and the all-reduce, which then time out as the real supervisor times them
out (gpuhc/active/supervise.py: a "timeout" outcome at the task's time-out, which uses up that
much of the stage's budget), or carries data at its strength's share of its peers' rate: that
pair's copies both ways, and the all-reduce's bandwidth, which the slowest link bounds.
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

from gpuhc.active.supervise import Outcome, Session

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: tests.helpers
from tests.helpers import active_results as R  # noqa: E402

from .faults import LINK_PAIR  # noqa: E402


PCI = ("0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0", "0000:9a:00.0", "0000:ab:00.0",
       "0000:ba:00.0", "0000:db:00.0")  # examples/scenarios/healthy-8xh100.yaml
DEVICES = [{"cuda": i, "index": i, "pci": p, "name": "NVIDIA H100 80GB HBM3", "sm_count": 132, "subject": f"gpu{i}",
            "procs": []} for i, p in enumerate(PCI)]
SICK_GPU = "gpu5"
SPREAD = 0.012  # each GPU's burn-in rate, a run: the recording's within this share, uniform
STALLS = ("p2p", "nccl")  # the worker's tasks that move data over the links between GPUs


def healthy(task: str, n: int = 8, params: dict | None = None) -> dict:
    if task == "burnin":
        from gpuhc.active.registry import correctness_pass

        p = params or {"dtypes": ["bf16", "tf32"]}
        return R.healthy_burnin(n, tuple(p["dtypes"]), tuple(correctness_pass(p)))
    return {"topology": lambda: R.healthy_topology(n), "hbm": lambda: R.healthy_hbm(n),
            "memtest": lambda: R.healthy_memtest(n), "hostlink": lambda: R.healthy_hostlink(n),
            "p2p": lambda: R.healthy_p2p(n), "nccl": lambda: R.healthy_nccl(n)}[task]()


def measure(task: str, kinds: dict[str, dict], rng: random.Random, spread: random.Random | None = None,
            params: dict | None = None) -> dict:
    """What the worker would report for ``task`` (run with ``params``, the plan's) on a node whose
    GPU faults are ``kinds`` (active kind -> the fault's strength, faults.strength); ``spread``
    draws the healthy siblings' differences (None: all alike)."""
    data = healthy(task, params=params)
    link = kinds.get("link")
    if link is not None and link.get("epilog") == "slow":
        a, b = LINK_PAIR
        if task == "p2p":
            for pair in (f"{a}->{b}", f"{b}->{a}"):
                data["pairs"][pair]["gbps"] = round(data["pairs"][pair]["gbps"] * link["keep"], 1)
        elif task == "nccl":
            for k in ("algbw_gbps", "busbw_gbps"):
                data[k] = round(data[k] * link["keep"], 1)
    if task == "burnin":
        sdc = kinds.get("sdc")
        for dtype, dd in data["dtypes"].items():
            for g in dd["gpus"].values() if spread is not None else ():
                keep = 1.0 + spread.uniform(-SPREAD, SPREAD)
                g["tflops"] = round(g["tflops"] * keep, 1)
                g["tflops_chunk_min"] = round(g["tflops_chunk_min"] * keep, 1)
            g = dd["gpus"][SICK_GPU]
            if "slow" in kinds:
                keep = 1.0 - kinds["slow"]["slower"]
                g["tflops"] = round(g["tflops"] * keep, 1)
                g["tflops_chunk_min"] = round(g["tflops_chunk_min"] * keep, 1)
        for dtype, dd in [*data["dtypes"].items(), *(data.get("checked") or {}).items()]:
            if sdc is not None and dtype in sdc["precisions"] and rng.random() < sdc["trigger"]:
                g = dd["gpus"][SICK_GPU]
                g["hash"] = g["hash"][:-4] + "d00d"
    return data


def stand_in(kinds_of, rng: random.Random, spread: random.Random | None = None):
    """A ``run_tasks`` for gpuhc.active.orchestrate: ``kinds_of()`` names the current node's
    active-visible faults; ``spread`` (measure's) draws the healthy siblings' differences."""

    def run_tasks(tasks, spawn, deadline, startup_timeout, choose, timeout_of, progress=None) -> Session:
        hello = {"ev": "hello", "devices": [dict(d) for d in DEVICES], "nvml_count": 8, "cupy": True}
        choose(hello)
        kinds = kinds_of()
        stalled = (kinds.get("link") or {}).get("epilog") == "stall"
        outcomes, spent = {}, 0.0
        for t in tasks:
            if stalled and t.name in STALLS:
                # the real supervisor's answer for a task past its time-out (supervise._await,
                # and its "not run" for a task the budget left behind no longer has room for)
                n = len(DEVICES)
                remaining = deadline - time.monotonic() - spent
                if remaining < t.estimate_s(n):
                    outcomes[t.name] = Outcome(t.name, "skipped", message=(
                        f"not run: {max(0.0, remaining):.0f}s of the stage budget left, needs ~{t.estimate_s(n):.0f}s"))
                    continue
                timeout = min(timeout_of(t, n) or t.timeout_s(n), remaining)
                spent += timeout
                outcomes[t.name] = Outcome(t.name, "timeout", message=f"timed out after {timeout:.0f}s",
                                           seconds=round(timeout, 3))
                continue
            outcomes[t.name] = Outcome(t.name, "done", measure(t.name, kinds, rng, spread, t.params))
        return Session(hello=hello, outcomes=outcomes)

    return run_tasks
