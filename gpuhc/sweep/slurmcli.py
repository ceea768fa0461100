"""The Slurm commands the sweep needs besides scontrol updates: sinfo, squeue, sbatch, topology.

They run through :class:`gpuhc.slurm.command.SlurmCommand`, like every Slurm call of gpuhc: argv
lists only, each call with a timeout, any failure a :class:`~gpuhc.errors.SlurmError` naming the
command; tests inject the runner and see exactly what would be sent.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuhc.errors import SlurmError
from gpuhc.slurm.command import SlurmCommand

# Base states of a node that takes jobs; a flag suffix (``*`` not responding, ``~`` powered
# off, ``#``/``%``/``!`` powering up or down) or any other state (drained, draining, down,
# fail, maint, future, ...) means out of service.
_IN_SERVICE = {"idle", "mixed", "allocated", "completing", "planned", "reserved"}


def in_service(state: str) -> bool:
    """Is a node in this sinfo ``%T`` state taking jobs (so a sweep can meet it idle some day)?"""
    if any(flag in state for flag in "*~#%!"):
        return False
    return state.rstrip("$@^-+").lower() in _IN_SERVICE


@dataclass
class SlurmCli(SlurmCommand):
    timeout_s: float = 30.0

    def _call(self, argv: list[str], stdin: str | None = None) -> str:
        return self.call(argv, stdin)

    def idle_nodes(self, partitions: list[str]) -> tuple[list[str], dict[str, str]]:
        """Nodes whose state is exactly idle (not drained, not powered down, responding), and
        the first partition each was listed under."""
        states, part_of = self.node_states(partitions)
        return [n for n, st in states.items() if st == "idle"], part_of

    def node_states(self, partitions: list[str]) -> tuple[dict[str, str], dict[str, str]]:
        """({node: sinfo's long state, e.g. ``idle``, ``mixed``, ``drained``, ``idle~``},
        {node: the first partition it was listed under}), in sinfo's order."""
        argv = ["sinfo", "-h", "-N", "-o", "%N|%T|%P"]
        if partitions:
            argv += ["-p", ",".join(partitions)]
        states: dict[str, str] = {}
        part_of: dict[str, str] = {}
        for line in self._call(argv).split("\n"):  # records end at \n alone (docs/slurm.md)
            fields = line.strip().split("|")
            if len(fields) != 3 or not fields[0]:
                if line.strip():  # said once, naming it; the other nodes are still read
                    self.note(f"skipped unreadable sinfo line {line.strip()[:60]!r}: expected node|state|partition")
                continue
            name, state, part = fields
            part_of.setdefault(name, part.rstrip("*"))
            states.setdefault(name, state)
        return states, part_of

    def topology(self) -> str:
        """``scontrol show topology`` text; empty when Slurm has no topology plugin."""
        try:
            return self._call(["scontrol", "show", "topology"])
        except SlurmError:
            return ""

    def active_jobs(self, name_prefix: str, job_ids: list[str] | None = None) -> dict[str, str]:
        """{job id: state} of queued or running jobs that are ours: named with the prefix, or
        with one of ``job_ids``."""
        # squeue's default state filter is exactly "not finished": pending, running, held, ...
        out = self._call(["squeue", "-h", "-o", "%i|%j|%T"])
        wanted = set(job_ids or [])
        found: dict[str, str] = {}
        for line in out.splitlines():
            fields = line.strip().split("|")
            if len(fields) != 3:
                continue
            jid, name, state = fields
            if jid in wanted or name.startswith(name_prefix + "-"):
                found[jid] = state
        return found

    def sbatch(self, argv: list[str], script: str) -> str:
        """Submit ``script`` (given on stdin); the job id from ``--parsable``."""
        out = self._call(argv, stdin=script).strip()
        job_id = out.split(";")[0].strip()
        if not job_id.isdigit():
            raise SlurmError(f"sbatch: unexpected answer {out[:100]!r} (wanted a job id)")
        return job_id
