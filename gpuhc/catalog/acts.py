"""What an install does by itself: every act gpuhc can take on its own, on or off in a config.

One page an admin reads before going live (`gpuhc config acts`, README "What gpuhc does by
itself", whose table is this module's output for the shipped config), and the one place that
says what a finding's recommended action turns into under a given config ("recommended: drain +
reboot; this config: drain (remediation off)"), for `explain`, `check` and `doctor`. Pure: a
config in, words out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Act:
    name: str
    on: bool
    what: str  # when it happens and what it costs, in this config
    switch: str  # the setting that turns it on or off

    def to_dict(self) -> dict[str, Any]:
        return {"act": self.name, "on": self.on, "what": self.what, "switch": self.switch}


def acts(config) -> list[Act]:
    slurm, active = config.section("slurm"), config.section("active")
    enforce = slurm.get("mode") == "enforce"
    sent = "" if enforce else " (observe mode: logged as would-do, not sent)"
    rem = slurm.get("remediation") or {}
    ladders = (rem.get("actions") or {})
    reboot_ladder = any("reboot" in (steps or []) for steps in ladders.values())
    reset_ladder = "reset" in (ladders.get("reset_gpu") or [])
    lemon, quarantine, bundle = slurm.get("lemon") or {}, slurm.get("quarantine") or {}, slurm.get("retire_bundle") or {}
    breaker = slurm.get("breaker") or {}
    jobs = config.check_settings("jobs")
    jobs_on = bool(jobs.get("enabled"))
    requeue_s = float((jobs.get("thresholds") or {}).get("requeue_after_s") or 0.0)
    epilog = active.get("epilog") or {}
    epilog_checks = list(epilog.get("checks") or []) if active.get("enabled") else []
    cap = (f"at most {breaker.get('max_drained_percent'):g} % of a partition" if breaker.get("max_drained_percent")
           is not None else f"at most {breaker.get('max_drained')} nodes") if breaker.get("enabled") else "no cap (breaker off)"
    hooks = (config.section("hooks") or {}).get("commands") or []
    chain = slurm.get("chain") or []
    return [
        Act("drain", enforce, f"a node that fails a check (health check, prolog, epilog), reason `gpuhc ...`; "
            f"{cap}{sent}", "slurm.mode; slurm.breaker"),
        Act("resume", enforce, f"only nodes gpuhc drained, after {slurm.get('resume_after')} clean health checks and "
            f"{slurm.get('cooldown_s'):g} s; an admin's resume (scontrol or gpuhc quarantine release) acknowledges the evidence held so far, new events still count{sent}", "slurm.mode; slurm.resume_after"),
        Act("retire (quarantine)", enforce, f"after {quarantine.get('max_cycles')} failed retests; only "
            f"`gpuhc quarantine release` returns it{sent}", "slurm.quarantine.max_cycles"),
        Act("retire (lemon)", enforce and bool(lemon.get("enabled")), f"{lemon.get('faults')} drains of a node or a "
            f"GPU within {lemon.get('window_days'):g} days, even when its retests pass; only `gpuhc quarantine "
            f"release` returns it{sent}", "slurm.lemon.enabled"),
        Act("reboot", enforce and bool(rem.get("enabled")) and reboot_ladder, "a node gpuhc drained for a finding "
            "whose ladder has a reboot step (scontrol reboot)" + ("" if rem.get("enabled") else " (remediation off)"),
            "slurm.remediation.enabled; slurm.remediation.actions"),
        Act("GPU reset", enforce and bool(rem.get("enabled")) and reset_ladder, "nvidia-smi -r on an idle drained "
            "node's GPU, the services holding it stopped first" + ("" if rem.get("enabled") else " (remediation off)"),
            "slurm.remediation.enabled; slurm.remediation.actions.reset_gpu"),
        Act("requeue a hung job", enforce and jobs_on and requeue_s > 0, f"a job hung {requeue_s:g} s with a culprit "
            "node named is requeued without it" if requeue_s > 0 else "never (requeue_after_s 0)",
            "checks.jobs.thresholds.requeue_after_s"),
        Act("write into running jobs", enforce and jobs_on, "the jobs check's finding in the job's AdminComment "
            "(health check)", "checks.jobs.enabled"),
        Act("active checks after every job", bool(epilog_checks), f"the epilog runs {', '.join(epilog_checks) or 'none'}"
            f" ({_burnin_cost(active, epilog) if 'burn-in' in epilog_checks else 'no burn-in,'} the whole epilog "
            "some seconds more), before the node takes its next job",
            "active.enabled; active.epilog.checks; active.check_dtypes"),
        Act("active checks at boot and retest", bool(active.get("enabled")), "`gpuhc quarantine retest` (and the "
            "boot unit gpuhc-retest.service, where enabled) runs the full set", "active.enabled"),
        Act("post-mortem bundle", True, f"after a failed job, in {slurm.get('postmortem_dir')} (the newest "
            f"{slurm.get('postmortem_keep')} kept)", "slurm.postmortem_dir; slurm.postmortem_keep"),
        Act("retire bundle", bool(bundle.get("enabled")), f"at a retirement, in {bundle.get('dir')}; runs "
            f"{bundle.get('bug_report')} for up to {float(bundle.get('bug_report_timeout_s') or 0):g} s",
            "slurm.retire_bundle.enabled"),
        Act("hook commands", bool(hooks), f"{len(hooks)} command(s) after drains, resumes, retirements, breaker "
            "trips" if hooks else "none configured", "hooks.commands"),
        Act("the site's other health check", bool(chain), f"runs {' '.join(chain)} after gpuhc's health check"
            if chain else "none chained", "slurm.chain"),
        Act("fabric sweeps", False, "multi-node NCCL jobs that name a bad node or link; only from the admin host's "
            "timer, which install.sh never enables", "systemctl enable gpuhc-sweep.timer; sweep.partitions"),
    ]


def _burnin_cost(active: dict, stage: dict) -> str:
    """What the stage's burn-in computes and for how long: its timed precisions, then the
    correctness pass in the others (gpuhc/active/burnin.py)."""
    from gpuhc.active.registry import correctness_pass, correctness_pass_s

    timed = list(active.get("dtypes") or [])
    text = f"a burn-in of {float(stage.get('burnin_s') or 0):g} s in {_words(timed)}"
    checks = correctness_pass(active)
    if not checks:
        return text + ","
    return text + (f", then {float(active['check_s']):g} s each in {_words(checks)} for correctness only, "
                   f"about {correctness_pass_s(active):g} s more with their inputs;")


def _words(names: list[str]) -> str:
    return " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)


def table(rows: list[Act], markdown: bool = False) -> list[str]:
    if markdown:
        out = ["| act | on | when, and what it costs | turned on or off by |", "|---|---|---|---|"]
        return out + [f"| {a.name} | {'on' if a.on else 'off'} | {a.what} | `{'`; `'.join(a.switch.split('; '))}` |"
                      for a in rows]
    width = max(len(a.name) for a in rows)
    out = [f"{'ACT':{width}}  ON   WHAT"]
    return out + [f"{a.name:{width}}  {'on ' if a.on else 'off'}  {a.what} [{a.switch}]" for a in rows]


def this_config(action: Any, config) -> str | None:
    """What a finding's recommended ``action`` (a model.result.Action or its value) becomes under
    ``config``, or None where it is the same: e.g. "drain (remediation off)"."""
    value = getattr(action, "value", action)
    if value in ("none", "restart app") or config is None:
        return None
    slurm = config.section("slurm")
    if slurm.get("mode") != "enforce":
        return "nothing sent (observe mode: logged as would-do)"
    rem = slurm.get("remediation") or {}
    key = {"reset GPU": "reset_gpu", "drain + reboot": "drain_reboot", "drain + hardware ticket": "drain_ticket"}.get(value)
    if key is None:
        return None
    steps = (rem.get("actions") or {}).get(key) or []
    if not rem.get("enabled"):
        return "drain (remediation off)" if steps else None
    if value == "reset GPU" and "reset" not in steps:
        return "drain" + (" + reboot" if "reboot" in steps else "") + " (no reset step)"
    if value == "drain + reboot" and "reboot" not in steps:
        return "drain (no reboot step)"
    return None


def recommended(action: Any, config) -> str:
    """"recommended: drain + reboot; this config: drain (remediation off)", or the action alone."""
    value = getattr(action, "value", action)
    here = this_config(action, config)
    return f"recommended: {value}; this config: {here}" if here else str(value)
