"""README's admin-host set-up, verbatim, in a clean Debian 12 root; then the sweep's cron line,
as cron would run it (its user, SHELL and PATH), submitting probes to a real Slurm.

The root is Debian 12 minbase with python3, pip and Debian's Slurm 22.05 (daemons and clients,
as an admin host with a local test cluster would have them). The test cluster's munged,
slurmctld and slurmds run inside that very root (tests/helpers/slurm_release.py's chroot runtime), so
Slurm knows the `gpuhc` user install.sh made there, by the uid it got there, as a site's
controller knows its users. The root's cron daemon is not started: the line it would run is.
"""

from __future__ import annotations

import re
import shlex
import subprocess

import pytest

from tests.helpers.slurm_cluster import SlurmCluster
from tests.helpers.slurm_release import SlurmRelease
from tests.helpers.debian_root import ENV, build_base, clean_root, readme_block

pytestmark = pytest.mark.install

HEADING = "### systemd timer or cron: fabric probes (one admin host)"


def test_readme_admin_host_setup_then_a_sweep_as_gpuhc_against_real_slurm(tmp_path):
    base = build_base("bookworm-admin", "python3,python3-pip,slurmctld,slurmd,slurm-client,munge,procps")
    root = tmp_path / "root"
    run = clean_root(base, root)

    setup = readme_block(HEADING, 0)
    assert "install.sh --admin-host" in setup
    cp = run(setup)
    assert cp.returncode == 0, f"README admin-host lines failed:\n{setup}\n{cp.stdout}\n{cp.stderr}"
    assert "ensurepip" not in cp.stdout + cp.stderr  # Debian's alarm on the path that succeeds

    # What it made: the account, its state directory and log, the cron file and the lock's directory.
    cp = run("getent passwd gpuhc; stat -c '%U:%G %a %n' /var/lib/gpuhc/sweep /var/log/gpuhc/sweep.log /run/gpuhc "
             "/var/log/gpuhc /var/lib/gpuhc /etc/cron.d/gpuhc-sweep")
    assert cp.returncode == 0, cp.stderr
    passwd, *stats = cp.stdout.splitlines()
    assert passwd.startswith("gpuhc:") and passwd.endswith(":/usr/sbin/nologin")
    assert stats == ["gpuhc:gpuhc 755 /var/lib/gpuhc/sweep", "gpuhc:gpuhc 640 /var/log/gpuhc/sweep.log",
                     "gpuhc:gpuhc 755 /run/gpuhc", "root:root 755 /var/log/gpuhc", "root:root 755 /var/lib/gpuhc",
                     "root:root 644 /etc/cron.d/gpuhc-sweep"]
    # The logrotate file every node gets names no user.
    assert not re.search(r"^\s*su\s", (root / "etc/logrotate.d/gpuhc").read_text(), re.M)

    # A cluster of two idle GPU nodes in partition gpu, run by the root's own Slurm.
    # (The class, not the fixture: the fixture's release matrix would run this one root thrice.)
    with SlurmCluster(tmp_path / "cluster", nodes=("n1", "n2"), gpus_per_node=8, release=SlurmRelease("22.05", root)) as c:
        sweep_as_gpuhc(c, root, run)


def sweep_as_gpuhc(c: SlurmCluster, root, run) -> None:
    (root / "etc/slurm").mkdir(exist_ok=True)
    (root / "etc/slurm/slurm.conf").write_text(c.conf_path.read_text())  # where the clients look by default

    # The cron line as cron runs it: as the user it names, through SHELL, with the file's PATH.
    cron = (root / "etc/cron.d/gpuhc-sweep").read_text()
    env = dict(re.findall(r"^([A-Z]+)=(.*)$", cron, re.M))
    line = next(ln for ln in cron.splitlines() if ln.startswith("*/30"))
    fields = line.split(None, 6)
    user, command = fields[5], fields[6]
    assert user == "gpuhc"
    argv = c.runtime.wrap(["/usr/sbin/runuser", "-u", user, "--", "/usr/bin/env", "-i",
                           *(f"{k}={v}" for k, v in env.items()), "HOME=/var/lib/gpuhc/sweep",
                           env["SHELL"], "-c", command])
    # A fresh install observes (README, "Observe, then enforce"): the run says what it would
    # submit, sends nothing, and is no failure for cron.
    cp = subprocess.run(argv, env=ENV, capture_output=True, text=True, timeout=300)
    log = (root / "var/log/gpuhc/sweep.log").read_text()
    assert cp.returncode == 0, f"{shlex.join(argv)}\n{cp.stdout}{cp.stderr}\n{log}"
    assert re.search(r"^observe mode \(slurm.mode: observe\): would submit 1 probe job\(s\)", log, re.M), log
    assert c.scontrol("show", "job", "-o").stdout.strip() in ("", "No jobs in the system"), "a job in observe mode"

    # Live: the config's one line, as the README says.
    conf = root / "etc/gpuhc/gpuhc.yaml"
    text = conf.read_text()
    assert re.search(r"^  mode: observe ", text, re.M), text
    conf.write_text(re.sub(r"^  mode: observe ", "  mode: enforce ", text, flags=re.M))
    cp = subprocess.run(argv, env=ENV, capture_output=True, text=True, timeout=300)
    log = (root / "var/log/gpuhc/sweep.log").read_text()
    assert cp.returncode == 0, f"{shlex.join(argv)}\n{cp.stdout}{cp.stderr}\n{log}"
    assert "Permission denied" not in log and "Traceback" not in log, log

    # One probe job (two idle nodes, group_size 2) went to Slurm as gpuhc; the sweep's memory is gpuhc's.
    assert re.search(r"^submitted 1 of 1 jobs for sweep \S+ round 0$", log, re.M), log
    jobs = c.scontrol("show", "job", "-o").stdout.splitlines()  # finished ones too (MinJobAge)
    assert len(jobs) == 1 and re.search(r"\bUserId=gpuhc\(\d+\)", jobs[0]) and "JobName=gpuhc-sweep" in jobs[0], jobs
    owned = run("ls /var/lib/gpuhc/sweep; find /var/lib/gpuhc/sweep -mindepth 1 ! -user gpuhc")
    assert owned.returncode == 0, owned.stderr
    assert "sweeps" in owned.stdout.split() and not [p for p in owned.stdout.split() if p.startswith("/")], owned.stdout
