"""`gpuhc sweep submit` as cron runs it: a job sbatch refused makes the command fail (exit 3),
so cron's mail or the timer's failed state shows it (it once said "submitted 0 of 2" and exit 0)."""

from __future__ import annotations

from click.testing import CliRunner

import gpuhc.fleet.gather
import gpuhc.sweep.slurmcli
from gpuhc.cli import cli
from tests.helpers.sweep_slurm import FakeSlurm


class Refusing(FakeSlurm):
    def run_stdin(self, argv, timeout, stdin):
        return 1, "", "sbatch: error: Invalid account or account/partition combination specified"


def submit(tmp_path, monkeypatch, fake: FakeSlurm):
    monkeypatch.setattr(gpuhc.sweep.slurmcli.SlurmCli, "from_config", classmethod(lambda cls, config: fake.cli()))
    monkeypatch.setattr(gpuhc.fleet.gather, "suspects_for_sweep", lambda config, note: [])
    config = tmp_path / "gpuhc.yaml"
    config.write_text(f"sweep:\n  results_dir: {tmp_path / 'results'}\n  partitions: [gpu]\n")
    return CliRunner().invoke(cli, ["sweep", "submit", "--config", str(config), "--state-dir", str(tmp_path / "s")])


def test_a_refused_sbatch_fails_the_command(tmp_path, monkeypatch):
    res = submit(tmp_path, monkeypatch, Refusing())
    assert res.exit_code == 3, res.output
    assert "submitted 0 of 2 jobs" in res.output and "Invalid account" in res.output


def test_submitted_jobs_exit_0(tmp_path, monkeypatch):
    res = submit(tmp_path, monkeypatch, FakeSlurm())
    assert res.exit_code == 0 and "submitted 2 of 2 jobs" in res.output, res.output


def test_no_results_dir_is_said_not_silent(tmp_path, monkeypatch):
    monkeypatch.setattr(gpuhc.sweep.slurmcli.SlurmCli, "from_config", classmethod(lambda cls, config: FakeSlurm().cli()))
    monkeypatch.setattr(gpuhc.fleet.gather, "suspects_for_sweep", lambda config, note: [])
    config = tmp_path / "gpuhc.yaml"
    config.write_text("sweep:\n  partitions: [gpu]\n")
    res = CliRunner().invoke(cli, ["sweep", "submit", "--config", str(config), "--state-dir",
                                   str(tmp_path / "s")])
    assert res.exit_code == 0, res.output
    assert f"sweep.results_dir is not set: results go to {tmp_path / 's'}" in res.stderr, res.stderr
