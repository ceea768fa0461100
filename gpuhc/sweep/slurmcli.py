"""The Slurm commands the sweep needs besides scontrol updates: sinfo, squeue, sbatch, topology.

They run through :class:`gpuhc.slurm.act.command.SlurmCommand`, like every Slurm call of gpuhc: the
program configured as ``slurm.<program>`` (the argv below name it, the wrapper puts the path in),
argv lists only, each call killed at its timeout, any failure a :class:`~gpuhc.errors.SlurmError`
naming the command; tests inject the runner and see exactly what would be sent.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from gpuhc.errors import SlurmError
from gpuhc.slurm.act.command import SlurmCommand

# Base states of a node that takes jobs; a flag suffix (``*`` not responding, ``~`` powered
# off, ``#``/``%``/``!`` powering up or down) or any other state (drained, draining, down,
# fail, maint, future, ...) means out of service.
_IN_SERVICE = {"idle", "mixed", "allocated", "completing", "planned", "reserved"}


def in_service(state: str) -> bool:
    """Is a node in this sinfo ``%T`` state taking jobs (so a sweep can meet it idle some day)?"""
    if any(flag in state for flag in "*~#%!"):
        return False
    return state.rstrip("$@^-+").lower() in _IN_SERVICE


def _current_user() -> str:
    """The name squeue knows this process's user by (a uid with no name: the number, which
    squeue's ``-u`` also takes)."""
    import pwd

    uid = os.getuid()
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


@dataclass
class SlurmCli(SlurmCommand):
    # Its own per-call timeout, not slurm.timeout_s (the health check's): one sbatch or a full
    # sinfo table may take longer on a busy slurmctld, and cron is not in a hurry.
    timeout_s: float = 30.0

    @classmethod
    def from_config(cls, config) -> "SlurmCli":
        """The sweep's Slurm commands as configured: the programs of ``slurm.<program>``."""
        return cls.from_section(config.section("slurm"), timeout_s=cls.timeout_s)

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

    def active_jobs(self, name_prefix: str, job_ids: list[str] | None = None, user: str | None = None) -> dict[str, str]:
        """{job id: state} of queued or running jobs that are ours: submitted by ``user`` (by
        default whoever runs this: the sweep account) and either one of ``job_ids`` (those gpuhc
        recorded) or named with the prefix (a lost state directory, a second admin host).

        A job's name is no proof of anything: any user can submit ``-J gpuhc-sweep-x --hold``,
        and once stopped every later sweep that way. So squeue is asked for the sweep
        account's jobs alone (``-u``): another user's job never reaches the parser, and with it
        no forged line a newline in its name could carry. The name is the last field, split
        off once, so a ``|`` in it cannot shift the others (docs/security.md)."""
        who = user or _current_user()
        # squeue's default state filter is exactly "not finished": pending, running, held, ...
        out = self._call(["squeue", "-h", "-u", who, "-o", "%i|%T|%j"])
        wanted = set(job_ids or [])
        found: dict[str, str] = {}
        for line in out.splitlines():
            fields = line.strip().split("|", 2)
            if len(fields) != 3 or not fields[0].isdigit():
                continue
            jid, state, name = fields
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
