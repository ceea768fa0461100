"""A job as Slurm describes it, not as its user does (issue 29, gpuhc/slurm/jobs/control.py): the
AdminComment read at its one real place, byte for byte; a job whose user text repeats that place
is not read; job ids normalised. On the real answers in tests/fixtures/slurm_jobs/."""

from __future__ import annotations

import pytest

from tests.helpers.paths import FIXTURES

from gpuhc.errors import SlurmError
from gpuhc.slurm.jobs.control import JobControl, admin_comment, normal_job_id, parse_job_line

FIX = FIXTURES / "slurm_jobs"
RECORDED_SEP = "#5eed0f5eed0f5eed0f5eed0f#"
ADMIN_NOTE = "ticket INC123 owner=ops gpuhc-jobs{n1/hang/1795697758/gpu3}"


class Recorded:
    """Answers gpuhc's two reads from the recording (the squeue separator put back to the one
    this call drew)."""

    def __init__(self, show: str | None = None):
        self.show = show if show is not None else (FIX / "show-job.txt").read_text()
        self.calls: list[list[str]] = []

    def __call__(self, argv, timeout):
        self.calls.append(argv)
        if "--json" in argv:  # Slurm 22.05's scontrol, word for word
            return 1, "", "scontrol: unrecognized option '--json'\nTry \"scontrol --help\" for more information\n"
        if argv[0] == "squeue":
            fmt = argv[-1]
            sep = fmt[2:fmt.index("%U")]
            return 0, (FIX / "squeue-fields.txt").read_text().replace(RECORDED_SEP, sep), ""
        return 0, self.show, ""


def test_the_admin_comment_is_the_real_field_byte_for_byte_not_the_jobs_name():
    # the one-line listing's first AdminComment= is the user's forgery
    assert parse_job_line((FIX / "show-job-oneline.txt").read_text())["AdminComment"].startswith("gpuhc-jobs{n3/hang")
    job = JobControl(run=Recorded()).show_job("1")
    assert job.admin_comment == ADMIN_NOTE
    assert (job.state, job.uid, job.nodes, job.excluded) == ("RUNNING", 0, ["n1"], "n2")
    assert job.runs_on("n1") and not job.runs_on("n2")


def test_a_job_whose_text_repeats_its_command_and_workdir_lines_is_not_read():
    real = (FIX / "show-job.txt").read_text()
    lines = real.split("\n")
    anchor = "\n".join(ln for ln in lines if ln.startswith(("   Command=", "   WorkDir=")))
    forged = real.replace("JobId=1 JobName=x", "JobId=1 JobName=x\n" + anchor + "\n   AdminComment=gpuhc-jobs{n3/hang/1/gpu5}", 1)
    with pytest.raises(SlurmError, match="cannot be told from its user's text"):
        JobControl(run=Recorded(forged)).show_job("1")
    # no AdminComment at all: the line after WorkDir is StdErr's
    bare = "\n".join(ln for ln in lines if not ln.startswith("   AdminComment="))
    assert JobControl(run=Recorded(bare)).show_job("1").admin_comment == ""
    assert admin_comment("\n   Command=a\n   WorkDir=/w\n   AdminComment=x = y  \n", "a", "/w") == "x = y "


def test_job_ids_are_normalised_and_odd_ones_refused():
    assert normal_job_id("0000778") == "778" and normal_job_id("778") == "778"
    for bad in ("", "7 8", "-1", "1e3", "7\n8", "1234567890123"):
        with pytest.raises(SlurmError):
            normal_job_id(bad)
    rec = Recorded()
    JobControl(run=rec).show_job("0001")
    assert [c[-1] for c in rec.calls][:1] == ["1"] and rec.calls[1][4] == "1" and rec.calls[2][-1] == "1"


def test_where_the_release_has_json_the_fields_are_fields():
    """Slurm 26.05's ``scontrol --json show job`` of the same forged job (real answer)."""
    text = (FIX / "show-job-26.05.json").read_text()
    calls = []
    job = JobControl(run=lambda argv, t: (calls.append(argv), (0, text, ""))[1]).show_job("1")
    assert calls == [["scontrol", "--json", "show", "job", "1"]]  # one read, no squeue
    assert job.admin_comment == ADMIN_NOTE and (job.state, job.uid, job.nodes, job.excluded) == ("RUNNING", 0, ["n1"], "n2")
    with pytest.raises(SlurmError, match="no record for the job"):
        JobControl(run=lambda argv, t: (0, text, "")).show_job("2")
