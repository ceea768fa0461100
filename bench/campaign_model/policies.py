"""The policies a campaign compares (``--policy``), each a small overlay on the shipped config.

shipped: etc/gpuhc.yaml exactly as installed (the ladder off, its default; the epilog's active
checks on, their worker campaign_model/active_gpu.py's); ladder: the same with the remediation
ladder on (README's deployment with repair); strict/loose: the ladder made slower or quicker to
hand a node back; observe: ``slurm.mode: observe`` (gpuhc decides and logs but never changes a
node); slice-all: shipped with the canary's epilog slice computing every precision (a what-if
for ``--canary``); timed-only: shipped with the burn-in's correctness pass off, bf16 and tf32 only
(the burn-in as it shipped before the pass, for the months recorded then). Only what a bench cannot have is changed: no log file, syslog or hooks, a postmortem
directory in the campaign's work directory.
"""

from __future__ import annotations

from pathlib import Path

from gpuhc.config.load import load_config
from gpuhc.errors import ConfigError

ETC = Path(__file__).resolve().parents[2] / "etc" / "gpuhc.yaml"
OVERLAYS = {
    "shipped": {},
    "ladder": {"slurm": {"remediation": {"enabled": True}}},
    "strict": {"slurm": {"remediation": {"enabled": True, "reset_attempts": 1}, "resume_after": 6,
                         "cooldown_s": 3600, "quarantine": {"max_cycles": 2}}},
    "loose": {"slurm": {"remediation": {"enabled": True, "reset_attempts": 3}, "resume_after": 1,
                        "cooldown_s": 0, "quarantine": {"max_cycles": 5}}},
    # What-if: a reboot for every "drain + hardware ticket" finding (IB cables and ports,
    # clocks, exhausted spare rows), whose shipped ladder is empty; Xid 79 reboots in shipped
    # (docs/campaign.md, "What changed, and why": why not this).
    "ticket-reboot": {"slurm": {"remediation": {"enabled": True, "actions": {"drain_ticket": ["reboot"]}}}},
    "observe": {"slurm": {"remediation": {"enabled": True}, "mode": "observe"}},
    # What-if (with --canary): the epilog's canary slice computes every precision, as its canary
    # jobs do, at the slice's shapes (docs/campaign.md, "The silent-corruption canary in the campaign").
    "slice-all": {"canary": {"epilog": {"cases": ["bf16-exact-2048", "bf16-random-4096", "fp16-random-4096",
                                                  "tf32-random-4096", "fp32-random-2048", "fp64-random-2048"]}}},
    # What-if: the burn-in without its correctness pass (active.check_dtypes), bf16 and tf32 only:
    # a fault in fp16, fp32 or fp64 alone then never shows in it (docs/campaign.md).
    "timed-only": {"active": {"check_dtypes": []}},
}
NO_PASS = OVERLAYS["timed-only"]


# What the campaign's site names, as an experienced site's config does (the shipped config names
# no mount and no scratch: they are the site's): the NFS home and the local scratch that every
# modelled node has (host_noise.HEALTHY_HOST).
SITE = {"checks": {"host": {"thresholds": {"mounts": ["/home"], "scratch": "/local/scratch"}}}}


def _merge(base: dict, over: dict) -> dict:
    for k, v in over.items():
        base[k] = _merge(base.get(k) or {}, v) if isinstance(v, dict) else v
    return base


def config_for(policy: str, workdir: Path, extra: dict | None = None):
    """The validated Config of ``policy`` (plus ``extra``, a test's overlay); ConfigError (exit 2)
    names a setting this build lacks."""
    import yaml

    if policy not in OVERLAYS:
        raise ConfigError(f"--policy {policy!r}: one of {', '.join(OVERLAYS)}")
    doc = yaml.safe_load(ETC.read_text())
    doc.pop("hosts", None)
    # The modelled nodes' count, as slurm.conf's Gres=gpu:8 gives it on a real cluster (the
    # shipped config carries no fleet-wide count: docs/slurm.md, "Expected GPUs").
    _merge(doc, {"node": {"expected_gpus": 8}})
    # Every path a run writes goes under the campaign's own directory: a campaign (CI runs one in
    # the suite) never writes the machine's /var/lib/gpuhc, /var/log/gpuhc or textfile directory.
    _merge(doc, {"hooks": {"commands": []}, "state_dir": str(workdir / "state"),
                 "output": {"event_log": None, "prometheus_textfile": None},
                 "slurm": {"log_file": None, "syslog": False, "postmortem_dir": str(workdir / "postmortem"),
                           "retire_bundle": {"dir": str(workdir / "retired")}}})
    _merge(doc, SITE)
    _merge(doc, OVERLAYS[policy])
    _merge(doc, extra or {})
    path = workdir / f"gpuhc-{policy}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return load_config(str(path))
