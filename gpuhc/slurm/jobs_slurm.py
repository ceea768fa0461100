"""Slurm's job commands the job checks need: read jobs, set a job's AdminComment, requeue a job
away from a node. Through the one command wrapper (gpuhc/slurm/command.py): argv only, every
call inside the caller's deadline.

Requeue is ``requeuehold``, then ``ExcNodeList``, then ``release``: Slurm takes ``ExcNodeList``
only from a pending job, and a plain ``requeue`` could start the job again on the culprit node
before the exclusion lands. The job must be requeueable (``--requeue`` or ``JobRequeue=1``);
Slurm's refusal comes back as a SlurmError naming the command.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuhc.errors import SlurmError
from gpuhc.slurm.command import SlurmCommand

_JOB = re.compile(r"^\d{1,12}$")
_NODE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_KEY = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9:/_]*)=(\S*)")
_ADMIN = re.compile(r"(?:^|\s)AdminComment=(.*?)(?=\s[A-Za-z][A-Za-z0-9:/_]*=|$)")
MAX_COMMENT = 4096


def parse_job_line(line: str) -> dict[str, str]:
    """One ``scontrol show job -o`` line -> its fields; AdminComment whole, spaces and all."""
    fields = {k: v for k, v in _KEY.findall(line)}
    m = _ADMIN.search(line)
    fields["AdminComment"] = "" if not m or m.group(1) == "(null)" else m.group(1).strip()
    return fields


@dataclass
class JobControl(SlurmCommand):
    binary: str = "scontrol"

    def show_job(self, job: str) -> dict[str, str]:
        _check_job(job)
        lines = [ln for ln in self.call([self.binary, "show", "job", "-o", job]).splitlines() if ln.strip()]
        if not lines:
            raise SlurmError(f"scontrol show job {job}: no answer")
        return parse_job_line(lines[0])

    def running_jobs(self) -> list[dict[str, str]]:
        out = self.call([self.binary, "show", "job", "-o"])
        jobs = [parse_job_line(ln) for ln in out.splitlines() if ln.strip().startswith("JobId=")]
        return [j for j in jobs if j.get("JobState") == "RUNNING"]

    def set_admin_comment(self, job: str, text: str) -> None:
        _check_job(job)
        if any(ord(c) < 32 or ord(c) == 127 for c in text) or len(text.encode()) > MAX_COMMENT:
            raise SlurmError(f"refusing AdminComment of job {job}: must be one printable line of at most {MAX_COMMENT} bytes")
        self.call([self.binary, "update", f"JobId={job}", f"AdminComment={text}"])

    def requeue_excluding(self, job: str, nodes: list[str], already: str = "") -> None:
        """Requeue ``job`` held, add ``nodes`` to its ExcNodeList (keeping ``already``), release it."""
        _check_job(job)
        if not nodes or not all(_NODE.match(n) for n in nodes):
            raise SlurmError(f"refusing to exclude {nodes!r} from job {job}: not plain node names")
        keep = [n for n in (already or "").split(",") if n and n != "(null)" and _NODE.match(n)]
        excluded = ",".join(dict.fromkeys([*keep, *nodes]))
        self.call([self.binary, "requeuehold", job])
        try:
            self.call([self.binary, "update", f"JobId={job}", f"ExcNodeList={excluded}"])
        finally:
            self.call([self.binary, "release", job])


def _check_job(job: str) -> None:
    if not _JOB.match(job or ""):
        raise SlurmError(f"refusing job id {job!r}: not a plain Slurm job id")
