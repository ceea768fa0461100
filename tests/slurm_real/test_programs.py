"""Every Slurm program gpuhc runs is the one configured (``slurm.<program>``) and is killed at its
timeout: the fleet commands and the sweep included (issue 22, "One path for Slurm commands";
docs/slurm.md, "Slurm's programs").

The programs here are small shell scripts in a temporary directory standing in for Slurm's
clients: each records the argv it was run with (and its pid), then prints a fixed answer or
hangs. They are found only through the config, never on PATH, so a bare-name call would fail."""

from __future__ import annotations

import json
import os
import time

import pytest
from click.testing import CliRunner

from gpuhc.cli import cli
from gpuhc.config.load import load_config
from gpuhc.errors import SlurmUnreachable
from gpuhc.fleet import gather
from gpuhc.model.deadline import Deadline
from gpuhc.slurm.act.command import PROGRAMS
from gpuhc.slurm.act.scontrol import Scontrol
from gpuhc.sweep.slurmcli import SlurmCli
from tests.helpers.paths import REPO

HANG = "exec sleep 60\n"


def fake(bindir, name: str, answer: str = "", body: str | None = None) -> str:
    """A stand-in ``name`` in ``bindir``: appends its argv to ``<name>.argv`` and its pid to
    ``<name>.pid``, then prints ``answer`` (or runs ``body``)."""
    path = bindir / f"fake-{name}"
    log = bindir / f"{name}.argv"
    script = (f'#!/bin/sh\necho "$*" >> {log}\necho $$ > {bindir / (name + ".pid")}\n'
              + (body if body is not None else f"printf '%s' '{answer}'\n"))
    path.write_text(script)
    path.chmod(0o755)
    return str(path)


def ran(bindir, name: str) -> list[str]:
    log = bindir / f"{name}.argv"
    return log.read_text().splitlines() if log.exists() else []


def config_file(tmp_path, programs: dict[str, str], extra: str = "") -> str:
    lines = ["slurm:"] + [f"  {name}: {path}" for name, path in programs.items()]
    p = tmp_path / "gpuhc.yaml"
    p.write_text("\n".join(lines) + "\n" + extra)
    return str(p)


@pytest.fixture
def bindir(tmp_path):
    d = tmp_path / "bin"
    d.mkdir()
    return d


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_every_program_is_a_config_key():
    from gpuhc.slurm.settings import SCHEMA

    assert [p for p in PROGRAMS if p not in SCHEMA] == []


def test_scontrol_from_section_runs_the_configured_programs(bindir, tmp_path):
    sinfo = fake(bindir, "sinfo", "")  # no record: the node is then asked of scontrol
    scontrol = fake(bindir, "scontrol", "NodeName=n1 State=IDLE Partitions=gpu\n")
    config = load_config(config_file(tmp_path, {"scontrol": scontrol, "sinfo": sinfo}, "  timeout_s: 7\n"))
    sc = Scontrol.from_section(config.section("slurm"), deadline=Deadline.after(30))
    assert sc.timeout_s == 7.0
    assert sc.node("n1").name == "n1"
    assert [argv[0] for argv in sc.calls] == [sinfo, scontrol]
    assert ran(bindir, "scontrol") == ["show node -o n1"] and len(ran(bindir, "sinfo")) == 1


def test_fleet_suspects_runs_the_configured_sacct(bindir, tmp_path):
    sacct = fake(bindir, "sacct", "")
    res = CliRunner().invoke(cli, ["fleet", "suspects", "--json", "--config",
                                   config_file(tmp_path, {"sacct": sacct})])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["nodes"] == []
    [argv] = ran(bindir, "sacct")
    assert argv.startswith("--allusers ")


def test_fleet_stats_runs_the_configured_sacctmgr_and_sinfo(bindir, tmp_path):
    sacctmgr = fake(bindir, "sacctmgr", "")
    sinfo = fake(bindir, "sinfo", "n1|gpu\n")
    res = CliRunner().invoke(cli, ["fleet", "stats", "--json", "--since", "1d", "--config",
                                   config_file(tmp_path, {"sacctmgr": sacctmgr, "sinfo": sinfo})])
    assert res.exit_code == 0, res.output
    assert "sources: sacctmgr show event" in json.loads(res.output)["notes"]
    assert len(ran(bindir, "sacctmgr")) == 1 and ran(bindir, "sinfo") == ["--noheader --Node --format %N|%R"]


def test_fleet_kills_a_hanging_sacct_at_its_timeout(bindir, tmp_path):
    sacct = fake(bindir, "sacct", body=HANG)
    config = load_config(config_file(tmp_path, {"sacct": sacct}, "fleet:\n  sacct_timeout_s: 1\n"))
    t0 = time.monotonic()
    with pytest.raises(SlurmUnreachable, match="sacct .*no answer within 1.0s"):
        gather.find_suspects(config, 86400.0)
    assert time.monotonic() - t0 < 10
    assert gone(int((bindir / "sacct.pid").read_text()))


def test_sweep_submit_runs_the_configured_sinfo_squeue_and_scontrol(bindir, tmp_path):
    progs = {"sinfo": fake(bindir, "sinfo", "n1|idle|gpu\nn2|idle|gpu\n"), "squeue": fake(bindir, "squeue", ""),
             "scontrol": fake(bindir, "scontrol", "")}
    extra = f"sweep:\n  results_dir: {tmp_path / 'results'}\nfleet:\n  suspects:\n    sweep_first: false\n"
    res = CliRunner().invoke(cli, ["sweep", "submit", "--dry-run", "--json", "--state-dir", str(tmp_path / "state"),
                                   "--config", config_file(tmp_path, progs, extra)])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["groups"][0]["nodes"] == ["n1", "n2"]
    assert ran(bindir, "scontrol") == ["show topology"]
    assert ran(bindir, "sinfo")[0].startswith("-h -N -o %N|%T|%P") and ran(bindir, "squeue")[0].startswith("-h -u ")


def test_sweep_sbatch_runs_the_configured_sbatch(bindir, tmp_path):
    sbatch = fake(bindir, "sbatch", "4242\n", body="cat > /dev/null\nprintf '4242\\n'\n")
    config = load_config(config_file(tmp_path, {"sbatch": sbatch}))
    cli_ = SlurmCli.from_config(config)
    assert cli_.timeout_s == SlurmCli.timeout_s  # the sweep keeps its own per-call timeout
    assert cli_.sbatch(["sbatch", "--parsable", "--job-name=x"], "#!/bin/sh\n") == "4242"
    assert ran(bindir, "sbatch") == ["--parsable --job-name=x"]


def test_sweep_kills_a_hanging_squeue_at_its_timeout(bindir, tmp_path):
    squeue = fake(bindir, "squeue", body=HANG)
    config = load_config(config_file(tmp_path, {"squeue": squeue}))
    t0 = time.monotonic()
    with pytest.raises(SlurmUnreachable, match="squeue .*no answer within 1.0s"):
        SlurmCli.from_section(config.section("slurm"), timeout_s=1.0).active_jobs("gpuhc-sweep")
    assert time.monotonic() - t0 < 10
    assert gone(int((bindir / "squeue.pid").read_text()))


def test_a_missing_program_names_its_config_key(tmp_path):
    config = load_config(config_file(tmp_path, {"sacctmgr": str(tmp_path / "nowhere" / "sacctmgr")}))
    with pytest.raises(SlurmUnreachable, match=r"slurm\.sacctmgr"):
        gather.slurm_command(config).call(["sacctmgr", "show", "event"])


# ---------------------------------------------------------------------------- on a real Slurm


@pytest.mark.slurm
def test_configured_programs_read_a_real_slurm(slurm_cluster, tmp_path):
    """drain-report and sweep submit through site wrappers named in the config, each of which
    notes its call and runs the release's real client: the answers are real Slurm's, on every
    release, and every program was the configured one."""
    import shutil
    import subprocess
    import sys

    import yaml

    c = slurm_cluster(nodes=("n1", "n2", "n3"))
    c.scontrol("update", "NodeName=n3", "State=DRAIN", "Reason=gpuhc: ecc gpu0 uncorrectable volatile 2")
    env = c.env(PYTHONPATH=str(REPO))
    site, log = tmp_path / "site", tmp_path / "ran.log"
    site.mkdir()
    programs = {}
    for name in ("scontrol", "sinfo", "squeue"):
        real = shutil.which(name, path=env["PATH"])
        wrapper = site / f"site-{name}"
        wrapper.write_text(f'#!/bin/sh\necho "{name} $*" >> {log}\nexec {real} "$@"\n')
        wrapper.chmod(0o755)
        programs[name] = str(wrapper)
    cfg = tmp_path / "gpuhc.yaml"
    cfg.write_text(yaml.safe_dump({"state_dir": str(tmp_path / "state"), "slurm": programs,
                                   "sweep": {"results_dir": str(tmp_path / "results"), "backend": "mpi",
                                             "ranks_per_node": 1, "group_size": 2},
                                   "fleet": {"suspects": {"sweep_first": False}}}))

    def gpuhc(*args):
        cp = subprocess.run([sys.executable, "-m", "gpuhc", *args, "--config", str(cfg)], env=env,
                            capture_output=True, text=True, timeout=120)
        assert cp.returncode == 0, cp.stdout + cp.stderr
        return json.loads(cp.stdout)

    report = gpuhc("drain-report", "--json")
    assert [(n["node"], n["owner"]) for n in report["nodes"]] == [("n3", "gpuhc")]
    plan = gpuhc("sweep", "submit", "--dry-run", "--json")
    assert [g["nodes"] for g in plan["groups"]] == [["n1", "n2"]]
    ran = [line.split(" ", 1)[0] + " " + " ".join(line.split()[1:3]) for line in log.read_text().splitlines()]
    assert ran == ["scontrol --all --oneliner", "scontrol show topology", "squeue -h -u",
                   "sinfo -h -N", "scontrol show topology"], ran
