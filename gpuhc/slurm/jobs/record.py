"""The job checks' record in a job's AdminComment: every node's view of one job, combined (pure).

One node sees only its own GPUs: in a hang across nodes, the culprit node's GPUs may all be idle
while every other node's spin, and no node alone can tell (docs/checks.md, "jobs"). So each
node writes its view into the job's ``AdminComment``, which only Slurm operators and root may
set (a user's ``Comment`` would let the job's owner forge or erase it), and ``gpuhc jobs`` on
the admin host reads every running job's record and names the culprit node and GPU.

The record is one token among whatever else the AdminComment holds (an admin's own note stays)::

    gpuhc-jobs{gpu01/hang/1795697758/gpu3,gpu02/hang/1795697760/-,gpu03/idle/1795697761/-}

one ``node/signature/since/culprits`` entry per node: culprits are ``gpuN`` joined by ``+``,
``-`` for none; since is epoch seconds. No spaces, so ``scontrol show job -o`` keeps it whole.
A field that does not match its pattern drops the entry: the text came back from Slurm, and
anyone with operator rights could have edited it.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuhc.text.lazyre import LazyPattern

SIGNATURES = ("hang", "straggler", "idle")
MAX_ENTRIES = 64  # nodes kept per job: the non-spinning views first (they name the culprit)
_BLOCK = LazyPattern(r"gpuhc-jobs\{([^{}\s]{0,8192})\}")
_ENTRY = LazyPattern(r"([A-Za-z0-9][A-Za-z0-9._-]{0,127})/(hang|straggler|idle)/(\d{1,12})/(-|gpu\d{1,4}(?:\+gpu\d{1,4}){0,63})")


@dataclass(frozen=True)
class NodeView:
    node: str
    signature: str  # hang / straggler / idle
    since: int
    culprits: tuple[str, ...] = ()  # "gpu3", ...

    def token(self) -> str:
        return f"{self.node}/{self.signature}/{self.since}/{'+'.join(self.culprits) or '-'}"


def parse(admin_comment: str) -> list[NodeView]:
    """The node views in an AdminComment (none when it holds no record)."""
    m = _BLOCK.search(admin_comment or "")
    if not m:
        return []
    views = {}
    for part in m.group(1).split(","):
        e = _ENTRY.fullmatch(part)
        if e:
            cul = () if e.group(4) == "-" else tuple(e.group(4).split("+"))
            views[e.group(1)] = NodeView(e.group(1), e.group(2), int(e.group(3)), cul)
    return list(views.values())


def render(admin_comment: str, views: list[NodeView]) -> str:
    """``admin_comment`` with its record replaced by ``views`` (removed when there is none)."""
    rest = _BLOCK.sub("", admin_comment or "").strip()
    if not views:
        return rest
    ordered = sorted(views, key=lambda v: (v.signature == "hang" and not v.culprits, v.node))[:MAX_ENTRIES]
    block = "gpuhc-jobs{" + ",".join(v.token() for v in ordered) + "}"
    return f"{rest} {block}" if rest else block


def update(admin_comment: str, mine: NodeView | None, node: str) -> str | None:
    """The AdminComment with this node's view set (or removed, ``mine`` None); None when unchanged."""
    views = [v for v in parse(admin_comment) if v.node != node]
    if mine is not None:
        views.append(mine)
    new = render(admin_comment, views)
    return None if new == (admin_comment or "").strip() or new == admin_comment else new


@dataclass
class JobFinding:
    """What all the nodes' views of one job say together."""

    verdict: str  # "hung", "slowed", or "" (nothing to say)
    culprits: list[str]  # "node:gpuN" or "node (all GPUs idle)"
    since: int | None
    nodes: int  # how many nodes reported


def combine(views: list[NodeView]) -> JobFinding:
    """Hung when any node sees a hang: its culprits are the GPUs the nodes name, and the nodes
    whose GPUs are all idle while others spin (the node that stopped). Slowed when a node names
    a straggler. The earliest since."""
    hangs = [v for v in views if v.signature == "hang"]
    if hangs:
        culprits = [f"{v.node}:{c}" for v in hangs for c in v.culprits]
        culprits += [f"{v.node} (all GPUs idle)" for v in views if v.signature == "idle"]
        return JobFinding("hung", culprits, min(v.since for v in hangs), len(views))
    slow = [v for v in views if v.signature == "straggler"]
    if slow:
        return JobFinding("slowed", [f"{v.node}:{c}" for v in slow for c in v.culprits], min(v.since for v in slow), len(views))
    return JobFinding("", [], None, len(views))


def culprit_nodes(finding: JobFinding) -> list[str]:
    return sorted({c.split(":", 1)[0].split(" ", 1)[0] for c in finding.culprits})
