"""Recorded Slurm answers for `gpuhc sweep submit` (sinfo, squeue, scontrol show topology, sbatch),
the sweep config section, and a good probe result (tests/sweep/test_submit*.py, tests/sweep/test_results*.py)."""

from __future__ import annotations

import os
import pwd
import random

from gpuhc.text.schema import defaults
from gpuhc.sweep.plan import Group
from gpuhc.sweep.settings import SCHEMA
from gpuhc.sweep.simulate import Cluster, SimSpec, fake_result
from gpuhc.sweep.slurmcli import SlurmCli
from gpuhc.sweep.stats import size_ladder


SINFO = "n1|idle|gpu*\nn2|idle|gpu*\nn3|allocated|gpu*\nn4|idle|gpu*\nn5|idle|gpu*\nn6|drained|gpu*\n"


SIZES = size_ladder(1024, 2 << 30)


class FakeSlurm:
    """Answers sinfo/squeue/scontrol show topology; records sbatch argv and scripts."""

    def __init__(self, squeue="", topology=""):
        self.squeue, self.topology = squeue, topology
        self.sbatched: list[tuple[list[str], str]] = []

    def run(self, argv, timeout):
        if argv[0] == "sinfo":
            return 0, SINFO, ""
        if argv[0] == "squeue":
            return 0, self._squeue(argv), ""
        if argv[:3] == ["scontrol", "show", "topology"]:
            return 0, self.topology, ""
        raise AssertionError(f"unexpected {argv}")

    def _squeue(self, argv):
        """squeue -u USER -o %i|%T|%j from rows written ``id|name|state[|user]`` (the user
        defaults to whoever runs the test), filtered by user the way slurmctld does."""
        assert argv[argv.index("-o") + 1] == "%i|%T|%j", argv
        want = argv[argv.index("-u") + 1]
        me = pwd.getpwuid(os.getuid()).pw_name
        out = []
        for row in self.squeue.splitlines():
            jid, name, state, *user = row.split("|")
            if (user[0] if user else me) == want:
                out.append(f"{jid}|{state}|{name}\n")
        return "".join(out)

    def run_stdin(self, argv, timeout, stdin):
        self.sbatched.append((argv, stdin))
        return 0, f"{100 + len(self.sbatched)}\n", ""

    def cli(self):
        return SlurmCli(run=self.run, run_stdin=self.run_stdin)


def section(**over):
    s = defaults(SCHEMA)
    s["job"].update(account="ops", qos="probe", priority=1000, command="/opt/gpuhc/bin/gpuhc")
    s.update(over)
    return s


def good_result(group_id: str, nodes: list[str]) -> dict:
    g = Group(id=group_id, round=0, nodes=nodes, ranks_per_node=8)
    return fake_result(g, Cluster(nodes), SimSpec(noise=0.0, glitch_rate=0.0), SIZES, random.Random(1))




