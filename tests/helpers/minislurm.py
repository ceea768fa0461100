"""MiniSlurm: the Slurm flows (healthcheck/prolog/epilog) with the scontrol runner injected.

The runner keeps a tiny node table so that a flow's read-act-verify sequence can be followed call
by call; the real Slurm behaviour is proven in tests/slurm_real/. ``flow``/``run`` drive one flow
over chosen check results."""

from __future__ import annotations

import time

from gpuhc.config.load import Config, defaults, schema
from gpuhc.model.result import Action, Result, Status
from gpuhc.model.snapshot import Snapshot
from gpuhc.run.report import RunOptions, RunReport
from gpuhc.slurm.flows import entry
from gpuhc.slurm.act.scontrol import Scontrol
from gpuhc.sources import SourceSpec
from gpuhc.sources.scenario import load_scenario
from gpuhc.state.node import StateStore
from tests.helpers import slurm_answers
from tests.helpers.paths import SCENARIOS


XID = Result("xid", Status.FAIL, "Xid 79 on gpu3: GPU has fallen off the bus", "gpu3", action=Action.DRAIN_TICKET)
OK = Result("ecc", Status.PASS, "no errors", "gpu0")
OUR_REASON = "gpuhc: xid79 gpu3 GPU has fallen off the bus"
T0 = "2024-06-11T10:23:45"


class MiniSlurm:
    """Answers the scontrol argv gpuhc sends, from a node table; records every call."""

    def __init__(self, nodes: dict[str, tuple[str, str | None]], fail: dict[str, BaseException | tuple] | None = None):
        self.nodes = {k: list(v) for k, v in nodes.items()}
        self.fail = fail or {}  # verb ("show", "drain", "resume", "show-all") -> exception or (rc, out, err)
        self.calls: list[list[str]] = []

    def line(self, name: str) -> str:
        state, reason = self.nodes[name]
        r = f" Reason={reason} [root@{T0}]" if reason else ""
        return f"NodeName={name} Arch=x86_64 CPUTot=2 State={state} Partitions=gpu{r}\n"

    def __call__(self, argv, timeout):
        self.calls.append(argv)
        verb = self.verb(argv)
        if verb in self.fail:
            f = self.fail[verb]
            if isinstance(f, BaseException):
                raise f
            if f[0] == "apply-then-fail":
                self.apply(argv)
                return f[1:]
            return f
        return self.apply(argv)

    @staticmethod
    def verb(argv):
        if slurm_answers.is_sinfo(argv):
            return "show" if slurm_answers.one_node(argv) else "show-all"
        if argv[1] == "show":
            return "show" if len(argv) == 5 else "show-all"
        state = next(a for a in argv if a.startswith("State="))
        return "drain" if state == "State=DRAIN" else "resume"

    def apply(self, argv):
        verb = self.verb(argv)
        if slurm_answers.is_sinfo(argv):
            return 0, slurm_answers.render({n: (st, r, T0, ("gpu",)) for n, (st, r) in self.nodes.items()}, argv), ""
        if verb == "show":
            return 0, self.line(argv[4]), ""
        if verb == "show-all":
            return 0, "".join(self.line(n) for n in sorted(self.nodes)), ""
        name = argv[2].split("=", 1)[1]
        base = self.nodes[name][0].split("+")[0]
        if verb == "drain":
            self.nodes[name] = [f"{base}+DRAIN", argv[4].split("=", 1)[1]]
        else:
            self.nodes[name] = [base, None]
        return 0, "", ""

    def updates(self):
        return [c for c in self.calls if c[1] == "update"]


def config(tmp_path, **slurm) -> Config:
    data = defaults(schema())
    data["slurm"].update({"syslog": False, "cooldown_s": 0, "postmortem_dir": str(tmp_path / "pm")})
    # every path a flow writes in the test's directory, never the node's /var/lib/gpuhc (tests/conftest.py checks)
    data["slurm"]["retire_bundle"]["dir"] = str(tmp_path / "retired")
    data["state_dir"] = str(tmp_path / "state")
    data["slurm"]["breaker"].update({"settle_s": 0, "jitter_s": 0, "max_drained": 5, "max_drained_percent": None})
    for k, v in slurm.items():
        if isinstance(v, dict):
            data["slurm"][k].update(v)
        else:
            data["slurm"][k] = v
    return Config(data)


def flow(tmp_path, monkeypatch, stage, slurm: MiniSlurm | None, results, env=None, cfg=None, node="n1", raises=None,
         now=None):
    def fake_run_stage(opts):
        if raises is not None:
            raise raises
        return RunReport(node=opts.hostname, stage=opts.stage, started=time.time(), duration_s=0.01,
                         results=list(results), snapshot=Snapshot(hostname=opts.hostname, time=time.time()))

    monkeypatch.setattr("gpuhc.run.runner.run_stage", fake_run_stage)
    cfg = cfg or config(tmp_path)
    # The job's GPUs are mapped (gpuhc/slurm/jobs/gpus.py) against who the node's GPUs are: a
    # healthy 8-GPU recording stands in for NVML there (the stage run itself is faked above).
    healthy = load_scenario(str(SCENARIOS / "healthy-8xh100.yaml")).nvml
    monkeypatch.setattr("gpuhc.slurm.jobs.gpus.who_the_gpus_are", lambda spec: healthy)
    opts = RunOptions(stage=stage, config=cfg, sources=SourceSpec(), state_dir=str(tmp_path / "state"), hostname=node,
                      now=now)

    def make(deadline):
        if slurm is None:
            def never(argv, timeout):
                raise AssertionError(f"Slurm was asked: {argv}")
            return Scontrol(run=never, deadline=deadline)
        return Scontrol(run=slurm, deadline=deadline)

    name = {"passive": "healthcheck"}.get(stage, stage)
    return name, entry.Flow(stage=stage, opts=opts, log=entry.Log(f"gpuhc {name} {node}", None, False, False),
                            make_scontrol=make, env=env or {})


def run(tmp_path, monkeypatch, stage, slurm, results, **kw):
    name, f = flow(tmp_path, monkeypatch, stage, slurm, results, **kw)
    return getattr(entry, name)(f)


def memory(tmp_path, node="n1"):
    return StateStore(str(tmp_path / "state")).read().get("slurm", {}).get("nodes", {}).get(node, {})


EPILOG_ENV = {"SLURM_JOB_ID": "1234", "SLURM_JOB_USER": "alice", "SLURM_JOB_EXIT_CODE": "256",
              "SLURM_JOB_EXIT_CODE2": "1:0", "SLURM_JOB_GPUS": "0,1"}


def last_count(tmp_path, open_: bool, age_s: float = 60.0, node="n1") -> None:
    """This node's last count of the breaker, as a run that counted stores it (gpuhc/slurm/flows/memory.py):
    1 of 10 held, cap 1 (open) or 0 held (closed), ``age_s`` ago."""
    from gpuhc.slurm.policy.breaker import BreakerState

    state = BreakerState(open_, 1 if open_ else 0, 10, 1, "partition gpu")
    with StateStore(str(tmp_path / "state")).transaction() as doc:
        doc.setdefault("slurm", {}).setdefault("breaker", {})[node] = {**state.to_dict(), "time": time.time() - age_s}


class RebootingSlurm(MiniSlurm):
    """MiniSlurm that also takes ``scontrol reboot``: Slurm sets REBOOT_REQUESTED and the reason."""

    def __call__(self, argv, timeout):
        if argv[1] == "reboot":
            self.calls.append(argv)
            name, reason = argv[-1], next(a for a in argv if a.startswith("reason="))[len("reason="):]
            self.nodes[name] = [self.nodes[name][0] + "+REBOOT_REQUESTED", reason]
            return 0, "", ""
        return super().__call__(argv, timeout)
