"""The job checks' cross-node record (AdminComment), `gpuhc jobs` on a saved job listing, and
the scenario format's activity section (issue 24)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gpuhc.errors import SourceError
from gpuhc.slurm.jobs import record as rec
from gpuhc.slurm.jobs.control import JobControl, parse_job_line
from gpuhc.errors import SlurmError
from tests.helpers.jobs_act_fakes import fake_slurm, flow_for, report_of


def test_views_round_trip_and_an_admins_note_stays():
    a = rec.NodeView("gpu01", "hang", 1795697758, ("gpu3",))
    text = rec.update("ticket 4711: watch this job", a, "gpu01")
    assert text == "ticket 4711: watch this job gpuhc-jobs{gpu01/hang/1795697758/gpu3}"
    text = rec.update(text, rec.NodeView("gpu02", "hang", 1795697760), "gpu02")
    assert rec.parse(text) == [rec.NodeView("gpu01", "hang", 1795697758, ("gpu3",)), rec.NodeView("gpu02", "hang", 1795697760)]
    assert rec.update(text, rec.NodeView("gpu02", "hang", 1795697760), "gpu02") is None  # unchanged: no update sent
    gone = rec.update(rec.update(text, None, "gpu01"), None, "gpu02")
    assert gone == "ticket 4711: watch this job"


def test_combine_names_the_idle_node_of_a_multi_node_hang():
    views = [rec.NodeView("n2", "hang", 200), rec.NodeView("n3", "hang", 190), rec.NodeView("n1", "idle", 210)]
    f = rec.combine(views)
    assert (f.verdict, f.culprits, f.since, f.nodes) == ("hung", ["n1 (all GPUs idle)"], 190, 3)
    assert rec.culprit_nodes(f) == ["n1"]
    slow = rec.combine([rec.NodeView("n1", "straggler", 5, ("gpu2",))])
    assert (slow.verdict, slow.culprits) == ("slowed", ["n1:gpu2"])
    assert rec.combine([rec.NodeView("n1", "idle", 5)]).verdict == ""


@pytest.mark.parametrize("text", [
    "gpuhc-jobs{n1/hang/12/gpu3;rm}", "gpuhc-jobs{n1/drain/12/-}", "gpuhc-jobs{-n1/hang/12/-}",
    "gpuhc-jobs{n1/hang/-5/-}", "gpuhc-jobs{n1/hang/12/gpu3+../x}", "gpuhc-jobs{n1/hang/12/gpu3 extra}",
    "gpuhc-jobs{" + "n1/hang/1/" + "gpu1+" * 100 + "gpu1}",
])
def test_forged_or_malformed_entries_are_dropped(text):
    assert rec.parse(text) == [] and rec.combine(rec.parse(text)).verdict == ""


def test_many_nodes_keep_the_ones_that_name_a_culprit():
    views = [rec.NodeView(f"n{i:03d}", "hang", 10) for i in range(200)] + [rec.NodeView("n999", "idle", 11)]
    kept = rec.parse(rec.render("", views))
    assert len(kept) == rec.MAX_ENTRIES and rec.NodeView("n999", "idle", 11) in kept


LISTING = (
    "JobId=7 JobName=train\x1b]0;pwned\x07 UserId=alice(1000) GroupId=a(1000) JobState=RUNNING NodeList=n[1-2] "
    "ExcNodeList=(null) Command=(null) WorkDir=/w "
    "AdminComment=note with spaces gpuhc-jobs{n2/hang/1795697760/-,n1/hang/1795697758/gpu3} Comment=mine\n"
    "JobId=8 JobName=ok UserId=bob(1001) JobState=RUNNING NodeList=n3 Command=(null) WorkDir=/w AdminComment=(null)\n"
    "JobId=9 JobName=old UserId=bob(1001) JobState=COMPLETED NodeList=n3 Command=(null) WorkDir=/w "
    "AdminComment=gpuhc-jobs{n3/hang/1/gpu0}\n"
)


def test_parse_job_line_keeps_the_whole_admin_comment():
    f = parse_job_line(LISTING.splitlines()[0])
    assert f["AdminComment"] == "note with spaces gpuhc-jobs{n2/hang/1795697760/-,n1/hang/1795697758/gpu3}"
    assert f["Comment"] == "mine" and f["NodeList"] == "n[1-2]"
    assert parse_job_line(LISTING.splitlines()[1])["AdminComment"] == ""


def jobs_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpuhc", "jobs", *args], capture_output=True, text=True, timeout=60)


def test_gpuhc_jobs_from_a_listing(tmp_path):
    dump = tmp_path / "jobs.txt"
    dump.write_text(LISTING)
    cp = jobs_cli("--from-file", str(dump))
    assert cp.returncode == 0, cp.stderr
    lines = cp.stdout.splitlines()
    assert lines[0].split() == ["JOB", "VERDICT", "CULPRITS", "SINCE", "AGE", "NODES", "USER", "NAME"]
    assert len(lines) == 3 and lines[1].split()[:4] == ["7", "hung", "(unverified)", "n1:gpu3"]
    assert lines[2].startswith("1 record(s) unverified: read from a text dump")  # a text dump never verifies
    assert "\x1b" not in cp.stdout and "\x07" not in cp.stdout and "train\\x1b]0;pwned\\x07" in cp.stdout
    doc = json.loads(jobs_cli("--from-file", str(dump), "--json", "--all").stdout)
    assert [(j["job"], j["verdict"], j["verified"]) for j in doc["jobs"]] == [("7", "hung", False), ("8", "-", False)]
    assert jobs_cli("--from-file", str(dump), "-o", "job,culprits,reported", "--noheader").stdout.split() == ["7", "n1:gpu3", "2"]


def test_gpuhc_jobs_runs_the_configured_scontrol(tmp_path):
    """Issue 22: every Slurm program gpuhc runs is the configured one (slurm.scontrol); --scontrol
    still wins over it."""
    listing = tmp_path / "listing.txt"
    listing.write_text(LISTING)
    # job 7's record is read again exactly (gpuhc/slurm/jobs/control.py): its fields one per line,
    # and squeue's view of it, both from the site's configured programs
    shown = tmp_path / "job7.txt"
    shown.write_text("JobId=7 JobName=train\n   JobState=RUNNING\n   Command=/w/run.sh\n   WorkDir=/w\n"
                     "   AdminComment=note with spaces gpuhc-jobs{n2/hang/1795697760/-,n1/hang/1795697758/gpu3} \n"
                     "   StdErr=/w/out\n")
    fake = tmp_path / "site-scontrol"
    fake.write_text(f'#!/bin/sh\n[ "$1" = --json ] && {{ echo "scontrol: unrecognized option --json" >&2; exit 1; }}\n'
                    f'if [ "$3" = "-o" ]; then cat {listing}; else cat {shown}; fi\n')
    fake.chmod(0o755)
    squeue = tmp_path / "site-squeue"
    squeue.write_text('#!/bin/sh\nfor a; do fmt="$a"; done; sep="${fmt#%T}"; sep="${sep%%%U*}"\n'
                      'printf "RUNNING%s1000%sn[1-2]%s%s/w/run.sh%s/w%s\\n" "$sep" "$sep" "$sep" "$sep" "$sep" "$sep"\n')
    squeue.chmod(0o755)
    cfg = tmp_path / "gpuhc.yaml"
    cfg.write_text(f"slurm:\n  scontrol: {fake}\n  squeue: {squeue}\n")
    cfg.chmod(0o600)
    cp = jobs_cli("--config", str(cfg), "-o", "job,verdict", "--noheader")
    assert cp.returncode == 0 and cp.stdout.split() == ["7", "hung"], cp.stderr
    cp = jobs_cli("--config", str(cfg), "--scontrol", str(tmp_path / "no-scontrol"))
    assert cp.returncode == 3 and "not found" in cp.stderr
    cfg.write_text("slurm:\n  scontrol: [1, 2]\n")
    cp = jobs_cli("--config", str(cfg))
    assert cp.returncode == 2 and "scontrol" in cp.stderr and "Traceback" not in cp.stderr


def test_gpuhc_jobs_bad_usage_is_exit_2_with_a_message(tmp_path):
    cp = jobs_cli("--from-file", str(tmp_path / "missing.txt"))
    assert cp.returncode == 2 and "missing.txt" in cp.stderr and "Traceback" not in cp.stderr
    cp = jobs_cli("--from-file", str(tmp_path / "missing.txt"), "-o", "job,bogus")
    assert cp.returncode == 2 and "bogus" in cp.stderr
    cp = jobs_cli("--scontrol", str(tmp_path / "no-scontrol"))
    assert cp.returncode == 3 and "not found" in cp.stderr


def test_job_commands_refuse_what_could_smuggle_an_argument():
    sent = []
    ctl = JobControl(run=lambda argv, t: (sent.append(argv), (0, "", ""))[1])
    with pytest.raises(SlurmError):
        ctl.set_admin_comment("7", "two\nlines")
    with pytest.raises(SlurmError):
        ctl.show_job("7 8")
    with pytest.raises(SlurmError):
        ctl.requeue_excluding("7", ["n1,ALL"])
    assert sent == []
    ctl.requeue_excluding("7", ["n1"], already="n9")
    assert sent == [["scontrol", "requeuehold", "7"], ["scontrol", "update", "JobId=7", "ExcNodeList=n9,n1"],
                    ["scontrol", "release", "7"]]


# ------------------------------------------------------------------ the scenario's activity section

def load(tmp_path, text: str):
    from gpuhc.sources.scenario import load_scenario

    p = tmp_path / "s.yaml"
    p.write_text("gpus: [{name: H100, uuid: GPU-0, pci_bus_id: '0000:18:00.0'}]\n" + text)
    return load_scenario(str(p))


def test_activity_section_loads_and_steps_replace_it(tmp_path):
    s = load(tmp_path, "activity: {gpus: [{index: 0, jobs: ['42'], span_s: 14, gpu_util: [100, 99], mem_util: [0],"
                       " power_w: [130], power_limit_w: 700}]}\nsteps:\n  - {activity: {gpus: []}}\n")
    (g,) = s.activity.gpus
    assert (g.jobs, g.gpu_util, g.power_limit_w, g.via) == (["42"], [100.0, 99.0], 700.0, "cgroup")
    from gpuhc.sources.scenario import load_scenario

    assert load_scenario(str(tmp_path / "s.yaml"), 1).activity.gpus == []


@pytest.mark.parametrize("section,words", [
    ("{gpus: [{index: 0, gpu_util: [.nan]}]}", "finite"),
    ("{gpus: [{index: 0, power_w: [-1]}]}", "negative"),
    ("{gpus: [{index: 0, jobs: ['12;rm']}]}", "job id"),
    ("{gpus: [{index: 0, jobs: [12]}]}", "job id"),
    ("{gpus: [{index: 0, via: shell}]}", "one of"),
    ("{gpus: [{index: 0, bogus: 1}]}", "unknown activity GPU field"),
    ("{gpus: [{jobs: ['1']}]}", "index"),
    ("{gpus: [{index: 0}, {index: 0}]}", "twice"),
    ("{gpus: [{index: 0, gpu_util: [" + ",".join(["1"] * 4097) + "]}]}", "at most 4096"),
])
def test_bad_activity_is_refused_with_its_place(tmp_path, section, words):
    with pytest.raises(SourceError) as e:
        load(tmp_path, f"activity: {section}\n")
    assert words in str(e.value) and "activity" in str(e.value)


def test_snapshot_dump_carries_activity_and_replays_the_same_verdict(tmp_path):
    import yaml

    from gpuhc.sources.snapshot_format import dump_snapshot

    s = load(tmp_path, "activity: {gpus: [{index: 0, jobs: ['42'], span_s: 14, gpu_util: [100], mem_util: [0], power_w: [130]}]}\n")
    from gpuhc.model.snapshot import Snapshot

    doc = dump_snapshot(Snapshot("n", 1.0, nvml=s.nvml, activity=s.activity))
    again = tmp_path / "again.yaml"
    again.write_text(yaml.safe_dump(doc))
    from gpuhc.sources.scenario import load_scenario

    assert load_scenario(str(again)).activity == s.activity


# ------------------------------------------------------------------ after the health check


def test_nothing_to_say_asks_slurm_nothing(tmp_path):
    from gpuhc.slurm.jobs.act import after_healthcheck

    flow, lines = flow_for(tmp_path, str(tmp_path / "no-scontrol"))
    after_healthcheck(flow, report_of(("pass", {"job": "7", "signature": "running"}),
                                      ("pass", {"job": "8", "signature": "hang", "since": 1990, "culprits": ["gpu1"], "owners": [1000]})))
    assert lines == []  # a running job, a hang not yet called: no scontrol started
    after_healthcheck(flow, report_of(("warn", {"job": "8", "signature": "hang", "since": 1980, "culprits": ["gpu1"], "owners": [1000]})))
    assert len(lines) == 1 and "job 8: not recorded" in lines[0] and "not found" in lines[0]


def test_a_recorded_view_is_not_sent_again(tmp_path):
    from gpuhc.slurm.jobs.act import after_healthcheck

    fake, log, comment = fake_slurm(tmp_path)
    comment.write_text("ticket INC123 owner=ops")
    flow, lines = flow_for(tmp_path, str(fake))
    hang = ("warn", {"job": "8", "signature": "hang", "since": 1980, "culprits": ["gpu1"], "owners": [1000]})
    after_healthcheck(flow, report_of(hang))
    after_healthcheck(flow, report_of(hang))
    calls = ["squeue" if c.startswith("-h ") else c for c in log.read_text().splitlines()]
    assert calls == ["--json show job 8", "squeue", "show job 8",
                     "update JobId=8 AdminComment=ticket INC123 owner=ops gpuhc-jobs{n1/hang/1980/gpu1}",
                     "--json show job 8", "squeue", "show job 8",  # read, write, read back, and again after
                     "--json show job 8", "squeue", "show job 8"]  # another writer's time; the second run: nothing
    assert comment.read_text() == "ticket INC123 owner=ops gpuhc-jobs{n1/hang/1980/gpu1}"  # the admin's note kept
    assert sum("job 8 hung: culprit n1:gpu1" in x for x in lines) == 1


def test_a_job_slurm_does_not_show_running_here_is_left_alone(tmp_path):
    from gpuhc.slurm.jobs.act import after_healthcheck

    hang = ("warn", {"job": "8", "signature": "hang", "since": 1980, "culprits": ["gpu1"], "owners": [1000]})
    for where, (nodes, state) in {"elsewhere": ("n[5-6]", "RUNNING"), "pending": ("", "PENDING")}.items():
        d = tmp_path / where
        d.mkdir()
        fake, log, comment = fake_slurm(d, nodes, state)
        flow, lines = flow_for(d, str(fake))
        after_healthcheck(flow, report_of(hang))
        assert not comment.exists() and not [c for c in log.read_text().splitlines() if c.startswith("update")]
        assert any("does not show it running on n1" in x for x in lines), lines


def test_a_job_found_only_through_its_environment_is_never_written(tmp_path):
    from gpuhc.slurm.jobs.act import after_healthcheck

    fake, log, comment = fake_slurm(tmp_path)
    flow, lines = flow_for(tmp_path, str(fake))
    after_healthcheck(flow, report_of(("warn", {"job": "0008", "signature": "hang", "since": 1980, "culprits": ["gpu1"],
                                                "via": ["environ"]})))
    assert not log.exists() and lines == []


def test_a_view_another_node_overwrote_is_written_again_until_it_stays(tmp_path, monkeypatch):
    """Two nodes of one job write in the same second: the read-back shows the other node's write
    without this node's view, so it merges again and writes again (issue 29)."""
    from gpuhc.slurm.jobs import act as jobs_act
    from gpuhc.slurm.jobs.control import JobControl

    monkeypatch.setattr(jobs_act.time, "sleep", lambda s: None)
    fake, log, comment = fake_slurm(tmp_path)
    real_set = JobControl.set_admin_comment
    raced = []

    def racing_set(self, job, text):
        real_set(self, job, text)
        if not raced:  # n2 writes its own view over ours, from what it read before our write
            raced.append(1)
            comment.write_text("gpuhc-jobs{n2/hang/1985/-}")

    monkeypatch.setattr(JobControl, "set_admin_comment", racing_set)
    flow, lines = flow_for(tmp_path, str(fake))
    jobs_act.after_healthcheck(flow, report_of(("warn", {"job": "8", "signature": "hang", "since": 1980, "culprits": ["gpu1"], "owners": [1000]})))
    assert comment.read_text() == "gpuhc-jobs{n1/hang/1980/gpu1,n2/hang/1985/-}"
    assert sum(c.startswith("update") for c in log.read_text().splitlines()) == 2
