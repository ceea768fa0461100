#!/usr/bin/env python3
"""The long campaign (docs/campaign.md): a month of faults against gpuhc's own decision code.

    python bench/campaign.py --policy shipped --seed 1 --days 30 --nodes 64 --json out.json --png out.png

gpuhc's flows (gpuhc/slurm/flows/entry.py, the ladder, the boot-time retest) run unchanged against a
modelled Slurm on a virtual clock, each node replaying a scenario of examples/scenarios; the
fault injector (bench/campaign_model/faults.py) draws faults at the published rates. One JSON
document on stdout (or --json FILE); exit 2 for a bad argument or a policy this build lacks.

    python bench/campaign.py --policy shipped --seeds 1-100 --json docs/campaign/shipped.json

--seeds: every seed of the range, one after the other, each seed's numbers appended to
--records (default: the --json file with .jsonl; a sweep cut short resumes from it), and one
document of the distributions and every seed (bench/campaign_model/sweep.py).

    sudo python bench/campaign.py --real --seed 11 --nodes 16 --seconds 90 --rate-scale 1500

--real: the same seed's schedule on a real slurmctld with one slurmd per node on localhost
(tests/helpers/slurm_cluster.py; root, Debian's Slurm packages), compressed --compression times, and the
model on the same compressed clock; the JSON compares them (docs/campaign.md, "Trusting the
model"). Exit 1 when they disagree or the real run breaks its bounds.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    p.add_argument("--policy", help="shipped (the default; --real: ladder)|ladder|strict|loose|ticket-reboot|observe|"
                                     "slice-all (with --canary)|timed-only (the burn-in without its correctness pass)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--seeds", metavar="A-B", help="a sweep: every seed from A to B, and their distributions")
    p.add_argument("--records", metavar="FILE", help="--seeds: each seed's numbers, one JSON line each")
    p.add_argument("--odds", type=float, default=1.0, help="multiply every reset and reboot repair odds (sensitivity)")
    p.add_argument("--days", type=float, default=30.0)
    p.add_argument("--nodes", type=int, default=64)
    p.add_argument("--gpus", type=int, default=8, help="GPUs per node (the scenarios are 8x H100)")
    p.add_argument("--rate-scale", type=float, default=1.0, help="multiply every fault rate (stress runs)")
    p.add_argument("--classes", metavar="A,B", help="draw only these fault classes (bench/campaign_model/faults.py), "
                                                      "e.g. sdc; default every class")
    p.add_argument("--no-noise", dest="noise", action="store_false",
                   help="no benign noise on healthy nodes (a fault class measured alone, faster)")
    p.add_argument("--canary", action="store_true", help="gpuhc's known-answer canary on idle nodes and in epilogs")
    p.add_argument("--reset-s", type=float, default=60.0)
    p.add_argument("--reboot-s", type=float, default=600.0)
    p.add_argument("--real", action="store_true", help="a real campaign on a localhost Slurm, and the model beside it")
    p.add_argument("--seconds", type=float, default=90.0, help="--real: wall seconds of the real campaign")
    p.add_argument("--compression", type=float, default=60.0, help="--real: model seconds per wall second")
    p.add_argument("--json", metavar="FILE", help="write the JSON document here instead of stdout")
    p.add_argument("--png", metavar="FILE", help="write the timeline here")
    a = p.parse_args(argv)
    a.policy = a.policy or ("ladder" if a.real else "shipped")  # the real campaign's deployment has the ladder
    if a.classes is not None:
        from campaign_model.faults import BY_NAME

        a.classes = tuple(x.strip() for x in a.classes.split(",") if x.strip())
        unknown = [x for x in a.classes if x not in BY_NAME]
        if unknown or not a.classes:
            p.error(f"--classes {','.join(unknown) or '(none)'}: not a fault class; one of {', '.join(BY_NAME)}")
    if a.real and (a.canary or a.classes is not None or not a.noise):
        p.error("--canary, --classes and --no-noise are the model's alone, not --real's")
    if a.seeds is not None:
        lo, _, hi = a.seeds.partition("-")
        if not (lo.isdigit() and (hi or lo).isdigit() and int(lo) <= int(hi or lo)):
            p.error(f"--seeds {a.seeds}: expected A-B with A <= B, e.g. 1-100")
        a.seed_list = list(range(int(lo), int(hi or lo) + 1))
        if not a.json:
            p.error("--seeds needs --json FILE (the sweep's document)")
    for what, v, lo, hi in (("--days", a.days, 0.01, 366), ("--nodes", a.nodes, 1, 1024), ("--gpus", a.gpus, 8, 8),
                            ("--rate-scale", a.rate_scale, 0.0, 10000), ("--reset-s", a.reset_s, 0, 3600),
                            ("--reboot-s", a.reboot_s, 0, 86400), ("--seconds", a.seconds, 10, 3600),
                            ("--compression", a.compression, 1, 3600), ("--odds", a.odds, 0.0, 10.0)):
        if not lo <= v <= hi:
            p.error(f"{what} {v}: must be within {lo}..{hi}")
    return a


def real(a) -> int:
    """--real: both sides on the same seed; the comparison as JSON."""
    from gpuhc.errors import ConfigError
    from tests.helpers.slurm_cluster import ClusterError, SlurmCluster

    from campaign_model.real_agree import bounds
    from campaign_model.real_run import campaign

    def start(workdir, **kw):
        return SlurmCluster(workdir, **kw).start()

    with tempfile.TemporaryDirectory(prefix="gpuhc-real-campaign-") as tmp:
        try:
            doc = campaign(start, Path(tmp), policy=a.policy, seed=a.seed, nodes=a.nodes, seconds=a.seconds,
                           rate_scale=a.rate_scale, compression=a.compression)
        except (ConfigError, ValueError) as e:
            print(f"campaign: {e}", file=sys.stderr)
            return 2
        except ClusterError as e:
            print(f"campaign: the Slurm cluster failed: {e}", file=sys.stderr)
            return 1
    _, rec = doc.pop("_records")
    doc["real_bounds_broken"] = bounds(rec)
    text = json.dumps(doc, indent=1, sort_keys=True)
    if a.json:
        Path(a.json).write_text(text + "\n")
    else:
        print(text)
    return 1 if doc["disagreements"] or doc["real_bounds_broken"] else 0


def sweep(a) -> int:
    """--seeds: the sweep, then its document."""
    from gpuhc.errors import ConfigError

    from campaign_model import sweep as S
    from campaign_model.policies import config_for

    try:
        with tempfile.TemporaryDirectory() as tmp:
            config_for(a.policy, Path(tmp))
    except ConfigError as e:
        print(f"campaign: {e}", file=sys.stderr)
        return 2
    records = Path(a.records or str(Path(a.json).with_suffix(".jsonl")))
    started = time.monotonic()
    S.run_seeds(a.policy, a.seed_list, records, a.days, a.nodes, a.odds, a.rate_scale, a.classes, a.canary, a.noise)
    rs = [r for r in S.load(records) if r["seed"] in set(a.seed_list)]
    from campaign_model.provenance import provenance

    doc = S.aggregate(rs, {"policy": a.policy, "days": a.days, "nodes": a.nodes, "gpus": a.gpus, "odds": a.odds,
                           "rate_scale": a.rate_scale, "classes": list(a.classes) if a.classes else "all",
                           "canary": a.canary, "noise": a.noise,
                           "seeds": f"{a.seed_list[0]}-{a.seed_list[-1]}", **provenance(),
                           "this_call_wall_s": round(time.monotonic() - started, 1)})
    Path(a.json).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return 0


def main(argv=None) -> int:
    a = parse(argv)
    if "GPUHC_CACHE_DIR" not in os.environ:  # gpuhc's parse memo: the campaign's own, never the machine's
        os.environ["GPUHC_CACHE_DIR"] = tempfile.mkdtemp(prefix="gpuhc-campaign-cache-")
        atexit.register(shutil.rmtree, os.environ["GPUHC_CACHE_DIR"], True)
    if a.real:
        return real(a)
    if a.seeds is not None:
        return sweep(a)
    from gpuhc.errors import ConfigError

    from campaign_model.metrics import compute
    from campaign_model.policies import config_for
    from campaign_model.sim import Campaign

    with tempfile.TemporaryDirectory(prefix="gpuhc-campaign-") as tmp:
        work = Path(tmp)
        try:
            config = config_for(a.policy, work)
        except ConfigError as e:
            print(f"campaign: {e}", file=sys.stderr)
            return 2
        started = time.monotonic()
        c = Campaign(config, work, nodes=a.nodes, gpus=a.gpus, days=a.days, seed=a.seed, rate_scale=a.rate_scale,
                     reset_s=a.reset_s, reboot_s=a.reboot_s, odds=a.odds, classes=a.classes, canary=a.canary,
                     noise=a.noise).run()
        doc = {"policy": a.policy, "seed": a.seed, "days": a.days, "nodes": a.nodes, "gpus": a.gpus,
               "rate_scale": a.rate_scale, "classes": list(a.classes) if a.classes else "all", "canary": a.canary,
               "noise": a.noise, "reset_s": a.reset_s, "reboot_s": a.reboot_s, **compute(c),
               "wall_s": round(time.monotonic() - started, 1)}
        if a.png:
            from campaign_model.plot import timeline

            timeline(c, a.png, f"gpuhc campaign: policy {a.policy}, seed {a.seed}, {a.nodes} nodes x {a.gpus} GPUs, "
                               f"{a.days:g} days")
    text = json.dumps(doc, indent=1, sort_keys=True)
    if a.json:
        Path(a.json).write_text(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
