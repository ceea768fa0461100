"""README.md's install lines, verbatim, on a fresh Debian 12 that has only Debian's python3 and
pip (no python3-venv, nothing from PyPI, PEP 668's "externally managed" marker in place).

The chroot is built once with mmdebstrap (tests/matrix/build-chroot.sh's cache directory, suite
``bookworm-python``) and copied for every run, so each run starts from a clean system. The
checkout goes in as a clone would (tracked and unignored files only). pip inside the chroot
downloads from PyPI (the host's network, DNS settings and CA certificates; the host's pip
settings stay outside).
"""

from __future__ import annotations

import os
import re
import shlex

import pytest

from tests.helpers.debian_root import build_base, clean_root, readme_block

HEADING_ADMIN = "### systemd timer or cron: fabric probes (one admin host)"

pytestmark = pytest.mark.install



@pytest.fixture
def debian12(tmp_path):
    """A fresh copy of the Debian 12 chroot (python3 and pip only) with the checkout at /root/gpuhc."""
    return clean_root(build_base(), tmp_path / "root")


def test_readme_node_install_on_stock_debian12(debian12):
    # The system python refuses pip, as on every stock Debian 12: what the README must avoid.
    refused = debian12("python3 -m pip install --dry-run click")
    assert refused.returncode != 0 and "externally-managed-environment" in refused.stderr, refused.stderr

    install = readme_block("## Install on the GPU nodes")
    cp = debian12(install)
    assert cp.returncode == 0, f"README install lines failed in Debian 12:\n{install}\n{cp.stdout}\n{cp.stderr}"
    # no python3-venv here: the path that works must not print Debian's ensurepip alarm first
    assert "ensurepip" not in cp.stdout + cp.stderr, cp.stdout + cp.stderr
    assert "extras: none" in cp.stdout  # no NVIDIA driver in the chroot: no CuPy

    # What it left: gpuhc on PATH through the link, the shims, the config, the directories.
    cp = debian12("readlink /usr/local/bin/gpuhc; ls /usr/local/share/gpuhc/slurm; stat -c '%a %U' /etc/gpuhc/gpuhc.yaml "
                  "/var/lib/gpuhc /var/log/gpuhc; test -s /usr/share/bash-completion/completions/gpuhc")
    assert cp.returncode == 0, cp.stderr
    lines = cp.stdout.split()
    assert lines[0] == "/opt/gpuhc/bin/gpuhc"
    assert {"healthcheck.sh", "prolog.sh", "epilog.sh"} <= set(lines)
    assert "644 root" in cp.stdout and cp.stdout.count("755 root") == 2

    # The hook the config's example names is there, and runs (stdlib only).
    hook = debian12("/usr/local/sbin/gpuhc-slack-webhook --help")
    assert hook.returncode == 0 and "--url-file" in hook.stdout, hook.stdout + hook.stderr

    demo = debian12("gpuhc check --demo")
    assert demo.returncode == 0 and "PASS" in demo.stdout and "demo" in demo.stderr, demo.stdout + demo.stderr

    # The health-check shim as slurmd starts it: no environment but the node's name. A healthy
    # recording passes and sends nothing to Slurm (there is none here to send to).
    shim = debian12("env -i SLURMD_NODENAME=gpu001 /usr/local/share/gpuhc/slurm/healthcheck.sh "
                    "--nvml-scenario /root/gpuhc/examples/scenarios/healthy-8xh100.yaml")
    assert shim.returncode == 0, shim.stdout + shim.stderr
    # PASS, or WARN where the stock config's outputs need what a chroot lacks (node_exporter)
    assert re.search(r"gpuhc healthcheck gpu001: passive: (PASS|WARN) \(\d+ results, 0 failing", shim.stderr), shim.stderr
    sick = debian12("env -i SLURMD_NODENAME=gpu001 /usr/local/share/gpuhc/slurm/healthcheck.sh "
                    "--nvml-scenario /root/gpuhc/examples/scenarios/xid79-fallen-off-bus.yaml")
    assert sick.returncode == 1 and "FAIL" in sick.stderr, sick.stdout + sick.stderr


def test_root_reinstall_leaves_no_gap_for_the_health_check(debian12):
    """The node install run again over itself (README, "Upgrade"), with `gpuhc check --demo`
    started in a loop all the while: every run exits 0 (it once failed with "No such file or
    directory" while the venv was rebuilt in place), and the shims are never missing."""
    assert debian12(readme_block("## Install on the GPU nodes")).returncode == 0
    loop = ("rm -f /tmp/done; (sh install.sh > /tmp/reinstall.log 2>&1; echo $? > /tmp/done) & n=0; bad=0; "
            "while [ ! -s /tmp/done ]; do n=$((n+1)); gpuhc check --demo > /dev/null 2> /tmp/err || "
            "{ bad=$((bad+1)); tail -n 2 /tmp/err; }; [ -x /usr/local/share/gpuhc/slurm/prolog.sh ] || "
            "{ bad=$((bad+1)); echo shim missing; }; done; echo runs=$n bad=$bad install=$(cat /tmp/done)")
    cp = debian12(loop)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    last = cp.stdout.strip().splitlines()[-1]
    runs = int(last.split()[0].split("=")[1])
    assert runs >= 5 and last.endswith("bad=0 install=0"), cp.stdout
    assert debian12("ls /opt/gpuhc.releases | wc -l").stdout.strip() == "2"


def test_root_enforce_man_page_a_failed_install_and_rollback(debian12):
    """The node install (/opt/gpuhc, the same code path as --venv's tests in test_upgrade.py and
    test_venv.py): `--enforce` on a fresh node writes `mode: enforce` and the man page is
    installed; an upgrade that cannot reach the index leaves the release in use running; then
    `--rollback` points /opt/gpuhc back, writes the man page and completion again from the release
    it goes back to, and keeps the shims (they run whichever release /opt/gpuhc is)."""
    cp = debian12("sh install.sh --gpu none --enforce")
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert "slurm.mode enforce" in cp.stdout, cp.stdout
    cp = debian12("grep -c '^  mode: enforce ' /etc/gpuhc/gpuhc.yaml; head -n 3 /usr/local/share/man/man1/gpuhc.1")
    assert cp.returncode == 0 and cp.stdout.startswith("1\n.TH GPUHC 1") and ".SH NAME" in cp.stdout, cp.stdout + cp.stderr
    first = debian12("readlink /opt/gpuhc").stdout.strip()
    assert debian12("sh install.sh --gpu none").returncode == 0
    second = debian12("readlink /opt/gpuhc").stdout.strip()
    assert second != first and second.startswith("/opt/gpuhc.releases/")

    bad = debian12("PIP_CONFIG_FILE=/dev/null PIP_INDEX_URL=http://127.0.0.1:9/simple PIP_RETRIES=0 "
                   "PIP_DEFAULT_TIMEOUT=5 PIP_FIND_LINKS= sh install.sh --gpu none")
    assert bad.returncode == 2 and "/opt/gpuhc is as it was" in bad.stderr, bad.stdout + bad.stderr
    cp = debian12("readlink /opt/gpuhc; ls /opt/gpuhc.releases; gpuhc check --demo >/dev/null && echo ran")
    assert cp.stdout.split() == [second, *sorted(os.path.basename(r) for r in (first, second)), "ran"], cp.stdout

    # Stand-ins for the newer release's man page and completion, and the shims as installed.
    shims = "md5sum /usr/local/share/gpuhc/slurm/*.sh"
    before = debian12(shims).stdout
    assert debian12("echo newer > /usr/local/share/man/man1/gpuhc.1 && "
                    "echo newer > /usr/share/bash-completion/completions/gpuhc").returncode == 0
    cp = debian12("sh install.sh --rollback")
    assert cp.returncode == 0 and "stays for a roll forward" in cp.stdout, cp.stdout + cp.stderr
    cp = debian12(f"readlink /opt/gpuhc; {first}/bin/python -m gpuhc.cli.manpage | cmp - /usr/local/share/man/man1/gpuhc.1 "
                  "&& grep -c _gpuhc_completion /usr/share/bash-completion/completions/gpuhc")
    assert cp.returncode == 0 and cp.stdout.split()[0] == first and int(cp.stdout.split()[1]) > 0, cp.stdout + cp.stderr
    assert debian12(shims).stdout == before
    shim = debian12("env -i SLURMD_NODENAME=gpu001 /usr/local/share/gpuhc/slurm/healthcheck.sh "
                    "--nvml-scenario /root/gpuhc/examples/scenarios/xid79-fallen-off-bus.yaml")
    assert shim.returncode == 1 and "FAIL" in shim.stderr, shim.stdout + shim.stderr  # the older release judges


def test_readme_try_it_on_stock_debian12(debian12):
    """README's "see it work" line, as a user who just cloned the repository would run it."""
    cp = debian12(readme_block("## Try it"))
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert "PASS" in cp.stdout and "demo" in cp.stderr


@pytest.mark.parametrize("layout,logdir", [("debian", "/var/log/gpuhc"), ("ubuntu", "/var/lib/gpuhc/log")])
def test_shipped_config_runs_on_debian_and_ubuntu_log_layouts(debian12, layout, logdir):
    """One shipped config; install.sh picks the log directory. Ubuntu's /var/log is root:syslog
    0775 (group-writable), where gpuhc as root refuses to append: the Debian root is given that
    mode (with group adm: minbase has no syslog group; the rule looks at the mode) and must get
    /var/lib/gpuhc/log. The run is a CPU node's, as slurm.conf gives cpu001 no GPU: live,
    so the event log, the decision log and the textfile are all written."""
    if layout == "ubuntu":
        assert debian12("chgrp adm /var/log && chmod 0775 /var/log").returncode == 0
    cp = debian12(readme_block("## Install on the GPU nodes"))
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert f"logs in {logdir}, metrics in /var/lib/prometheus/node-exporter" in cp.stdout
    config = debian12("cat /etc/gpuhc/gpuhc.yaml").stdout
    assert f"event_log: {logdir}/events.jsonl" in config and f"log_file: {logdir}/slurm.log" in config
    assert debian12("gpuhc config validate").returncode == 0

    # The host's /dev/kmsg, which the chroot shares, carries driver-like lines other tests plant
    # on purpose (tests/sources/test_kernel_log_realkernel.py): this node reads an empty recorded log.
    assert debian12("touch /root/kernel.log && printf '  - match: cpu001\\n    sources:\\n      kernel_log: "
                    "/root/kernel.log\\n' >> /etc/gpuhc/gpuhc.yaml && gpuhc config validate").returncode == 0
    # A CPU node to Slurm: its NodeName line gives it no GPU (docs/slurm.md, "Expected GPUs").
    assert debian12("mkdir -p /etc/slurm && echo 'NodeName=cpu001 CPUs=8 State=UNKNOWN' > /etc/slurm/slurm.conf"
                    ).returncode == 0
    shim = debian12("env -i SLURMD_NODENAME=cpu001 /usr/local/share/gpuhc/slurm/healthcheck.sh")
    assert shim.returncode == 0, shim.stdout + shim.stderr
    assert "gpuhc healthcheck cpu001: passive: PASS" in shim.stderr, shim.stderr
    assert "not writing" not in shim.stderr and "refusing" not in shim.stderr, shim.stderr
    files = debian12(f"stat -c '%U %a %n' {logdir} {logdir}/events.jsonl {logdir}/slurm.log "
                     "/var/lib/prometheus/node-exporter/gpuhc-passive.prom && grep -c cpu001 "
                     f"{logdir}/events.jsonl {logdir}/slurm.log")
    assert files.returncode == 0, files.stdout + files.stderr
    assert files.stdout.splitlines()[0] == f"root 755 {logdir}"
    assert all(line.endswith(":1") for line in files.stdout.splitlines()[4:]), files.stdout


def test_readme_offline_install_without_network(debian12):
    """README's offline recipe: the download on a machine with the network, then install.sh
    --wheels with no network at all (its own network namespace: loopback only)."""
    download, install = readme_block("### Offline nodes", 0), readme_block("### Offline nodes", 1)
    cp = debian12(download)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    wheels = debian12("ls wheels").stdout.split()
    assert any(w.startswith("setuptools-84.2.1-") for w in wheels), wheels  # pinned by tests/constraints.txt
    assert any(w.startswith("click-8.5.1-") for w in wheels) and any(w.startswith("wheel-0.48.0-") for w in wheels)
    cp = debian12("unshare --net sh -ec " + shlex.quote(install))
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert debian12("unshare --net gpuhc check --demo").returncode == 0


def test_install_from_a_read_only_checkout(debian12):
    """A shared checkout mounted read-only: nothing is written into it (no gpuhc.egg-info).
    The root also has Debian's node-exporter layout, /var/lib/prometheus owned by its prometheus
    user (the package's postinst does that): install.sh says gpuhc will not write below it, and
    how to fix it."""
    script = ("mkdir -p /var/lib/prometheus/node-exporter && chown 65534:65534 /var/lib/prometheus && "
              "mount --bind /root/gpuhc /root/gpuhc && mount -o remount,bind,ro /root/gpuhc && "
              "! touch /root/gpuhc/x 2>/dev/null && sh install.sh && gpuhc check --demo >/dev/null && "
              "! ls -d /root/gpuhc/*.egg-info 2>/dev/null")
    cp = debian12(script)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert ("/var/lib/prometheus is not root's: gpuhc will not write metrics under it; dpkg-statoverride --update "
            "--add root root 0755 /var/lib/prometheus (or --textfile-dir DIR)") in cp.stderr, cp.stderr


def test_readme_lines_on_debian12_without_python3_venv_then_with_it(tmp_path):
    """A Debian 12 with only python3 (no python3-venv, no pip): README's Try-it line and the node
    install stop with the package to install and leave no venv behind; after `apt-get install
    python3-venv` the same lines work. Then /opt/gpuhc as an older install.sh left it (a venv
    without pip) is replaced, saying so, and not kept as a release to roll back to."""
    run = clean_root(build_base("bookworm-stock", "python3"), tmp_path / "root")
    try_it, node = readme_block("## Try it"), readme_block("## Install on the GPU nodes")
    for lines, venv in ((try_it, "/root/gpuhc/.venv"), (node, "/opt/gpuhc")):
        cp = run(lines)
        assert cp.returncode == 2, cp.stdout + cp.stderr
        assert "apt-get install python3-venv" in cp.stderr, cp.stderr
        assert run(f"test ! -e {venv}").returncode == 0, f"{venv} left behind"

    apt = run("apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null")
    assert apt.returncode == 0, apt.stdout + apt.stderr
    cp = run(try_it)
    assert cp.returncode == 0 and "PASS" in cp.stdout, cp.stdout + cp.stderr
    assert "rebuilding" not in cp.stderr

    assert run("python3 -m venv --without-pip /opt/gpuhc").returncode == 0  # what the old install.sh left
    cp = run(node)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert "install.sh: /opt/gpuhc was a broken virtual environment (its gpuhc does not run)" in cp.stderr, cp.stderr
    assert run("test ! -e /opt/gpuhc.releases/0-before-releases").returncode == 0  # no broken release to roll back to
    assert run("gpuhc check --demo >/dev/null && gpuhc --version").stdout.startswith("gpuhc 0.1.0 (")


# What a root holds that is not install.sh's doing: the kernel's and the chroot's own, apt's,
# the checkout, Python's byte-code caches of the system's modules, shadow's backup files.
NOT_OURS = r"^/(proc|dev|sys|tmp|run/(?!gpuhc)|root/gpuhc|var/cache/apt|var/lib/apt|var/log/apt)|/__pycache__(/|$)|^/etc/[a-z]+-$"


def files(run) -> set[str]:
    cp = run("find / -xdev \\( -path /proc -o -path /dev -o -path /sys \\) -prune -o -print")
    assert cp.returncode == 0, cp.stderr
    return {p for p in cp.stdout.splitlines() if not re.search(NOT_OURS, p)}


# Standard directories every Debian with systemd, logrotate and bash-completion has, which
# this minimal root lacked and install.sh made: shared, so left (empty) as a package leaves them.
# The same for node_exporter's textfile directory, which gpuhc made to write its metrics into.
SHARED = {"/etc/tmpfiles.d", "/etc/logrotate.d", "/usr/share/bash-completion", "/usr/share/bash-completion/completions",
          "/var/lib/prometheus", "/var/lib/prometheus/node-exporter", "/usr/local/share/man", "/usr/local/share/man/man1"}


def test_readme_upgrade_then_uninstall_leaves_only_what_it_says(debian12):
    """README's node and admin-host install with every optional step (the retest and watcher
    units: their copy lines, this root runs no systemd), a health check that leaves state, logs
    and metrics, the Upgrade lines (doctor against slurm/slurm.conf.example's lines), then the
    Uninstall lines: the first leaves only what the README says it keeps, --purge the rest."""
    before = files(debian12)
    node, admin = readme_block("## Install on the GPU nodes"), readme_block(HEADING_ADMIN)
    units = [line for heading in ("### systemd: quarantine retest (every GPU node)",
                                  "### systemd: the node watcher (optional, every GPU node)")
             for line in readme_block(heading).splitlines() if line.startswith("cp ")]
    assert len(units) == 2 and "gpuhc-watch.service" in units[1]
    for lines in (node, admin, "\n".join(units)):
        cp = debian12(lines)
        assert cp.returncode == 0, cp.stdout + cp.stderr
    fresh = debian12("grep -c '^  mode: observe ' /etc/gpuhc/gpuhc.yaml")
    assert fresh.stdout.strip() == "1", fresh.stdout + fresh.stderr  # a fresh install observes
    # A live run (this root's own node, whatever it concludes) leaves state, logs and the parse cache.
    shim = debian12("env -i SLURMD_NODENAME=cpu001 /usr/local/share/gpuhc/slurm/healthcheck.sh || true; "
                    "ls /var/log/gpuhc /var/cache/gpuhc")
    assert "events.jsonl" in shim.stdout, shim.stdout + shim.stderr

    # The admin host's own set-up (README: results_dir), so that doctor has nothing blocking there.
    assert debian12("install -d -o gpuhc -m 0755 /var/lib/gpuhc/results && sed -i "
                    "'s|^sweep:$|sweep:\\n  results_dir: /var/lib/gpuhc/results|' /etc/gpuhc/gpuhc.yaml && "
                    "gpuhc config validate").returncode == 0
    keep, upgrade = readme_block("## Upgrade", 0), readme_block("## Upgrade", 1)
    # the site went to enforce (README, "Observe, then enforce"): the upgrade keeps it
    assert debian12(readme_block("### Observe, then enforce (the recommended rollout)", 1)).returncode == 0
    assert debian12("printf '## edited by the site\\n' >> /etc/gpuhc/gpuhc.yaml && " + keep).returncode == 0
    conf = "mkdir -p /etc/slurm && grep -v '^#' slurm/slurm.conf.example > /etc/slurm/slurm.conf && "
    cp = debian12(conf + "echo 'NodeName=gpu001 Gres=gpu:h100:8 CPUs=8' >> /etc/slurm/slurm.conf && " + upgrade)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert "gpuhc 0.1.0 (" in cp.stdout and "worst:" in cp.stdout, cp.stdout
    kept = debian12("cat /etc/gpuhc/gpuhc.yaml").stdout
    assert "## edited by the site" in kept and "\n  mode: enforce " in kept  # never overwritten
    assert debian12("readlink /opt/gpuhc && ls /opt/gpuhc.releases | wc -l").stdout.split()[1] == "2"

    assert debian12("rm -rf /etc/slurm").returncode == 0  # the test's own slurm.conf, not gpuhc's
    cp = debian12(readme_block("## Uninstall"))
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert "kept on purpose" in cp.stdout and "/var/lib/gpuhc: state" in cp.stdout, cp.stdout
    # what the README says stays: the config, the state (bundles), the logs, the sweep's user
    left = files(debian12) - before - SHARED
    said = ("/etc/gpuhc", "/var/lib/gpuhc", "/var/log/gpuhc")
    assert left and all(p.startswith(said) for p in left), sorted(p for p in left if not p.startswith(said))
    assert debian12("getent passwd gpuhc").returncode == 0
    cp = debian12(readme_block("## Uninstall", 1))
    assert cp.returncode == 0, cp.stdout + cp.stderr
    after = files(debian12)
    assert (sorted(after - before - SHARED), sorted(before - after)) == ([], [])
    assert debian12("getent passwd gpuhc || getent group gpuhc").returncode != 0
