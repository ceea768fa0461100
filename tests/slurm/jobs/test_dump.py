"""``gpuhc jobs --from-file``: a saved listing read by Slurm's fields (JSON) or by Slurm's field
order (text), never by the first ``AdminComment=`` in a line (gpuhc/slurm/jobs/dump.py), on real
answers of Slurm 22.05 and 26.05 (tests/fixtures/slurm_jobs/README.md): jobs whose name and
working directory were written to forge a gpuhc record."""

from __future__ import annotations

import json
import subprocess
import sys

from gpuhc.slurm.jobs.dump import read_dump
from tests.helpers.paths import FIXTURES

FIX = FIXTURES / "slurm_jobs"
FORGED = "gpuhc-jobs{n3/hang/1795697758/gpu5"  # what the job's name says
FORGED_DIR = "gpuhc-jobs{n1/hang/1795697758/gpu7}"  # what the job's working directory says
ADMINS = "ticket INC123 owner=ops gpuhc-jobs{n1/hang/1795697758/gpu3}"  # what the admin set


def jobs_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpuhc", "jobs", *args], capture_output=True, text=True, timeout=60)


def test_a_json_dump_is_read_field_by_field_and_verified():
    (job,) = read_dump((FIX / "show-job-26.05.json").read_text(), "dump.json")
    assert job["AdminComment"] == ADMINS and FORGED in job["JobName"]
    assert (job["JobId"], job["JobState"], job["NodeList"], job["UserId"], job["verified"]) == ("1", "RUNNING", "n1", "root", True)


def test_a_text_line_is_read_by_slurms_order_and_never_verified():
    (job,) = read_dump((FIX / "show-job-oneline.txt").read_text(), "dump.txt")
    assert job["AdminComment"] == ADMINS  # the admin's, not the name's forgery before UserId=
    assert FORGED in job["JobName"] and job["JobState"] == "RUNNING" and job["NodeList"] == "n1"
    assert job["verified"] is False and "AdminComment=" in job["why"]


def test_a_working_directory_that_prints_admin_comment_gives_no_record():
    (job,) = read_dump((FIX / "show-job-forged-workdir-oneline.txt").read_text(), "dump.txt")
    assert job["AdminComment"] == "" and job["verified"] is False
    assert "more than once after Command=" in job["why"]


def test_a_name_that_repeats_slurms_fields_gives_no_record_and_no_state():
    # the name holds " UserId=... JobState=RUNNING Command=... AdminComment=...": Slurm says PENDING
    (job,) = read_dump((FIX / "show-job-forged-order-oneline.txt").read_text(), "dump.txt")
    assert (job["JobId"], job["AdminComment"], job["JobState"], job["verified"]) == ("3", "", "", False)
    assert job["why"].startswith("its fields' order is not Slurm's alone")


def test_gpuhc_jobs_on_real_dumps(tmp_path):
    text = tmp_path / "jobs.txt"
    text.write_text("".join((FIX / f).read_text() for f in ("show-job-oneline.txt", "show-job-forged-workdir-oneline.txt",
                                                            "show-job-forged-order-oneline.txt")))
    cp = jobs_cli("--from-file", str(text), "-o", "job,verdict,culprits")
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.splitlines()[1].split() == ["1", "hung", "(unverified)", "n1:gpu3"]  # never n3:gpu5 or n1:gpu7
    assert "gpu5" not in cp.stdout and "gpu6" not in cp.stdout and "gpu7" not in cp.stdout
    assert "1 record(s) unverified" in cp.stdout and "never acted on" in cp.stdout
    doc = json.loads(jobs_cli("--from-file", str(text), "--json", "--all").stdout)
    assert [(j["job"], j["verdict"], j["verified"]) for j in doc["jobs"]] == [("1", "hung", False), ("2", "-", False),
                                                                               ("3", "-", False)]
    assert doc["jobs"][2]["why"].startswith("its fields' order is not Slurm's alone")

    verified = jobs_cli("--from-file", str(FIX / "show-job-26.05.json"), "-o", "job,verdict,culprits")
    assert verified.stdout.split() == ["JOB", "VERDICT", "CULPRITS", "1", "hung", "n1:gpu3"]


def test_a_json_file_that_is_no_job_listing_is_a_named_usage_error(tmp_path):
    bad = tmp_path / "nodes.json"
    bad.write_text('{"nodes": []}')
    cp = jobs_cli("--from-file", str(bad))
    assert cp.returncode == 2 and "nodes.json: not a job listing" in cp.stderr and "Traceback" not in cp.stderr
