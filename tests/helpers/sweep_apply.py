"""A scontrol with a few nodes and a sweep record, for `sweep analyze --apply` (tests/sweep/test_analyze_apply.py,
and the actuator's sweep path in tests/slurm/act/test_actuator.py)."""

from __future__ import annotations


from tests.helpers import slurm_answers


SLURM = {"scontrol": "scontrol", "timeout_s": 5.0, "breaker": {"max_drained_percent": 50.0, "settle_s": 0.0},
         "quarantine": {"max_cycles": 3}}


EVIDENCE = "busbw 9.0 GB/s < 350 at 2 GiB"


class FakeScontrol:
    """scontrol show node / update for a few nodes; ``on_drain`` lets a test change other nodes
    at the moment one is drained (a concurrent health check)."""

    def __init__(self, nodes, on_drain=None):
        self.nodes = {n: list(v) + ["2026-11-26T10:00:00"] * (3 - len(v)) for n, v in nodes.items()}
        self.updates: list[list[str]] = []
        self.on_drain = on_drain

    def line(self, name):
        state, reason, when = self.nodes[name]
        text = f"NodeName={name} CPUTot=2 State={state} Partitions=gpu"
        return text + (f" Reason={reason} [root@{when}]" if reason else "") + "\n"

    def __call__(self, argv, timeout):
        if slurm_answers.is_sinfo(argv):
            return 0, slurm_answers.render({n: (*v, ("gpu",)) for n, v in self.nodes.items()}, argv), ""
        if argv[1:3] == ["show", "node"]:
            return 0, "".join(self.line(n) for n in (argv[4:] or sorted(self.nodes))), ""
        assert argv[1] == "update", argv
        self.updates.append(argv)
        name = argv[2].split("=", 1)[1]
        if argv[3] == "State=DRAIN":
            self.nodes[name] = ["IDLE+DRAIN", argv[4].split("=", 1)[1], "2026-11-26T11:00:00"]
            if self.on_drain:
                self.on_drain(self, name)
        else:
            self.nodes[name] = ["IDLE", None, "2026-11-26T11:00:00"]
        return 0, "", ""


class Config:
    def __init__(self, slurm):
        self.slurm = slurm

    def section(self, name):
        return self.slurm


def record(sweep_id="s1", *culprits, fault_hook=False):
    rec = {"id": sweep_id, "rounds": [{"round": 0, "groups": [], "verdicts": {}, "judged_at": 1.0}], "state": "done",
           "findings": {"culprits": [{"kind": "node", "nodes": [n], "evidence": EVIDENCE, "group": "r1g0000"}
                                     for n in culprits]}}
    if fault_hook:
        rec["fault_hook"] = True
    return rec


def idle(*names):
    return {n: ("IDLE", None) for n in names}


