"""One real campaign and its model on the same seed (docs/campaign.md, "Trusting the model"):
the model first (its draw is the schedule both sides play), then the same schedule on a real
slurmctld, gpuhc deployed as README and slurm/slurm.conf.example say.

``make_cluster(**kw)`` starts a tests/slurm_cluster.SlurmCluster (the test passes its fixture,
which picks the Slurm release; bench/campaign.py --real starts one itself).
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from .policies import config_for
from .real import COMPRESSION, RealCampaign, compressed
from .real_agree import deviations, disagreements, summary
from .real_boot import install
from .real_record import model_record
from .faults import REAL_CLASSES
from .node import HC_INTERVAL_S
from .sim import Campaign

REPO = Path(__file__).resolve().parents[2]  # on sys.path: tests.helpers
RECOMMENDED = {"prolog_flags": "Alloc", "prolog_epilog_timeout": 90}  # slurm/slurm.conf.example
# 10 % of a fault->drain of a fraction of a second is less than the real side resolves: the
# harness's 0.05 s tick, a wrapper's start on a busy box, the reset stand-in's poll.
FLOOR_S = 1.0


def names(nodes: int) -> list[str]:
    return [f"gpu{i:03d}" for i in range(1, nodes + 1)]


def model(policy: str, seed: int, nodes: int, seconds: float, rate_scale: float, compression: float,
          workdir: Path) -> tuple[Campaign, Path]:
    """The model on the compressed clock: (the campaign run, its config file)."""
    ts = 1.0 / compression
    (workdir / "model").mkdir(parents=True, exist_ok=True)
    config = config_for(policy, workdir / "model", compressed(ts))
    c = Campaign(config, workdir / "model", nodes=nodes, days=seconds * compression / 86400.0, seed=seed,
                 rate_scale=rate_scale, reset_s=60.0 * ts, reboot_s=600.0 * ts, time_scale=ts,
                 classes=REAL_CLASSES, noise=False, placement="lowest").run()
    return c, workdir / "model" / f"gpuhc-{policy}.yaml"


def deployment(config_file: Path, wd: Path) -> dict:
    """The model's gpuhc config, deployed: a decision log, the reset stand-in, and the reset
    procedure's other tools as tests/slurm_real/test_ladder.py sets them up."""
    import shutil

    sys.path.insert(0, str(REPO))
    from tests.helpers.reset_fakes import fake_proc

    from .node import HEALTHY

    doc = yaml.safe_load(config_file.read_text())
    doc["slurm"]["log_file"] = str(wd / "gpuhc-decisions.log")
    doc.setdefault("output", {})["event_log"] = str(wd / "events.jsonl")
    doc["slurm"]["remediation"].update({
        "reset_command": RealCampaign.reset_command(wd), "reset_timeout_s": 30,
        "reset": {"services": [], "nvidia_smi": shutil.which("true"), "proc_root": str(fake_proc(wd / "proc", HEALTHY)),
                  "dev_root": str(wd), "fabric_timeout_s": 5}})
    return doc


def campaign(make_cluster, workdir: Path, policy: str = "ladder", seed: int = 11, nodes: int = 16,
             seconds: float = 90.0, rate_scale: float = 1500.0, compression: float = COMPRESSION) -> dict:
    """Both sides; the JSON document of the comparison."""
    sys.path.insert(0, str(REPO))
    m, config_file = model(policy, seed, nodes, seconds, rate_scale, compression, workdir)
    wd = workdir / "real"
    wd.mkdir(parents=True, exist_ok=True)
    RealCampaign.prepare(wd, m.names)
    cluster = make_cluster(workdir=wd / "slurm", nodes=tuple(m.names), gpuhc_config=deployment(config_file, wd),
                           node_scenarios={n: str(RealCampaign.scenario_of(wd, n)) for n in m.names},
                           prolog=True, epilog=True, reboot=True, **RECOMMENDED)
    try:
        boots = install(cluster, wd, compression)
        real = RealCampaign(m, cluster, wd, seconds, 60.0 / compression, boots).run()
    finally:
        cluster.stop()
    mrec = model_record(m)
    return {"policy": policy, "seed": seed, "nodes": nodes, "seconds": seconds, "rate_scale": rate_scale,
            "compression": compression, "slurm": cluster.release.id, "floor_s": FLOOR_S,
            "model": summary(mrec, seconds), "real": summary(real, seconds), "real_slurm_rpcs": real.rpcs,
            "deviation": deviations(mrec, real, seconds, FLOOR_S),
            "disagreements": disagreements(mrec, real, seconds, FLOOR_S, HC_INTERVAL_S / compression), "_records": (mrec, real)}
