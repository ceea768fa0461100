"""The breaker ledger's test table: nodes, ledger entries and a duck-typed Scontrol holding one
ledger record (tests/slurm/policy/test_ledger.py, tests/slurm/policy/test_ledger_protocol.py)."""

from __future__ import annotations


from gpuhc.errors import SlurmError
from gpuhc.slurm.policy import ledger
from gpuhc.slurm.policy.breaker import BreakerSettings
from gpuhc.slurm.read.nodes import Node, parse_state




T0 = 1_790_000_000


def n(name, raw="IDLE", reason=None, stamp=None, parts=("gpu",)):
    base, flags = parse_state(raw)
    return Node(name, base, flags, reason, "root" if reason else None, stamp, parts, raw)


def entry(**kw):
    base = dict(scope="p=gpu", id="0000abcd", t=T0, held=3, total=100, cap=10, newest=T0 - 5)
    base.update(kw)
    return ledger.Entry(**base)


def claims(e):
    """The extra field holding ``e``'s claimers."""
    text = ledger.CLAIMS_PREFIX
    for name in e.claimers:
        text = ledger.claimed(text, e, name)
    return text


class LedgerSlurm:
    """A duck-typed Scontrol over a node table and one ledger record, counting what is asked."""

    slowest_s = 0.0  # slurmctld answers at once

    def __init__(self, nodes, comment="", now=T0 + 100, extra=""):
        self.nodes = {x.name: x for x in nodes}
        self.comment, self.extra, self.stamped, self.now = comment, extra, None, now
        self.state = "down+drain"
        self.asked: list[str] = []
        self.broken = False

    def remaining(self):
        return 50.0

    def node(self, name):
        self.asked.append("node")
        return self.nodes[name]

    def scope(self, parts):
        self.asked.append("scope")
        return list(self.nodes.values())

    def ledger(self, name):
        self.asked.append("ledger")
        if self.broken:
            raise SlurmError("sinfo failed")
        return self.comment, self.extra, self.stamped, self.state

    def set_comment(self, name, text, field="Comment"):
        self.asked.append("write")
        if field == "Comment":
            self.comment = text
        else:
            self.extra = text

    def stamp(self, name, reason):
        self.asked.append("stamp")
        self.stamped = self.now
        self.nodes[name] = n(name, "DOWN+DRAIN", reason, self.now, parts=("gpuhc",))

    def drain(self, name, reason):
        self.nodes[name] = held(name, self.now)

    def resume(self, name):
        self.nodes[name] = n(name)


BS = BreakerSettings(max_drained=3, max_drained_percent=None, settle_s=0, jitter_s=0, ledger_node="ledger",
                     ledger_wait_s=0)


def table(k=2, total=10):
    return [held(f"g{i:03d}", T0 + i) for i in range(k)] + [n(f"g{i:03d}") for i in range(k, total)]


def held(name, stamp, parts=("gpu",)):
    return n(name, "IDLE+DRAIN", "gpuhc: xid79 gpu0", stamp, parts)
