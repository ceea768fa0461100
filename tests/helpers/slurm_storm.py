"""A storm of failing health checks against a big real controller (tests/helpers/slurm_bigcluster.py):
the machinery shared by bench/bench_storm.py (10,000 nodes, today's code against this one) and
tests/slurm_real/test_storm.py (a scaled-down storm in the normal test run).

Every ``gpuhc healthcheck`` of a storm judges a different node on a failing scenario, all started
at once at nice 10, while a probe times an unrelated ``scontrol ping``/``squeue`` every 0.25 s.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path


def write_config(work: Path, cap_percent: float, jitter_s: float | None = None, ledger_node: str | None = None,
                 name: str = "gpuhc.yaml", deadline_s: float | None = None) -> Path:
    """The storm's gpuhc.yaml. ``jitter_s``/``ledger_node`` None leave the key out: older code
    knows neither. ``deadline_s``: the health check's deadline (None: the default, 55 s), for a
    test box so loaded that 200 processes cannot finish their checks inside it."""
    import yaml

    path = work / name
    breaker = {"max_drained": None, "max_drained_percent": cap_percent, "settle_s": 1.0}
    if jitter_s is not None:
        breaker["jitter_s"] = jitter_s
    if ledger_node is not None:
        breaker["ledger_node"] = ledger_node
    data = {"slurm": {"syslog": False, "log_file": str(work / "decisions.log"), "timeout_s": 10.0, "breaker": breaker}}
    if deadline_s is not None:
        data["slurm"]["deadline_s"] = {"passive": deadline_s}
    path.write_text(yaml.safe_dump(data))
    path.chmod(0o600)
    return path


class Probe(threading.Thread):
    """``scontrol ping`` and ``squeue`` in turn, every 0.25 s: the unrelated user's view. Run at
    nice -15 (the storm runs at nice 10) so that on a small test box the time is the controller's
    answer, not the wait for a CPU; sdiag's own per-RPC times are recorded beside it."""

    def __init__(self, cluster):
        super().__init__(daemon=True)
        self.cluster, self.stop, self.times, self.failures = cluster, threading.Event(), [], 0

    def run(self) -> None:
        cmds = (["scontrol", "ping"], ["squeue", "-h"])
        i = 0
        while not self.stop.is_set():
            t = time.monotonic()
            cp = self.cluster.run(cmds[i % 2], check=False, timeout=60, preexec_fn=lambda: os.nice(-15))
            self.times.append(time.monotonic() - t)
            self.failures += cp.returncode != 0
            i += 1
            self.stop.wait(0.25)


def storm(cluster, code: str, cfg: Path, state_root: Path, targets: list[str], scenario: Path) -> dict:
    """One storm: a `gpuhc healthcheck` per target node at once, with ``code`` on PYTHONPATH."""
    import hostlist

    from tests.helpers.slurm_bigcluster import lo_bytes, sdiag_rpc_stats

    reset(cluster, targets)
    state_root.mkdir(parents=True, exist_ok=True)
    env = cluster.env(PYTHONPATH=code)
    env.pop("GPUHC_BENCH_NETNS", None)
    cluster.reset_sdiag()
    probe = Probe(cluster)
    b0 = lo_bytes()
    t0 = time.monotonic()
    probe.start()
    procs = []
    for name in targets:
        argv = [sys.executable, "-m", "gpuhc", "healthcheck", "--node", name, "--config", str(cfg),
                "--nvml-scenario", str(scenario), "--state-dir", str(state_root / name)]
        # cwd: `python -m` puts it first on sys.path, ahead of PYTHONPATH (the side's code).
        procs.append(subprocess.Popen(argv, env=env, cwd=state_root, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                                      preexec_fn=lambda: os.nice(10)))
    codes = [p.wait() for p in procs]
    wall = time.monotonic() - t0
    probe.stop.set()
    probe.join()
    served = lo_bytes() - b0
    stats = sdiag_rpc_stats(cluster.sdiag())
    rpcs = {k: v[0] for k, v in stats.items()}
    part = cluster.partitions()["p1"]
    members = set(part)
    drained = [n for n in cluster_nodes(cluster) if n.name in members and n.drained]
    held = [n for n in drained if (n.reason or "").startswith("gpuhc:")]
    cap = -(-len(part) * float(yaml_cap(cfg)) // 100)
    return {
        "bytes": served, "rpcs": rpcs, "rpc_total": sum(rpcs.values()), "wall_s": round(wall, 1),
        "probe_max_s": round(max(probe.times), 3), "probe_median_s": round(statistics.median(probe.times), 3),
        "probe_p95_s": round(sorted(probe.times)[int(0.95 * (len(probe.times) - 1))], 3),
        "probe_n": len(probe.times), "probe_failures": probe.failures,
        "ctld_ave_us": {k: v[1] for k, v in stats.items() if k in ("REQUEST_PING", "REQUEST_JOB_INFO",
                                                                    "REQUEST_NODE_INFO", "REQUEST_NODE_INFO_SINGLE")},
        "held": len(held), "drained": len(drained), "cap": int(cap), "held_nodes": hostlist.collect_hostlist([n.name for n in held]),
        "exit_codes": {str(c): codes.count(c) for c in sorted(set(codes))},
        # Nodes whose run ended otherwise than drained (1) or held back by the breaker (4).
        "odd_exits": {name: c for name, c in zip(targets, codes) if c not in (1, 4)},
    }


def yaml_cap(cfg: Path) -> float:
    import yaml

    return yaml.safe_load(cfg.read_text())["slurm"]["breaker"]["max_drained_percent"]


def cluster_nodes(cluster):
    from gpuhc.slurm.read.nodes import parse_show_node_oneline

    return parse_show_node_oneline(cluster.run(["scontrol", "show", "node", "-o"], timeout=120).stdout)


def reset(cluster, targets: list[str]) -> None:
    """Every storm node back in service, as after an admin's release (RESUME of a node that never
    registered clears the drain and then reports an error: Slurm 22.05 does exactly that)."""
    import hostlist

    held = [n.name for n in cluster_nodes(cluster) if n.drained]
    for chunk in range(0, len(held), 500):
        cluster.scontrol("update", f"NodeName={hostlist.collect_hostlist(held[chunk:chunk + 500])}", "State=RESUME",
                         check=False, timeout=120)
    left = [n.name for n in cluster_nodes(cluster) if n.drained]
    if getattr(cluster, "ledger", None):  # a fresh ledger: the last storm's entries would open the breaker
        from gpuhc.slurm.policy.ledger import CLAIMS_PREFIX, PREFIX

        cluster.scontrol("update", f"NodeName={cluster.ledger}", f"Comment={PREFIX}", f"Extra={CLAIMS_PREFIX}",
                         timeout=60)
    if left:
        raise RuntimeError(f"nodes still drained after the reset: {hostlist.collect_hostlist(left)}")
    time.sleep(1.0)  # a new second: drain times of the next storm never tie with the last one's
