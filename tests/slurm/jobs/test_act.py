"""The Slurm side of the jobs check acts only for the job's user (issue 29, gpuhc/slurm/jobs/act.py):
the owners of the job's processes (the kernel's uids, in the check's result) against the job's
user as Slurm reports it, on a stand-in for Slurm 22.05 (squeue's %U) and on the real Slurm 26.05
``scontrol --json show job`` answer in tests/fixtures/slurm_jobs/."""

from __future__ import annotations

from types import SimpleNamespace

from gpuhc.slurm.jobs import act as jobs_act
from gpuhc.slurm.jobs.control import JobControl
from tests.helpers.paths import FIXTURES
from tests.helpers.jobs_act_fakes import fake_slurm, flow_for, report_of

OTHER_NODES_HANG = "ticket INC123 owner=ops gpuhc-jobs{n2/hang/1000/-}"  # hung since 1000; now is 2000


def hang(owners: list[int] | None, job: str = "8") -> tuple[str, dict]:
    v = {"job": job, "signature": "hang", "since": 1980, "culprits": ["gpu1"]}
    return ("warn", v if owners is None else {**v, "owners": owners})


def with_requeue(flow):
    flow.opts.config = SimpleNamespace(check_settings=lambda cid: {"thresholds": {"requeue_after_s": 60}},
                                       section=lambda name: {"commands": []})
    return flow


def test_a_process_of_another_user_names_nothing_and_is_said_once(tmp_path):
    """The job's user is uid 1000 (squeue %U); its processes here are uid 1001's: no AdminComment,
    no requeue although one is due, one log line, and no Slurm call in the next run."""
    fake, log, comment = fake_slurm(tmp_path)
    comment.write_text(OTHER_NODES_HANG)
    flow, lines = flow_for(tmp_path, str(fake))
    with_requeue(flow)
    jobs_act.after_healthcheck(flow, report_of(hang([1001])))
    calls = log.read_text().splitlines()
    assert not [c for c in calls if c.startswith(("update", "requeue", "release"))], calls
    assert comment.read_text() == OTHER_NODES_HANG
    (said,) = [x for x in lines if "not its user's" in x]
    assert "job 8" in said and "uid 1001" in said and "Slurm: uid 1000" in said
    jobs_act.after_healthcheck(flow, report_of(hang([1001])))
    assert log.read_text().splitlines() == calls and len(lines) == 1  # said once, not asked again


def test_the_jobs_user_is_written_and_requeued_and_roots_processes_are_neutral(tmp_path):
    """The same job, its processes the user's and root's (slurmstepd's): written, and requeued."""
    fake, log, comment = fake_slurm(tmp_path)
    comment.write_text(OTHER_NODES_HANG)
    flow, lines = flow_for(tmp_path, str(fake))
    with_requeue(flow)
    jobs_act.after_healthcheck(flow, report_of(hang([0, 1000])))
    calls = log.read_text().splitlines()
    assert "update JobId=8 AdminComment=ticket INC123 owner=ops gpuhc-jobs{n1/hang/1980/gpu1,n2/hang/1000/-}" in calls
    assert "requeuehold 8" in calls and "release 8" in calls


def test_no_owner_known_or_two_users_ask_slurm_nothing(tmp_path):
    for owners in (None, [], [1000, 1001]):
        d = tmp_path / str(len(owners or [None]) if owners is not None else "none")
        d.mkdir()
        fake, log, comment = fake_slurm(d)
        flow, lines = flow_for(d, str(fake))
        jobs_act.after_healthcheck(flow, report_of(hang(owners)))
        assert not log.exists(), owners
        assert len(lines) == 1 and "not its user's" in lines[0], lines


def test_on_the_recorded_json_answer_the_user_id_decides(tmp_path, monkeypatch):
    """Slurm 26.05's real answer for job 1: root's (user_id 0), running on n1."""
    text = (FIXTURES / "slurm_jobs" / "show-job-26.05.json").read_text()
    calls: list[list[str]] = []

    def answer(argv, timeout):
        calls.append(argv)
        return 0, text, ""

    real = JobControl.from_section.__func__

    def recorded(cls, *a, **k):
        ctl = real(cls, *a, **k)
        ctl.run = answer
        return ctl

    monkeypatch.setattr(JobControl, "from_section", classmethod(recorded))
    for owners, written in (([1000], False), ([0], True)):
        calls.clear()
        d = tmp_path / str(owners[0])
        d.mkdir()
        flow, lines = flow_for(d, "scontrol")
        jobs_act.after_healthcheck(flow, report_of(hang(owners, job="1")))
        updates = [c for c in calls if "update" in c]  # the recording never changes: the write is tried again
        assert bool(updates) is written and all(c[:3] == ["scontrol", "update", "JobId=1"] for c in updates), calls
        assert any("not its user's" in x and "Slurm: uid 0" in x for x in lines) is not written, lines


def test_only_a_job_slurm_runs_here_for_its_owner_is_confirmed_for_the_culprit_count(tmp_path):
    """The jobs check's culprit memory (gpuhc/checks/jobs.py) counts a job only once the Slurm
    side confirmed it: Slurm says uid 1000 runs job 8 here."""
    from gpuhc.state.node import StateStore

    for owner, confirmed in ((1000, True), (1001, False)):
        d = tmp_path / str(owner)
        d.mkdir()
        fake, log, comment = fake_slurm(d)
        flow, lines = flow_for(d, str(fake))
        with StateStore(flow.opts.state_dir).transaction() as doc:
            doc["checks"] = {"jobs": {"culprits": {"8": {"time": 1990.0, "gpus": [1], "user": owner}}}}
        jobs_act.after_healthcheck(flow, report_of(hang([owner])))
        entry = StateStore(flow.opts.state_dir).read()["checks"]["jobs"]["culprits"]["8"]
        assert (entry.get("confirmed") == owner) is confirmed, entry
