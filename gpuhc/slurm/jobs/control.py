"""Slurm's job commands the job checks need: read jobs, set a job's AdminComment, requeue a job
away from a node. Through the one command wrapper (gpuhc/slurm/act/command.py): argv only, every
call inside the caller's deadline, and observe mode's gate.

**A job as Slurm describes it, not as its user does** (docs/security.md, "Acting safely").
Where the release has it (23.02 and later), ``scontrol --json show job`` gives every field as a
field, the AdminComment exactly. Where it has not (22.05: gpuhc/slurm/read/releases.py says what
its text and its squeue print), ``scontrol show job`` prints the user's own text next to the
fields gpuhc acts on, and any of it may hold ``AdminComment=`` or a newline and a whole forged
line. So :meth:`JobControl.show_job` takes the fields it acts on
(state, owner uid, nodes, excluded nodes) from ``squeue -o`` with a separator drawn at random
for this call, which no user can have put in their text; and it reads the AdminComment, which
squeue does not print, from ``scontrol show job`` (one field per line) at the one place it can
be: the line right after the job's own ``Command=`` and ``WorkDir=`` lines, whose exact text the
same squeue call gave. If that pair of lines occurs more than once (the user copied it into a
name or a path), the job is not read: gpuhc neither trusts nor overwrites its AdminComment.
The AdminComment comes back byte for byte, an admin's spaces and ``=`` included.

Requeue is ``requeuehold``, then ``ExcNodeList``, then ``release``: Slurm takes ``ExcNodeList``
only from a pending job, and a plain ``requeue`` could start the job again on the culprit node
before the exclusion lands. The job must be requeueable (``--requeue`` or ``JobRequeue=1``);
Slurm's refusal comes back as a SlurmError naming the command.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field

from gpuhc.errors import SlurmError
from gpuhc.slurm.act.command import SlurmCommand

_JOB = re.compile(r"^\d{1,12}$")
_NODE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_KEY = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9:/_]*)=(\S*)")
_ADMIN = re.compile(r"(?:^|\s)AdminComment=(.*?)(?=\s[A-Za-z][A-Za-z0-9:/_]*=|$)")
MAX_COMMENT = 4096
# squeue -o: %T state, %U owner's uid, %N nodes, %x excluded nodes, %o command, %Z working directory
_SQUEUE_FIELDS = ("state", "uid", "nodes", "excluded", "command", "workdir")
_SQUEUE_FORMAT = ("%T", "%U", "%N", "%x", "%o", "%Z")


def normal_job_id(job: str) -> str:
    """The job id as Slurm prints it: digits, no leading zero (``0000778`` is job 778, which
    scontrol also takes it for: two spellings must never be two jobs in gpuhc's memory)."""
    if not _JOB.match(job or ""):
        raise SlurmError(f"refusing job id {job!r}: not a plain Slurm job id")
    return str(int(job))


def parse_job_line(line: str) -> dict[str, str]:
    """One ``scontrol show job -o`` line -> its fields, for a listing only: the AdminComment here
    is the first ``AdminComment=`` in the line, which a job's name may fake. Nothing is decided
    or written on it (:meth:`JobControl.show_job` reads the real one)."""
    fields = {k: v for k, v in _KEY.findall(line)}
    m = _ADMIN.search(line)
    fields["AdminComment"] = "" if not m or m.group(1) == "(null)" else m.group(1).strip()
    return fields


@dataclass
class Job:
    """One job as Slurm describes it (see the module doc)."""

    id: str
    state: str
    uid: int | None
    nodes: list[str]
    excluded: str
    admin_comment: str
    fields: dict[str, str] = field(default_factory=dict)  # what a listing shows (name, user)

    def runs_on(self, node: str) -> bool:
        return self.state == "RUNNING" and node in self.nodes


def job_of_json(rec: dict) -> Job:
    """One job of ``scontrol --json show job`` or ``squeue --json`` (``jobs[i]``): every field a
    field, the AdminComment exactly (the live read and a saved dump alike)."""
    from gpuhc.slurm.read.sinfo_text import expand

    state = rec.get("job_state")
    state = state[0] if isinstance(state, list) and state else state
    uid = rec.get("user_id")
    user = str(rec.get("user_name") or (uid if isinstance(uid, int) else ""))
    return Job(str(rec.get("job_id") or "?"), str(state or ""), uid if isinstance(uid, int) else None,
               expand(str(rec.get("nodes") or "")), str(rec.get("excluded_nodes") or ""),
               str(rec.get("admin_comment") or ""), {"JobName": str(rec.get("name") or ""), "UserId": user})


def admin_comment(text: str, command: str, workdir: str) -> str:
    """The AdminComment in a ``scontrol show job`` (one field per line) answer, found right after
    the job's own Command and WorkDir lines; SlurmError when those lines are not there exactly once."""
    anchor = f"\n   Command={command}\n   WorkDir={workdir}\n"
    seen = text.count(anchor)
    if seen == 0:
        raise SlurmError("scontrol show job prints no Command/WorkDir lines as Slurm 22.05 does: AdminComment "
                         "not read, not written")
    if seen > 1:
        raise SlurmError("its AdminComment cannot be told from its user's text (a name or path repeats its "
                         "Command/WorkDir lines): not read, not written")
    rest = text[text.index(anchor) + len(anchor):]
    if not rest.startswith("   AdminComment="):
        return ""
    value = rest[len("   AdminComment="):].split("\n", 1)[0]
    return value[:-1] if value.endswith(" ") else value  # Slurm puts one space before the line's end


@dataclass
class JobControl(SlurmCommand):
    binary: str = "scontrol"

    def show_job(self, job: str) -> Job:
        """The job as Slurm describes it: two reads (squeue, scontrol show job), only when gpuhc
        has something to write or to act on."""
        from gpuhc.slurm.read.sinfo_text import expand

        job = normal_job_id(job)
        found = self._from_json(job)
        if found is not None:
            return found
        sep = "#" + secrets.token_hex(12) + "#"
        out = self.call(["squeue", "-h", "--states=all", "-j", job, "-o", sep.join(_SQUEUE_FORMAT) + sep])
        parts = out.split(sep)
        if len(parts) != len(_SQUEUE_FORMAT) + 1 or parts[-1].strip():
            raise SlurmError(f"squeue -j {job}: no single answer for the job")
        got = dict(zip(_SQUEUE_FIELDS, parts))
        text = self.call([self.binary, "show", "job", job])
        if not text.startswith(f"JobId={job} "):
            raise SlurmError(f"scontrol show job {job}: no record for the job")
        try:
            comment = admin_comment(text, got["command"], got["workdir"])
        except SlurmError as e:
            raise SlurmError(f"job {job}: {e}") from None
        uid = got["uid"].strip()
        return Job(job, got["state"].strip(), int(uid) if uid.isascii() and uid.isdigit() else None, expand(got["nodes"].strip()),
                   got["excluded"].strip(), "" if comment == "(null)" else comment)

    def _from_json(self, job: str) -> Job | None:
        """The job from ``scontrol --json show job``; None where the release has no --json."""
        import json

        from gpuhc.slurm.read.releases import lacks_json

        try:
            text = self.call([self.binary, "--json", "show", "job", job])
        except SlurmError as e:
            if lacks_json(str(e)):
                return None  # read the text instead
            raise
        try:
            rec = next(j for j in json.loads(text)["jobs"] if str(j.get("job_id")) == job)
        except (ValueError, KeyError, TypeError, StopIteration):
            raise SlurmError(f"scontrol --json show job {job}: no record for the job") from None
        return job_of_json(rec)

    def running_jobs(self) -> list[dict[str, str]]:
        """Every running job, for ``gpuhc jobs``. A line that holds a gpuhc record is read again
        as :meth:`show_job` reads it, so a record a job's name fakes is not shown as a finding."""
        out = self.call([self.binary, "show", "job", "-o"])
        jobs = [parse_job_line(ln) for ln in out.splitlines() if ln.strip().startswith("JobId=")]
        jobs = [j for j in jobs if j.get("JobState") == "RUNNING"]
        for j in [j for j in jobs if "gpuhc-jobs{" in j.get("AdminComment", "")][:MAX_REREAD]:
            try:
                j["AdminComment"] = self.show_job(j.get("JobId", "")).admin_comment
            except SlurmError as e:
                self.note(str(e))
                j["AdminComment"] = ""
        return jobs

    def set_admin_comment(self, job: str, text: str) -> None:
        job = normal_job_id(job)
        if any(ord(c) < 32 or ord(c) == 127 for c in text) or len(text.encode()) > MAX_COMMENT:
            raise SlurmError(f"refusing AdminComment of job {job}: must be one printable line of at most {MAX_COMMENT} bytes")
        self.call([self.binary, "update", f"JobId={job}", f"AdminComment={text}"])

    def requeue_excluding(self, job: str, nodes: list[str], already: str = "") -> None:
        """Requeue ``job`` held, add ``nodes`` to its ExcNodeList (keeping ``already``), release it."""
        job = normal_job_id(job)
        if not nodes or not all(_NODE.match(n) for n in nodes):
            raise SlurmError(f"refusing to exclude {nodes!r} from job {job}: not plain node names")
        from gpuhc.slurm.read.sinfo_text import expand

        keep = [n for n in expand(already or "") if _NODE.match(n)]  # squeue prints a hostlist: n[1-2]
        excluded = ",".join(dict.fromkeys([*keep, *nodes]))
        self.call([self.binary, "requeuehold", job])
        try:
            self.call([self.binary, "update", f"JobId={job}", f"ExcNodeList={excluded}"])
        finally:
            self.call([self.binary, "release", job])


MAX_REREAD = 64  # listing: jobs with a record read again exactly (two reads each)
