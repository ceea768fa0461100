"""A bad link that hangs job after job until found (bench/campaign_model, docs/campaign.md
"Faults" and "People"): the fault does not end with its job, every job on its node stalls and
is killed by NCCL's watchdog, the epilog's p2p and nccl-local tasks time out or measure the link
slow, and the users' reports take the black hole out when nothing of gpuhc does. Each test can
fail: let the watchdog end the fault again and the hung jobs drop to one. The tests that depend
on what gpuhc judges (SHIPPED_STALL) say it in one place, to move when gpuhc does."""

from __future__ import annotations

import random
import re
import sys

import pytest
from tests.helpers.paths import REPO

sys.path.insert(0, str(REPO / "bench"))

from campaign_model import active_gpu as A  # noqa: E402
from campaign_model import faults as F  # noqa: E402
from campaign_model import people as P  # noqa: E402
from campaign_model import sim  # noqa: E402
from campaign_model.metrics import compute  # noqa: E402
from campaign_model.policies import config_for  # noqa: E402

STALL_AT_S = 120.0
NO_ACTIVE = {"active": {"enabled": False}}  # a site without gpuhc[gpu]: the epilog's passive checks only


def link(monkeypatch, epilog, keep=0.5):
    """Every bad link of this campaign drawn at this strength (faults.strength)."""
    real = F.strength
    monkeypatch.setattr(F, "strength", lambda cls, rng: (
        {"stall_at_s": STALL_AT_S, "epilog": epilog, "keep": keep} if cls.hangs_jobs else real(cls, rng)))


def run(tmp_path, jobs, extra=None, days=2.0, nodes=1, inject=None):
    """One quiet node (no noise, no stream) with a bad link from 300 s and the jobs given."""
    inject = [(300, "nvlink-hang", "gpu001", False)] if inject is None else inject
    return sim.Campaign(config_for("shipped", tmp_path, extra), tmp_path, nodes=nodes, days=days, seed=3,
                        inject=inject, load=0.0, jobs=jobs, noise=False).run()


def every_half_hour(n, users=None, size=1, nodes=("gpu001",)):
    """``n`` jobs of 20 min, one every 30 min from 600 s, pinned; ``users`` their uids (distinct by default)."""
    users = users or [1000 + k for k in range(n)]
    return [(600 + 1800 * k, size, 1200.0, nodes, users[k]) for k in range(n)]


def test_a_bad_link_hangs_every_job_until_found(tmp_path, monkeypatch):
    # Nothing of gpuhc sees the link here (no active checks): every job started on the node
    # stalls 120 s in and waits for NCCL's watchdog, job after job; the fault stays. Its users
    # report it once three of them hung within a day, and a person takes the node a working
    # day later: every job before that hung.
    link(monkeypatch, "stall")
    c = run(tmp_path, every_half_hour(12), NO_ACTIVE)
    m = compute(c)
    [f] = [f for f in c.faults if f.cls.name == "nvlink-hang"]
    assert c.stats.jobs["hung"] == c.stats.jobs["started"] == 12
    assert {fid for _, fid, *_ in c.stats.hangs} == {f.id} and f.how != "the job ended"
    assert m["escapes"]["by_class"] == {"nvlink-hang": 12}
    assert m["faults_never_drained"] == {"nvlink-hang": 1}  # gpuhc never drained it
    h = m["hanging_faults"]["nvlink-hang"]
    assert (h["hung_jobs"], h["repeat_hangs"]) == (12, 11)
    assert m["gpu_hours_lost"]["by_why"]["hang (repeat, nvlink-hang)"] == pytest.approx(
        11 * 8 * (600 + STALL_AT_S) / 3600, abs=0.2)  # the watchdog's 600 s and the work before the stall
    assert m["gpu_hours_lost"]["by_why"]["hang (NCCL timeout)"] == pytest.approx(8 * 600 / 3600, abs=0.1)


# What shipped gpuhc does with a link that stalls the epilog's p2p and nccl-local tasks: gpuhc's
# gpu-link-stall (gpuhc/active/stall.py) reads a time-out of a link task while the burn-in
# computed as a FAIL, held two epilogs in a row (evidence.link): the second hung job's epilog
# drains. Before that rule a time-out was ERROR, which never drains, and the users' reports
# took the node out a working day after the third user's hang (every job until then hung).
SHIPPED_STALL = {"out_by": "gpuhc: nccl-local", "hung_jobs": 2}


def test_what_shipped_gpuhc_does_with_a_link_that_stalls_the_epilog(tmp_path, monkeypatch):
    link(monkeypatch, "stall")
    sessions = []
    real_stand_in = sim.stand_in

    def recording(*a):
        run_tasks = real_stand_in(*a)

        def wrapped(*args, **kw):
            sessions.append(run_tasks(*args, **kw))
            return sessions[-1]
        return wrapped

    monkeypatch.setattr(sim, "stand_in", recording)
    c = run(tmp_path, every_half_hour(96))
    m = compute(c)
    h = m["hanging_faults"]["nvlink-hang"]
    assert h["out_by"] == {SHIPPED_STALL["out_by"]: 1} and h["hung_jobs"] == SHIPPED_STALL["hung_jobs"], h
    # whoever takes it out, within the users' working day after the third hang; the hangs stop there
    assert h["hours_to_out"]["max"] <= 1.0 + P.REPORTS_WINDOW_S / 3600 + 0.5, h
    assert c.stats.jobs["hung"] == h["hung_jobs"] == c.stats.jobs["started"]  # each job there hung, none after
    # every epilog on the node ran its p2p and nccl-local tasks, and each timed out (the one
    # other run of the active checks is the campaign's healthy probe, sim._check_healthy)
    stalled = [s for s in sessions if s.outcomes["p2p"].status != "done"]
    assert len(stalled) == h["hung_jobs"] and len(sessions) == len(stalled) + 1
    for s in stalled:
        for task in A.STALLS:
            o = s.outcomes[task]
            assert o.status in ("timeout", "skipped") and re.fullmatch(r"(timed out after|not run:) .*", o.message)
        assert s.outcomes["p2p"].status == "timeout"
        assert s.outcomes["burnin"].status == "done"


def test_a_slow_link_is_drained_at_the_first_epilog(tmp_path, monkeypatch):
    # The link carries data at half its peers' rate: the first epilog's p2p fails the pair
    # (drain + hardware ticket) and the all-reduce's bandwidth with it; one job hung first.
    link(monkeypatch, "slow", keep=0.5)
    c = run(tmp_path, every_half_hour(8), days=0.5)
    m = compute(c)
    drains = [r for _, _, w, r in c.slurm.events if w == "drain"]
    assert len(drains) == 1 and "p2p" in drains[0], drains
    h = m["hanging_faults"]["nvlink-hang"]
    assert (h["hung_jobs"], h["repeat_hangs"]) == (1, 0) and m["faults_never_drained"] == {}
    assert h["hours_to_out"]["max"] < (600 + 600 + 60) / 3600, h  # the watchdog, then the epilog


def test_a_slow_link_measures_its_strength_in_the_pair_and_the_all_reduce():
    kinds = {"link": {"stall_at_s": 60.0, "epilog": "slow", "keep": 0.4}}
    p2p = A.measure("p2p", kinds, random.Random(1))
    healthy = A.healthy("p2p")
    a, b = F.LINK_PAIR
    for pair, v in p2p["pairs"].items():
        want = 0.4 if pair in (f"{a}->{b}", f"{b}->{a}") else 1.0
        assert v["gbps"] == pytest.approx(healthy["pairs"][pair]["gbps"] * want, abs=0.1)
    assert A.measure("nccl", kinds, random.Random(1))["busbw_gbps"] == pytest.approx(
        A.healthy("nccl")["busbw_gbps"] * 0.4, abs=0.1)


def test_users_reports_take_a_black_hole_out_once_three_users_hung(tmp_path, monkeypatch):
    # One user's jobs hanging again and again is that user's to find (their code, their
    # framework): no report. A second and a third user's hangs on the same node within a day
    # are: a person takes the node a working day later and repairs the link.
    link(monkeypatch, "stall")
    users = [1001] * 6 + [1002, 1003] + [1004] * 60
    c = run(tmp_path, every_half_hour(len(users), users), NO_ACTIVE, days=2.0)
    m = compute(c)
    third = T_of(c, 8)  # the eighth job's hang: the third distinct user
    reports = [(t, n, k) for t, n, k, _ in c.stats.human]
    assert reports == [(third + P.People.HUMAN_AFTER_S, "gpu001", "hang reported by users")], reports
    assert [w for _, _, w, _ in c.slurm.events] == ["admin-drain"]
    assert m["hanging_faults"]["nvlink-hang"]["out_by"] == {"person (users' reports)": 1}
    [f] = [f for f in c.faults if f.cls.name == "nvlink-hang"]
    assert f.how is None or f.how.startswith("a person")  # the repair runs on after the horizon, or done


def T_of(c, job_id):
    return next(t for t, _, jid, *_ in c.stats.hangs if jid == job_id)


def test_one_users_hangs_are_never_reported(tmp_path, monkeypatch):
    link(monkeypatch, "stall")
    c = run(tmp_path, every_half_hour(40, [1001] * 40), NO_ACTIVE, days=1.0)
    assert c.stats.jobs["hung"] == 40 and not c.stats.human and not c.slurm.events


def test_a_bad_link_hangs_every_multi_node_job_it_is_part_of(tmp_path, monkeypatch):
    # A two-node job with the bad link on one of its nodes hangs whole. The users name both
    # nodes of each hung job; only the bad one is in three users' hung jobs (its partners
    # change), so only it is reported.
    link(monkeypatch, "stall")
    jobs = [(600 + 1800 * k, 2, 1200.0, ("gpu001", f"gpu00{2 + k % 3}"), 1000 + k) for k in range(6)]
    c = run(tmp_path, jobs, NO_ACTIVE, days=2.0, nodes=4)
    assert c.stats.jobs["hung"] == 6
    m = compute(c)
    assert m["gpu_hours_lost"]["by_why"]["hang (repeat, nvlink-hang)"] == pytest.approx(
        5 * 16 * (600 + STALL_AT_S) / 3600, abs=0.2)
    assert [(n, k) for _, n, k, _ in c.stats.human] == [("gpu001", "hang reported by users")]


def test_a_stalled_ib_path_hangs_only_multi_node_jobs_and_no_check_of_the_node_sees_it(tmp_path, monkeypatch):
    # A NIC path that stalls without counting errors: the node's one-node jobs (NVLink only)
    # run and end; every job that spans it hangs. The shipped epilog passes (its all-reduce is
    # one node's), so only the users' reports take it out: gpuhc never drains it.
    link(monkeypatch, "stall")
    jobs = []
    for k in range(12):
        if k % 2:
            jobs.append((600 + 1800 * k, 2, 1200.0, ("gpu001", f"gpu00{2 + k % 3}"), 1000 + k))
        else:
            jobs.append((600 + 1800 * k, 1, 1200.0, ("gpu001",), 1000 + k))
    c = run(tmp_path, jobs, days=2.0, nodes=4, inject=[(300, "ib-hang", "gpu001", False)])
    m = compute(c)
    assert (c.stats.jobs["hung"], c.stats.jobs["done"]) == (6, 6)
    assert {c.jobs[jid].size for _, _, jid, *_ in c.stats.hangs} == {2}
    assert m["escapes"]["by_class"] == {"ib-hang": 6}  # the one-node jobs it could not hurt are none
    assert m["faults_never_drained"] == {"ib-hang": 1} and not [e for e in c.slurm.events if e[2] == "drain"]
    h = m["hanging_faults"]["ib-hang"]
    assert (h["hung_jobs"], h["repeat_hangs"], h["out_by"]) == (6, 5, {"person (users' reports)": 1})


def test_the_jobs_check_reads_a_stall_and_says_every_rank_waits(tmp_path, monkeypatch):
    # While a job hangs, its node's health check reads every GPU spinning in the collective (a
    # real hang's samples, job_activity.py): gpuhc's jobs check calls it a hang at both slots
    # before the watchdog, and names no culprit GPU, since none is idle. Its repeat-culprit
    # rule, which counts named culprits only, can never count a bad link's all-spin hangs.
    link(monkeypatch, "stall")
    c = run(tmp_path, every_half_hour(3), NO_ACTIVE, days=0.1)
    m = compute(c)
    assert c.stats.jobs["hung"] == 3
    assert m["jobs_check_on_hangs"] == {"warn, culprit none named": 6}
    assert not c.slurm.events
