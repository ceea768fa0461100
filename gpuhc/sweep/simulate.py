"""``gpuhc sweep simulate``: the real planner, judge and localizer against a synthetic cluster.

Only the measurements are made up. Each round's groups get results files in the job's own
format, produced from a simple cost model (latency + bytes / bandwidth, per size) with
multiplicative measurement noise and rare transient disturbances of healthy groups; then the
same :func:`gpuhc.sweep.campaign.judge_round` and :func:`~gpuhc.sweep.campaign.advance` that
``gpuhc sweep analyze`` uses decide what is bad and what to run next.

Bad nodes come in three kinds: ``slow`` (bandwidth cut to 35-60 % by default; ``slow_bw``
sets the range, e.g. 0.75-0.85 for nodes only 15-25 % slow), ``laggy`` (small-message
latency 4-8x) and ``broken`` (from a chosen size on, collectives hang or sum wrong). Bad links
are pairs that are only slow together; they are placed inside one first-round group (a link
that no group exercises cannot be seen by that sweep; rotation exercises it another day).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from gpuhc.text.schema import defaults
from gpuhc.sweep.campaign import advance, count_status, judge_round, new_record
from gpuhc.sweep.plan import Group, plan_probe
from gpuhc.sweep.judge import on_ladder
from gpuhc.sweep.settings import SCHEMA, thresholds_for
from gpuhc.sweep.stats import busbw_factor, size_ladder, summarize_size

BASE_LATENCY_S = 60e-6  # multi-node H100 small all-reduce, order of magnitude (docs/facts.md, "NCCL and the sweep")
BASE_BUSBW_GBS = 445.0
SIM_GPU = "NVIDIA H100 80GB HBM3"  # the model the cost model stands for: selects the h100-sxm thresholds
SAMPLES = 8  # per-iteration samples drawn for latency sizes (p95 interpolates between the top two)

# Bounds of `gpuhc sweep simulate` (docs/sweep.md): the largest Slurm clusters run tens of
# thousands of nodes; 65,536 simulate in seconds and a few hundred MB, while a million took
# minutes and gigabytes. Group sizes follow the config's `sweep.group_size`.
MAX_NODES = 65536
MAX_GROUP_SIZE = 256


@dataclass
class SimSpec:
    nodes: int = 1024
    bad: int = 3
    bad_links: int = 0
    group_size: int = 2
    ranks_per_node: int = 8
    seed: int = 0
    noise: float = 0.03
    glitch_rate: float = 0.002
    strategy: str = "auto"
    max_rounds: int = 4
    min_bytes: int = 1024
    max_bytes: int = 2 << 30
    kinds: tuple[str, ...] = ("slow", "laggy", "broken")
    slow_bw: tuple[float, float] = (0.35, 0.6)  # a slow node's bandwidth, as a fraction of healthy
    gpu: str = ""  # the NVML name the fake ranks report ("": the cost model's H100); picks the profile
    thresholds: dict = field(default_factory=dict)  # over sweep.thresholds.nccl.default


def check_spec(spec: SimSpec) -> None:
    """Refuse combinations no cluster can have, each with the option that is wrong (exit 2)."""
    from gpuhc.errors import GpuhcError

    if not 2 <= spec.nodes <= MAX_NODES:
        raise GpuhcError(f"--nodes {spec.nodes}: between 2 and {MAX_NODES}")
    if not 2 <= spec.group_size <= min(MAX_GROUP_SIZE, spec.nodes):
        raise GpuhcError(f"--group-size {spec.group_size}: between 2 and the number of nodes ({spec.nodes}), "
                         f"at most {MAX_GROUP_SIZE}: a group bigger than the cluster plans no job")
    if not 0 <= spec.bad <= spec.nodes:
        raise GpuhcError(f"--bad {spec.bad}: more bad nodes than the {spec.nodes} nodes of the cluster")
    groups = spec.nodes // spec.group_size
    if not 0 <= spec.bad_links <= groups:
        raise GpuhcError(f"--bad-links {spec.bad_links}: at most one per first-round group ({groups} groups)")


@dataclass
class NodeFault:
    kind: str
    bw: float = 1.0  # bandwidth multiplier
    lat: float = 1.0  # latency multiplier
    broken_from: int | None = None  # bytes
    broken_how: str = "hang"


@dataclass
class Cluster:
    names: list[str]
    faults: dict[str, NodeFault] = field(default_factory=dict)
    links: list[frozenset] = field(default_factory=list)


def make_cluster(spec: SimSpec, rng: random.Random) -> Cluster:
    names = [f"n{i:04d}" for i in range(1, spec.nodes + 1)]
    cluster = Cluster(names)
    sizes = size_ladder(spec.min_bytes, spec.max_bytes)
    for name in rng.sample(names, spec.bad):
        kind = rng.choice(spec.kinds)
        if kind == "slow":
            cluster.faults[name] = NodeFault(kind, bw=rng.uniform(*spec.slow_bw))
        elif kind == "laggy":
            cluster.faults[name] = NodeFault(kind, lat=rng.uniform(4.0, 8.0))
        else:
            cluster.faults[name] = NodeFault(kind, broken_from=rng.choice(sizes[len(sizes) // 2:]),
                                             broken_how=rng.choice(("hang", "wrong")))
    g = spec.group_size
    blocks = [names[i:i + g] for i in range(0, len(names) - len(names) % g, g)]
    clean = [b for b in blocks if not any(n in cluster.faults for n in b)]
    for block in rng.sample(clean, min(spec.bad_links, len(clean))):
        cluster.links.append(frozenset(rng.sample(block, 2)))
    return cluster


def fake_result(group: Group, cluster: Cluster, spec: SimSpec, sizes: list[int], rng: random.Random) -> dict:
    """A results file as ``gpuhc sweep run`` would write it, from the cost model."""
    nranks = len(group.nodes) * group.ranks_per_node
    faults = [cluster.faults[n] for n in group.nodes if n in cluster.faults]
    bw = BASE_BUSBW_GBS * min([f.bw for f in faults] + [1.0])
    lat = BASE_LATENCY_S * max([f.lat for f in faults] + [1.0])
    if any(link <= set(group.nodes) for link in cluster.links):
        bw *= 0.4
    if rng.random() < spec.glitch_rate:  # somebody else's traffic, a hiccup: does not repeat
        bw *= 0.5
        lat *= 3.0
    algbw = bw / busbw_factor(nranks) * 1e9  # bytes/s
    rows, timeouts = [], []
    extra = {f.broken_from for f in faults if f.broken_from is not None}
    for nbytes in sorted(set(sizes) | extra):
        broken = [f for f in faults if f.broken_from is not None and nbytes >= f.broken_from]
        if broken and broken[0].broken_how == "hang":
            bad_nodes = sorted(n for n in group.nodes if n in cluster.faults and cluster.faults[n] in broken)
            timeouts.append({"bytes": nbytes, "ranks": [], "silent_ranks": [], "silent_nodes": bad_nodes})
            break
        t = lat + nbytes / algbw
        if nbytes <= 64 << 10:  # the latency class; larger sizes are judged by busbw only
            samples = [t * math.exp(rng.gauss(0.0, spec.noise)) for _ in range(SAMPLES)]
            row = summarize_size(nbytes, nranks, [sum(samples) / SAMPLES], [samples])
        else:
            row = summarize_size(nbytes, nranks, [t * math.exp(rng.gauss(0.0, spec.noise))])
        row["correct"] = not broken
        rows.append(row)
    gpu = spec.gpu or SIM_GPU
    ranks = [{"rank": i, "node": group.nodes[i // group.ranks_per_node], "gpu": gpu} for i in range(nranks)]
    return {"format": "gpuhc-sweep-result/1", "group_id": group.id, "backend": "nccl", "nodes": group.nodes,
            "nranks": nranks, "ranks": ranks, "sizes": rows, "timeouts": timeouts, "complete": not timeouts,
            "errors": []}


def judged_sizes(spec: SimSpec, section: dict) -> list[int]:
    """The sizes whose rows the judge reads: the small and medium sizes (nearest on the ladder)
    and the largest. Only these are synthesised (plus, per group, the size a broken node fails
    from, so the evidence names it): the other rows could not change a verdict, and leaving them
    out makes a 1,024-node simulation several times faster."""
    ladder = size_ladder(spec.min_bytes, spec.max_bytes)
    th = on_ladder(thresholds_for(section["thresholds"], "nccl", f"{spec.group_size}x{spec.ranks_per_node}"), ladder)
    return sorted({int(th["small_bytes"]), int(th["medium_bytes"]), ladder[-1]})


def simulate(spec: SimSpec) -> dict:
    check_spec(spec)
    rng = random.Random(spec.seed)
    cluster = make_cluster(spec, rng)
    section = defaults(SCHEMA)
    section.update(group_size=spec.group_size, ranks_per_node=spec.ranks_per_node, backend="nccl")
    section["localize"].update(max_rounds=spec.max_rounds, strategy=spec.strategy)
    if spec.thresholds:
        section["thresholds"] = {"nccl": {"default": dict(spec.thresholds)}}
    sizes = judged_sizes(spec, section)
    plan = plan_probe(cluster.names, {}, 0.0, spec.group_size, spec.ranks_per_node)
    record = new_record(f"sim-{spec.seed}", plan.groups, section, now=0.0)
    history: dict[str, list] = {}
    per_round = []
    jobs = 0
    while True:
        rnd = record["rounds"][-1]
        groups = [Group.from_dict(g) for g in rnd["groups"]]
        jobs += len(groups)
        results = {g.id: fake_result(g, cluster, spec, sizes, rng) for g in groups}
        verdicts = judge_round(record, results, section, history)
        per_round.append({"round": rnd["round"], "groups": len(groups), **count_status(verdicts)})
        # Helpers: every node not in a job right now; the simulated cluster is otherwise idle.
        if advance(record, section, cluster.names) is None:
            break
    return _summary(spec, cluster, record, per_round, jobs)


def _summary(spec: SimSpec, cluster: Cluster, record: dict, per_round: list, jobs: int) -> dict:
    findings = record["findings"]
    named = {n for c in findings["culprits"] if c["kind"] == "node" for n in c["nodes"]}
    links = [sorted(c["nodes"]) for c in findings["culprits"] if c["kind"] == "link"]
    bad = set(cluster.faults)
    true_links = [sorted(x) for x in cluster.links]
    found_links = [x for x in true_links if any(set(x) <= set(link) for link in links)]
    false_links = [x for x in links if not any(set(t) <= set(x) for t in true_links)]
    out = {
        "nodes": spec.nodes, "group_size": spec.group_size, "seed": spec.seed,
        "bad_nodes": sorted(bad), "bad_kinds": {n: f.kind for n, f in sorted(cluster.faults.items())},
        "bad_bw": {n: round(f.bw, 3) for n, f in sorted(cluster.faults.items()) if f.kind == "slow"},
        "bad_links": true_links,
        "rounds": len(record["rounds"]), "jobs": jobs,
        "found": sorted(named & bad), "missed": sorted(bad - named), "false_accusations": sorted(named - bad),
        "links_found": found_links, "false_links": false_links,
        "unresolved": findings.get("unresolved", []), "transient": findings.get("transient", []),
        "per_round": [{"round": r["round"], "groups": r["groups"], "failed": r.get("fail", 0), "errors": r.get("error", 0)}
                      for r in per_round],
    }
    out["ok"] = not out["missed"] and not out["false_accusations"] and not false_links and len(found_links) == len(true_links)
    return out
