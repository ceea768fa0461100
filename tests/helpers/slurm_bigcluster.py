"""A real slurmctld that holds thousands of nodes, of which only a few run a slurmd.

Why: the circuit breaker's Slurm traffic grows with the size of the cluster, and the 4-node test
cluster cannot show what a storm of health checks costs the controller. Nodes that are defined in
``slurm.conf`` but never register are enough for slurmctld to hold and answer for them: it
packs their records into every node query, and a drain or resume of one is a real state change
it saves and logs.

The defined-only nodes stay in state UNKNOWN (``SlurmdTimeout=0``: the controller never marks a
silent node DOWN), so for gpuhc they are in service and a drain of one takes capacity, exactly as
a busy node of a large cluster would.

Layout: the live nodes (``n1``, ``n2``, ...) and ``size - len(live)`` defined-only nodes
``s00001``... are split into partitions of ``partition_size`` nodes (``p1``, ``p2``, ...; ``p1``
holds the live nodes and is the default). Built on :class:`slurm_cluster.SlurmCluster`; only the
node and partition lines of its ``slurm.conf`` are replaced.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

from tests.helpers.slurm_cluster import ClusterError, SlurmCluster


def defined_names(size: int, live: int) -> list[str]:
    return [f"s{i:05d}" for i in range(1, size - live + 1)]


class BigSlurmCluster(SlurmCluster):
    def __init__(self, workdir: str | os.PathLike, size: int = 10_000, partition_size: int = 2_000,
                 live: tuple[str, ...] = ("n1", "n2"), ledger: str | None = None, **kw: Any) -> None:
        if size <= len(live):
            raise ValueError("size must exceed the number of live nodes")
        super().__init__(workdir, nodes=live, **kw)
        self.size = size
        self.partition_size = partition_size
        self.defined = defined_names(size, len(live))
        self.ledger = ledger  # the breaker ledger's node record (docs/slurm.md "Breaker ledger")

    # ------------------------------------------------------------------ files

    def partitions(self) -> dict[str, list[str]]:
        """{partition: its nodes}, in order: the live nodes first."""
        every = list(self.nodes) + self.defined
        parts = {}
        for i in range(0, len(every), self.partition_size):
            parts[f"p{i // self.partition_size + 1}"] = every[i:i + self.partition_size]
        return parts

    def slurm_conf(self) -> str:
        import hostlist

        base = super().slurm_conf()
        # The defined-only nodes never register; the controller must not mark them DOWN for it.
        base, n = re.subn(r"(?m)^SlurmdTimeout=\d+$", "SlurmdTimeout=0", base)
        # The harness's one partition of every node goes; the test's extra_conf stays.
        lines = [ln for ln in base.splitlines() if not ln.startswith("PartitionName=gpu ")]
        if n != 1 or len(lines) == len(base.splitlines()):
            raise ClusterError("slurm_cluster_files.slurm_conf changed: no SlurmdTimeout or PartitionName line "
                               "to replace (update tests/helpers/slurm_bigcluster.py)")
        # Same hardware as the live nodes, one line for all (hostlist syntax), never started.
        lines.append(f"NodeName={hostlist.collect_hostlist(self.defined)} NodeHostname=localhost "
                     f"NodeAddr=127.0.0.1 Port={self._defined_port()} CPUs={self.cpus} RealMemory=1000 State=UNKNOWN")
        if self.ledger:  # as docs/slurm.md tells an admin: a node of its own, hidden, never scheduled
            lines.append(f"NodeName={self.ledger} NodeHostname=localhost NodeAddr=127.0.0.1 "
                         f"Port={self._defined_port()} CPUs=1 RealMemory=100 State=UNKNOWN")
            lines.append(f"PartitionName=gpuhc Hidden=YES State=INACTIVE Nodes={self.ledger}")
        for i, (name, members) in enumerate(self.partitions().items()):
            default = " Default=YES" if i == 0 else ""
            lines.append(f"PartitionName={name}{default} MaxTime=INFINITE State=UP "
                         f"Nodes={hostlist.collect_hostlist(members)}")
        return "\n".join(lines) + "\n"

    def _defined_port(self) -> int:
        # A port nothing listens on: the controller's messages to these nodes fail fast.
        from tests.helpers.slurm_cluster_files import free_ports

        return free_ports(1)[0]

    # ------------------------------------------------------------------ measuring

    def ctld_pid(self) -> int:
        return self._procs["slurmctld"].pid

    def ctld_io(self) -> dict[str, int]:
        """slurmctld's /proc I/O counters (``wchar``: every byte it wrote, sockets included)."""
        out = {}
        for line in Path(f"/proc/{self.ctld_pid()}/io").read_text().splitlines():
            k, v = line.split(":")
            out[k.strip()] = int(v)
        return out

    def sdiag(self) -> str:
        return self.run(["sdiag"], timeout=30).stdout

    def reset_sdiag(self) -> None:
        self.run(["sdiag", "--reset"], timeout=30)


def sdiag_rpcs(text: str) -> dict[str, int]:
    """{RPC type: count} from sdiag's "Remote Procedure Call statistics by message type"."""
    return {k: v[0] for k, v in sdiag_rpc_stats(text).items()}


def sdiag_rpc_stats(text: str) -> dict[str, tuple[int, int]]:
    """{RPC type: (count, average time in microseconds)}: what slurmctld spent on each, from
    receiving the request to sending the answer (no client start-up in it)."""
    out: dict[str, tuple[int, int]] = {}
    section = False
    for line in text.splitlines():
        if line.startswith("Remote Procedure Call statistics by message type"):
            section = True
            continue
        if section and line.startswith("Remote Procedure Call statistics by user"):
            break
        m = re.match(r"\s+(\S+)\s+\(\s*\d+\)\s+count:(\d+)\s+ave_time:(\d+)", line)
        if section and m:
            out[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    return out


def lo_bytes() -> int:
    """Bytes through the loopback device of this network namespace (each packet counted once)."""
    for line in Path("/proc/net/dev").read_text().splitlines():
        if line.strip().startswith("lo:"):
            return int(line.split(":", 1)[1].split()[0])
    raise ClusterError("no lo in /proc/net/dev")


def in_private_netns() -> bool:
    """True inside a network namespace of our own (``unshare -n``, see :func:`prepare_netns`)."""
    try:
        names = {ln.split(":")[0].strip() for ln in Path("/proc/net/dev").read_text().splitlines()[2:]}
    except OSError:
        return False
    return names <= {"lo", "gpuhc0", "gpuhc1"}


def prepare_netns() -> None:
    """In a fresh ``unshare -n`` namespace: lo up, plus one IPv4 address on a veth pair, since
    Slurm binds with AI_ADDRCONFIG, which ignores loopback-only hosts. All Slurm traffic still
    goes through lo, whose counters then hold nothing but this cluster's traffic."""
    for argv in (["ip", "link", "set", "lo", "up"],
                 ["ip", "link", "add", "gpuhc0", "type", "veth", "peer", "name", "gpuhc1"],
                 ["ip", "addr", "add", "10.254.0.1/24", "dev", "gpuhc0"],
                 ["ip", "link", "set", "gpuhc0", "up"]):
        subprocess.run(argv, check=True, capture_output=True)
