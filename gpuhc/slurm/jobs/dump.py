"""A saved job listing for ``gpuhc jobs --from-file``: which gpuhc record in it can be believed.

Two kinds of dump, told apart by their first character:

- **JSON** (``scontrol --json show job``, ``squeue --json``): every field is a field, read as the
  live path reads it (:func:`gpuhc.slurm.jobs.control.job_of_json`). Its records are verified.
- **Text** (``scontrol show job -o``, one job a line): the user's own text (the job's name, its
  command, working directory and output paths) sits on the same line as the fields, and any of
  it may print ``AdminComment=``. The fields are taken by Slurm's own order: the name runs to
  the line's one ``UserId=``; the fields gpuhc lists (``JobState``, ``NodeList``) come from the
  stretch between ``UserId=`` and ``Command=``, where Slurm prints only values it made or checked; the
  AdminComment from after ``Command=``. A line whose order is not unambiguous (``UserId=`` or
  ``Command=`` twice, ``AdminComment=`` twice after ``Command=``) gives no record at all. Even
  an unambiguous one cannot prove its AdminComment is Slurm's (a working directory named
  ``w AdminComment=gpuhc-jobs{...}``, with no real AdminComment, prints it exactly where Slurm
  would), so a record read from text is listed as **unverified**, and nothing is ever decided
  on it: ``gpuhc jobs`` only lists, and the job checks read a job with
  :meth:`~gpuhc.slurm.jobs.control.JobControl.show_job`, never from a dump (docs/security.md).

Each job comes back as the listing's fields (``JobId``, ``JobState``, ``NodeList``, ``UserId``,
``JobName``, ``AdminComment``) with ``verified`` (bool) and ``why`` (a reason when not).
"""

from __future__ import annotations

import json
import re

from gpuhc.errors import ConfigError

TEXT_SOURCE = "a text dump: the job's own name, command or paths can print AdminComment="
_UNORDERED = "its fields' order is not Slurm's alone"
_HEAD = re.compile(r"JobId=(\d{1,12}) JobName=")
_MIDDLE_KEY = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9:/_]*)=(\S*)")


def read_dump(text: str, where: str) -> list[dict]:
    """The running jobs of a saved listing; ConfigError (naming ``where``) for JSON that is not a
    job listing."""
    if text.lstrip().startswith("{"):
        return [j for j in _json_jobs(text, where) if j["JobState"] == "RUNNING"]
    jobs = [_text_job(ln.strip()) for ln in text.splitlines() if ln.strip().startswith("JobId=")]
    # a line whose order hides its state is kept, to be said, not dropped in silence
    return [j for j in jobs if j is not None and (j["JobState"] == "RUNNING" or j["why"].startswith(_UNORDERED))]


def _json_jobs(text: str, where: str) -> list[dict]:
    from gpuhc.slurm.jobs.control import job_of_json

    try:
        records = json.loads(text)["jobs"]
        if not isinstance(records, list):
            raise TypeError
    except (ValueError, KeyError, TypeError):
        raise ConfigError(f"{where}: not a job listing (want the JSON of scontrol --json show job or "
                          "squeue --json, with a \"jobs\" list)") from None
    out = []
    for rec in records:
        if not isinstance(rec, dict):
            continue
        job = job_of_json(rec)
        out.append({"JobId": job.id, "JobState": job.state, "NodeList": str(rec.get("nodes") or ""),
                    "UserId": job.fields.get("UserId", ""), "JobName": job.fields.get("JobName", ""),
                    "AdminComment": job.admin_comment, "verified": True, "why": ""})
    return out


def _text_job(line: str) -> dict | None:
    """One ``scontrol show job -o`` line by Slurm's field order, or None where it has no job head."""
    m = _HEAD.match(line)
    if not m:
        return None
    job = {"JobId": m.group(1), "JobState": "", "NodeList": "", "UserId": "", "JobName": "", "AdminComment": "",
           "verified": False, "why": TEXT_SOURCE}
    rest = line[m.end():]
    if rest.count(" UserId=") != 1 or rest.count(" Command=") != 1 or rest.index(" UserId=") > rest.index(" Command="):
        job["why"] = _UNORDERED + " (the job's text repeats UserId= or Command=): not read"
        return job
    name, rest = rest.split(" UserId=", 1)
    middle, tail = rest.split(" Command=", 1)
    fields = dict(_MIDDLE_KEY.findall("UserId=" + middle)[::-1])  # the first of a key wins
    job.update(JobName=name, UserId=fields.get("UserId", ""), JobState=fields.get("JobState", ""),
               NodeList=fields.get("NodeList", ""))
    if tail.count(" AdminComment=") > 1:
        job["why"] = "AdminComment= appears more than once after Command= (the job's own paths print it): not read"
        return job
    if " AdminComment=" in tail:
        value = tail.split(" AdminComment=", 1)[1]
        end = re.search(r"\s(?:Comment|StdErr|StdIn|StdOut|Power|SubmitLine)=", value)
        value = (value[:end.start()] if end else value).strip()
        job["AdminComment"] = "" if value == "(null)" else value
    return job
