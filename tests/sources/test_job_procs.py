"""The host side of a job's processes (issue 32): /proc/<pid>/stat and io as the kernel writes
them (tests/fixtures/jobs/proc, read from real processes), and what a reader makes of them."""

from __future__ import annotations

import shutil

import pytest

from gpuhc.sources import job_procs as jp
from tests.helpers.paths import FIXTURES

PROC = FIXTURES / "jobs" / "proc"


def put(root, pid: int, name: str) -> None:
    d = root / str(pid)
    d.mkdir(exist_ok=True)
    shutil.copy(PROC / f"{name}.stat", d / "stat")
    shutil.copy(PROC / f"{name}.io", d / "io")


@pytest.mark.parametrize("name,state,ticks", [("writer-1", "R", 21), ("writer-2", "R", 34), ("sleeper", "S", 0),
                                              ("spinner", "R", 72)])
def test_parse_stat_real(name, state, ticks):
    assert jp.parse_stat((PROC / f"{name}.stat").read_text()) == (state, ticks)


def test_parse_stat_name_with_spaces_and_parentheses_and_damage():
    line = (PROC / "spinner.stat").read_text().replace("(python3)", "(a) b) (c)")
    assert jp.parse_stat(line) == ("R", 72)
    assert jp.parse_stat("123 (x) R 1 2") is None
    assert jp.parse_stat("") is None
    assert jp.parse_stat(line.replace(" 71 1 ", " -1 1 ")) is None


def test_parse_io_real():
    assert jp.parse_io((PROC / "writer-2.io").read_text()) == (1353168, 1008730112)
    assert jp.parse_io("rchar: 5\n") == (5, None)
    assert jp.parse_io("rchar: x\nwchar: -3\n") == (None, None)


def test_job_env():
    env = b"PATH=/bin\0SLURM_JOB_NUM_NODES=1\0SLURM_JOB_NAME=pp-stage\x1b[31m\0SLURM_PROCID=2\0RANK=7\0"
    assert jp.job_env(env) == jp.JobEnv(1, "pp-stage[31m", 2)
    assert jp.job_env(b"SLURM_NNODES=4\0RANK=0\0") == jp.JobEnv(4, None, 0)
    assert jp.job_env(b"SLURM_JOB_NUM_NODES=0\0SLURM_JOB_NUM_NODES=x\0RANK=-1\0") == jp.JobEnv(None, None, None)


def test_writer_read_twice_makes_progress_sleeper_none(tmp_path):
    put(tmp_path, 10, "writer-1")
    put(tmp_path, 20, "sleeper")
    t = iter([100.0, 100.0, 100.5, 100.5, 101.0])
    s = jp.HostSampler(str(tmp_path), clock=lambda: next(t))
    first = s.take([10, 20])
    put(tmp_path, 10, "writer-2")
    second = s.take([10, 20])
    w = jp.summarise([10], second, first)
    assert w["host_state"] == "R" and w["host_dt_s"] == 0.5
    assert w["host_cpu_s"] == pytest.approx(0.13) and w["host_write_bytes"] == 1008730112 - 522190848
    z = jp.summarise([20], second, first)
    assert z["host_cpu_s"] == 0 and z["host_write_bytes"] == 0 and z["host_state"] == "S"
    both = jp.summarise([10, 20], second, first)
    assert both["host_state"] == "R" and both["host_cpu_total_s"] == pytest.approx(0.34)


def test_previous_only_for_the_same_recent_processes(tmp_path):
    put(tmp_path, 10, "sleeper")
    now = [1000.0]
    s = jp.HostSampler(str(tmp_path), clock=lambda: now[0])
    s.keep(s.take([10]))
    assert s.previous([10]) is not None
    assert s.previous([10, 11]) is None  # a new process: no baseline for it
    now[0] += jp.MAX_AGE_S + 1
    assert s.previous([10]) is None


def test_gone_process_and_a_link_are_not_read(tmp_path):
    s = jp.HostSampler(str(tmp_path))
    assert s.take([999]) == {}
    put(tmp_path, 5, "sleeper")
    (tmp_path / "6").mkdir()
    (tmp_path / "6" / "stat").symlink_to(tmp_path / "5" / "stat")
    assert set(s.take([5, 6])) == {5}
    assert jp.summarise([6], {}, None) == {}


def test_a_state_letter_proc5_does_not_list_is_left_out_not_guessed(tmp_path):
    put(tmp_path, 7, "sleeper")
    (tmp_path / "7" / "stat").write_text((PROC / "sleeper.stat").read_text().replace(") S ", ") Q ", 1))
    s = jp.HostSampler(str(tmp_path))
    got = jp.summarise([7], s.take([7]), None)
    assert got["host_state"] is None and got["host_cpu_total_s"] == 0.0
