"""The campaign's model against a real Slurm, on the same faults (docs/campaign.md, "Trusting
the model").

The same fault schedule runs twice: in the long campaign's model (gpuhc's flows against the
modelled slurmctld, virtual clock) and on a real slurmctld with one slurmd per node, where each
health check is run as the node runs it (the shim's environment; tests/slurm_real/test_ladder.py
does the same) and the GPU reset is the one fake (the hardware boundary: a script that puts the
healed scenario in place, as the model's stand-in does). Slurm itself is real: drain, reason,
resume. Compressed: the cool-down is 0 in both (600 s shipped), and the health check's
300 s interval becomes one round of runs; gpuhc counts runs, not seconds, for everything else
that decides here (resume_after, the ladder's reset attempts), so both sides must show the same
acts after the same number of runs: the same drains, reasons and resumes, per node, in order.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import yaml
from tests.helpers.paths import REPO

sys.path.insert(0, str(REPO / "bench"))

from campaign_model.faults import BY_NAME  # noqa: E402
from campaign_model.node import IDLE  # noqa: E402
from campaign_model.policies import config_for  # noqa: E402
from campaign_model.sim import HC_INTERVAL_S, Campaign  # noqa: E402
from tests.helpers.slurm_flows import HEALTHY, base_config, gpuhc  # noqa: E402
from tests.helpers.reset_fakes import fake_proc  # noqa: E402

pytestmark = [pytest.mark.slurm, pytest.mark.serial]  # compares timings: runs alone (tests/run.sh)

ROUNDS = 6
# node -> fault class; n4 stays healthy. A reset heals n1 (the model's draw for seed 7 says so,
# asserted below); an application's Xids on n2 must never drain; n3's IB port, down for hours (a
# cable or switch port: "drain + hardware ticket", no ladder step), keeps it drained.
SCHEDULE = {"n1": "row-remap-pending", "n2": "app-xid13-43", "n3": "ib-port-down"}
NODES = ("n1", "n2", "n3", "n4")
EXTRA = {"slurm": {"cooldown_s": 0, "breaker": {"max_drained": 4, "max_drained_percent": None}}}


def model_acts(tmp_path) -> dict[str, list[tuple[str, str | None]]]:
    (tmp_path / "model").mkdir()
    config = config_for("ladder", tmp_path / "model", {**EXTRA, "active": {"enabled": False}})
    # Faults at t=1 s, before every node's first health check; app faults land on a job's node,
    # so n2's is placed by hand below through a job pinned to it.
    model_name = {n: f"gpu{i:03d}" for i, n in enumerate(NODES, 1)}
    inject = [(1.0, cls, model_name[n], False) for n, cls in SCHEDULE.items() if not BY_NAME[cls].app]
    c = Campaign(config, tmp_path / "model", nodes=len(NODES), days=ROUNDS * HC_INTERVAL_S / 86400.0, seed=7,
                 inject=inject + [(30.0, "app-xid13-43", "any", False)], jobs=[(10.0, 1, 3600.0, (model_name["n2"],))],
                 noise=False)
    c.run()
    assert [f.how for f in c.faults if f.cls.name == "row-remap-pending"] == ["reset"]
    names = dict(zip(c.names, NODES))
    acts: dict[str, list] = {n: [] for n in NODES}
    for _, name, what, reason in c.slurm.events:
        acts[names[name]].append((what, reason))
    return acts


def scenario(tmp_path: Path, name: str, source: Path) -> Path:
    p = tmp_path / f"{name}.yaml"
    p.write_text(f"extends: {source}\n" + yaml.safe_dump(IDLE))
    return p


def real_acts(slurm_cluster, tmp_path) -> dict[str, list[tuple[str, str | None]]]:
    wd = tmp_path / "c"
    files = {n: scenario(tmp_path, n, BY_NAME[cls].scenario) for n, cls in SCHEDULE.items()}
    files["n4"] = scenario(tmp_path, "n4", HEALTHY)
    healed = scenario(tmp_path, "healed", HEALTHY)
    reset = tmp_path / "fake-nvidia-smi-reset"
    reset.write_text(f"#!/bin/sh\ncp {healed} {files['n1']}\n")
    reset.chmod(0o755)
    cfg = base_config(wd)
    # The reset procedure around the command (gpuhc/slurm/repair/reset_run.py), as tests/slurm_real/test_ladder.py
    # sets it up: no service to stop, persistence toggled by `true`, the driver's GPU files in a /proc.
    proc = fake_proc(tmp_path / "proc", files["n1"])
    cfg["slurm"]["remediation"] = {"enabled": True, "reset_command": [str(reset), "-r", "-i", "{gpu}"],
                                   "reset_timeout_s": 10,
                                   "reset": {"services": [], "nvidia_smi": shutil.which("true"), "proc_root": str(proc),
                                             "dev_root": str(tmp_path), "fabric_timeout_s": 5}}
    cfg["slurm"]["breaker"].update({"max_drained": 4, "jitter_s": 0.0})
    c = slurm_cluster(workdir=wd, nodes=NODES, gpuhc_config=cfg, node_scenarios={n: str(p) for n, p in files.items()})
    acts: dict[str, list] = {n: [] for n in NODES}
    last = {n: (False, None) for n in NODES}
    try:
        for _ in range(ROUNDS):
            for n in NODES:
                gpuhc(c, "healthcheck", node=n)
                node = c.node(n)
                now = (node.drained or node.down, node.reason if (node.drained or node.down) else None)
                if now != last[n]:
                    was_out = last[n][0]
                    acts[n].append(("resume", None) if not now[0] else ("reason" if was_out else "drain", now[1]))
                last[n] = now
    finally:
        c.stop()
    return acts


def test_model_and_real_slurm_make_the_same_acts(slurm_cluster, tmp_path):
    model = model_acts(tmp_path)
    assert model["n1"][0][0] == "drain" and model["n1"][-1] == ("resume", None)
    assert model["n2"] == [] and model["n4"] == []
    assert [w for w, _ in model["n3"]] == ["drain"]
    real = real_acts(slurm_cluster, tmp_path)
    assert comparable(real) == comparable(model)


def comparable(acts: dict[str, list[tuple[str, str | None]]]) -> dict[str, list[tuple[str, str | None]]]:
    """The acts both sides can see. The model logs every Slurm update; the real side reads Slurm
    after each health check, so a re-tag that the same run ends with a resume (the reset's
    write-ahead ``[reset n/N]``, docs/repair.md, when the retest passes) never shows there."""
    out = {}
    for node, seq in acts.items():
        out[node] = [a for i, a in enumerate(seq)
                     if not (a[0] == "reason" and i + 1 < len(seq) and seq[i + 1] == ("resume", None))]
    return out
