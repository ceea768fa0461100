"""One cap for every way out (issue 45; docs/slurm.md, "No exit 1 without the breaker"), on a real
controller of every release: 40 nodes' prologs fail at once (Xid 79) with a cap of 4, while
scontrol answers in 4 s (a shim that sleeps, then runs the release's own scontrol). Every node
counted the breaker a minute earlier ("closed": a health check's count, kept in its state).

Before: most prologs came too late to drain under the breaker, trusted that count, and exited 1;
Slurm answers a failed prolog by draining the node with "Prolog error", which the breaker did not
count, and 8 nodes ended out for a cap of 4. Now: at most 4 nodes are out, whoever took them out,
and the prologs that could not drain under the cap let their job run and say so.

The storm's nodes are defined in slurm.conf but run no slurmd (tests/helpers/slurm_bigcluster.py):
the prologs are started here, with the environment slurmd gives them, and each non-zero exit is
answered as slurmctld answers it, with ``State=DRAIN Reason="Prolog error"``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from gpuhc.slurm.policy.breaker import BreakerState
from gpuhc.state.node import StateStore
from tests.helpers.paths import REPO
from tests.helpers.slurm_bigcluster import BigSlurmCluster
from tests.helpers.slurm_flows import XID79, decisions
from tests.helpers.slurm_storm import cluster_nodes

pytestmark = [pytest.mark.slurm, pytest.mark.serial]  # 40 prologs at once: alone (tests/run.sh)

RUNS, CAP, SLOW_S = 40, 4, 4.0


def write_config(wd) -> str:
    import yaml

    cfg = {"slurm": {"log_file": str(wd / "gpuhc-decisions.log"), "syslog": False,
                     "scontrol": slow(wd, "scontrol"), "sinfo": slow(wd, "sinfo"),
                     "breaker": {"max_drained": CAP, "max_drained_percent": None, "settle_s": 1.0, "jitter_s": 10.0}},
           "output": {"event_log": str(wd / "events.jsonl")}}
    path = wd / "gpuhc.yaml"
    path.write_text(yaml.safe_dump(cfg))
    path.chmod(0o600)
    return str(path)


def slow(wd, program: str) -> str:
    """``program`` (scontrol, sinfo) answering after SLOW_S: a controller under a storm's load."""
    path = wd / f"slow-{program}"
    path.write_text(f'#!/bin/sh\nsleep {SLOW_S}\nexec {program} "$@"\n')
    path.chmod(0o755)
    return str(path)


def closed_count_a_minute_ago(state_dir, node: str) -> None:
    """What this node's health check kept after counting 0 held of the partition a minute ago."""
    state = BreakerState(False, 0, 400, CAP, "partition p1")
    with StateStore(str(state_dir)).transaction() as doc:
        doc.setdefault("slurm", {}).setdefault("breaker", {})[node] = {**state.to_dict(), "time": time.time() - 60}


def test_a_prolog_storm_on_a_slow_controller_takes_at_most_the_cap_out(tmp_path, slurm_release):
    wd = tmp_path
    c = BigSlurmCluster(wd / "cluster", size=400, partition_size=400, release=slurm_release)
    cfg = write_config(wd)
    targets = c.partitions()["p1"][len(c.nodes):][:RUNS]
    with c:
        procs = []
        for i, name in enumerate(targets):
            state = wd / "state" / name
            closed_count_a_minute_ago(state, name)
            env = c.env(PYTHONPATH=str(REPO), SLURMD_NODENAME=name, SLURM_JOB_ID=str(1000 + i), SLURM_JOB_USER="alice")
            argv = [sys.executable, "-m", "gpuhc", "prolog", "--node", name, "--config", cfg,
                    "--nvml-scenario", str(XID79), "--state-dir", str(state)]
            procs.append(subprocess.Popen(argv, env=env, cwd="/", stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.PIPE, text=True))
        codes = {name: p.wait(timeout=120) for name, p in zip(targets, procs)}
        errors = {name: p.stderr.read()[-400:] for name, p in zip(targets, procs)}
        for name, code in codes.items():  # slurmctld's answer to a failed prolog: drain, unless drained already
            if code != 0 and not c.node(name).drained:
                c.scontrol("update", f"NodeName={name}", "State=DRAIN", "Reason=Prolog error", timeout=60)
        out = {n.name: n.reason for n in cluster_nodes(c) if n.name in codes and n.drained}
        assert len(out) <= CAP, (out, codes)
        assert set(codes.values()) <= {0, 1}, errors
        ran = [n for n, code in codes.items() if code == 0]
        assert len(ran) >= RUNS - CAP
        for name in ran:  # each says which harm it chose, and why
            said = [x for x in decisions(wd, name, "prolog") if "letting the job run" in x]
            assert len(said) == 1 and ("circuit breaker open" in said[0] or "a node out past the cap" in said[0]), \
                (name, decisions(wd, name, "prolog"))
        for name, code in codes.items():  # exit 1 only where gpuhc itself holds the node, under the cap
            if code == 1:
                assert out.get(name, "").startswith("gpuhc: xid"), (name, out.get(name))


def test_a_retag_never_takes_the_count_past_the_cap(tmp_path, slurm_release, monkeypatch):
    """A re-tag meant to take no new capacity (``Actuator.drain``: a quarantine or ladder tag)
    that would make a node count where it did not, a retired node tagged ``[q1]`` again, is
    refused at the cap on the real controller; a node gpuhc already holds is re-tagged at the cap."""
    from gpuhc.slurm.act.actuator import Actuator
    from gpuhc.slurm.act.scontrol import Scontrol
    from gpuhc.slurm.policy.breaker import BreakerSettings, survey

    c = BigSlurmCluster(tmp_path / "cluster", size=40, partition_size=40, release=slurm_release)
    with c:
        monkeypatch.setenv("SLURM_CONF", str(c.conf_path))
        monkeypatch.setenv("PATH", c.env()["PATH"])  # this release's scontrol and sinfo
        held = c.partitions()["p1"][len(c.nodes):][:CAP]
        retired = c.partitions()["p1"][len(c.nodes) + CAP]
        for name in held:
            c.scontrol("update", f"NodeName={name}", "State=DRAIN", "Reason=gpuhc: xid Xid 79 on gpu3", timeout=60)
        c.scontrol("update", f"NodeName={retired}", "State=DRAIN", "Reason=gpuhc: RETIRED xid Xid 79 on gpu3",
                   timeout=60)
        said: list[str] = []
        settings = BreakerSettings(max_drained=CAP, max_drained_percent=None, settle_s=0.0)
        act = Actuator(Scontrol(timeout_s=30.0), settings, log=lambda m, **k: said.append(m))
        assert act.drain(retired, "gpuhc: xid Xid 79 on gpu3 [q1]", "quarantine") is False
        assert c.node(retired).reason == "gpuhc: RETIRED xid Xid 79 on gpu3" and "NOT re-tagging" in said[-1]
        assert act.drain(held[0], "gpuhc: xid Xid 79 on gpu3 [q2]", "quarantine") is True  # counted already
        count = survey(cluster_nodes(c), held[0], settings)
        assert len(count.held) == CAP and count.retired == 1, [n.name for n in count.held]
