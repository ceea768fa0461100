"""The files a test Slurm cluster is made of: slurm.conf, gres.conf, the wrapper scripts Slurm
runs, and gpuhc.yaml. Split from ``tests/helpers/slurm_cluster.py`` (which starts and stops the daemons) so
that each stays readable; these functions only read the cluster's settings and write files.
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from tests.helpers.paths import REPO

if TYPE_CHECKING:
    from tests.helpers.slurm_cluster import SlurmCluster

SBIN = ("/usr/sbin", "/usr/bin", "/sbin", "/bin", "/usr/local/sbin", "/usr/local/bin")


def free_ports(n: int) -> list[int]:
    """Ask the kernel for ``n`` distinct free TCP ports (held open together so they differ)."""
    socks, ports = [], []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def gpuhc_bin() -> str:
    """How the Slurm-called wrappers should start gpuhc: the console script next to this Python
    if installed, else this very interpreter with ``-m gpuhc`` (same code as the tests import)."""
    script = Path(sys.executable).parent / "gpuhc"
    if script.is_file() and os.access(script, os.X_OK):
        return str(script)
    return f"{sys.executable} -m gpuhc"


def slurm_conf(c: "SlurmCluster") -> str:
    """slurm.conf for the cluster: everything under its work directory, its own ports and munge
    socket, no cgroups (proctrack/linuxproc, task/none), no accounting."""
    wd = c.workdir
    lines = [
        f"ClusterName={c.name}",
        "SlurmctldHost=localhost",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"SlurmctldPort={c.ctld_port}",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={c.munge_socket}",
        f"StateSaveLocation={wd}/ctld_state",
        f"SlurmdSpoolDir={c.sock_dir}/spool/%n",  # slurmstepd's sockets: a short path (see _prepare)
        f"SlurmctldPidFile={wd}/slurmctld.pid",
        f"SlurmdPidFile={wd}/slurmd.%n.pid",
        f"SlurmctldLogFile={c.log_dir}/slurmctld.log",
        f"SlurmdLogFile={c.log_dir}/slurmd.%n.log",
        f"SlurmctldDebug={c.debug}",
        f"SlurmdDebug={c.debug}",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "MpiDefault=none",
        "SwitchType=switch/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "ReturnToService=2",
        "SchedulerParameters=nohold_on_prolog_fail",
        # Fast enough for tests, slack enough for a loaded 2-core CI box.
        "SlurmdTimeout=60",
        "SlurmctldTimeout=30",
        "MessageTimeout=10",
        "InactiveLimit=0",
        "KillWait=2",
        "MinJobAge=60",
        "WaitTime=0",
        f"PrologEpilogTimeout={c.prolog_epilog_timeout}",
        f"PlugStackConfig={wd}/plugstack.conf",
    ]
    (wd / "plugstack.conf").write_text("")  # keep the system's SPANK plugins out of tests
    if c.healthcheck:
        lines += [
            f"HealthCheckProgram={wd}/bin/healthcheck",
            f"HealthCheckInterval={c.healthcheck_interval}",
            f"HealthCheckNodeState={c.healthcheck_node_state}",
        ]
    if c.prolog:
        lines.append(f"Prolog={wd}/bin/prolog")
    if c.prolog_flags:
        lines.append(f"PrologFlags={c.prolog_flags}")
    if c.epilog:
        lines.append(f"Epilog={wd}/bin/epilog")
    if c.reboot:
        lines.append(f"RebootProgram={wd}/bin/reboot")
    gres = ""
    if c.gpus_per_node:
        lines.append("GresTypes=gpu")
        gres = f" Gres=gpu:fake:{c.gpus_per_node}"
    for node, port in c.node_ports.items():
        mine = gres if c.gpu_nodes is None or node in c.gpu_nodes else ""
        lines.append(
            f"NodeName={node} NodeHostname=localhost NodeAddr=127.0.0.1 Port={port} "
            f"CPUs={c.cpus} RealMemory=1000{mine} State=UNKNOWN"
        )
    lines.append("PartitionName=gpu Default=YES MaxTime=INFINITE State=UP Nodes=ALL")
    return "\n".join(merge_conf(lines, c.extra_conf)) + "\n"


_LIST_KEYS = ("nodename", "partitionname", "nodeset", "downnodes", "frontendname", "include")


def merge_conf(base: list[str], extra: list[str]) -> list[str]:
    """``base`` with ``extra`` merged in: a ``Key=value`` line replaces base's line for the same
    key (Slurm keys are case-insensitive; slurm.conf takes one value per key), anything else is
    appended in order (node, partition and nodeset lines may repeat)."""
    out = list(base)
    index = {ln.split("=", 1)[0].strip().lower(): i for i, ln in enumerate(out) if "=" in ln}
    for line in (x.strip() for x in extra):
        if not line:
            continue
        key = line.split("=", 1)[0].strip().lower() if "=" in line else ""
        if key and key not in _LIST_KEYS and " " not in key and key in index:
            out[index[key]] = line
        else:
            out.append(line)
    return out


def write_wrappers(c: "SlurmCluster") -> None:
    """Slurm runs HealthCheckProgram/Prolog/Epilog with an (almost) empty environment, so the
    wrapper sets everything gpuhc needs, then execs the shim (a no-op when ``shim_dir`` has
    none)."""
    path = ":".join([str(Path(sys.executable).parent), *SBIN])
    gpuhc = gpuhc_bin()
    if c.runtime is not None:
        # slurmd runs in the release's chroot, which has no Python: gpuhc runs on the host's
        # file system (/.host, see tests/helpers/slurm_release.py), reaching Slurm through slurm-bin.
        host_path = ":".join([str(c.runtime.client_bin), path])
        hop = c.workdir / "bin" / "gpuhc-host"
        hop.write_text("#!/bin/sh\n"
                       f"# written by tests/helpers/slurm_cluster.py: from the {c.release.id} chroot to the host's gpuhc\n"
                       # run by hand on the host (a test calling the wrapper), there is no /.host
                       f'[ -d /.host/proc ] || exec /usr/bin/env PATH="{host_path}" {gpuhc} "$@"\n'
                       f'exec /usr/sbin/chroot /.host /usr/bin/env PATH="{host_path}" {gpuhc} "$@"\n')
        hop.chmod(0o755)
        gpuhc = str(hop)
    for kind in ("healthcheck", "prolog", "epilog"):
        shim = c.shim_dir / f"{kind}.sh"
        target = f'exec /bin/sh "{shim}" "$@"' if shim.is_file() else "exit 0"
        script = (
            "#!/bin/sh\n"
            f"# written by tests/helpers/slurm_cluster.py for cluster {c.name}\n"
            f'export PATH="{path}"\n'
            f'export SLURM_CONF="{c.conf_path}"\n'
            f'export GPUHC_CONFIG="{c.gpuhc_yaml}"\n'
            f'export GPUHC_STATE_DIR="{c.state_root}/${{SLURMD_NODENAME:-unknown}}"\n'
            f'export GPUHC_BIN="{gpuhc}"\n'
            # the shim's own metric (slurm/shim.sh) stays in the cluster's directory, off the live node
            f'export GPUHC_TEXTFILE_DIR="{c.log_dir}"\n'
            f'export PYTHONPATH="{REPO}"\n'
            f'echo "$(date +%s.%N) {kind} ${{SLURMD_NODENAME}} ${{SLURM_JOB_ID:-}}" >> "{c.log_dir}/calls.log"\n'
            # The environment Slurm gave us, for tests that assert on it (and for debugging). Put
            # in place whole: the health check rewrites it every interval, and a test reading
            # it then must not find it truncated.
            f'env > "{c.log_dir}/env.{kind}.${{SLURMD_NODENAME:-unknown}}.$$"\n'
            f'mv -f "{c.log_dir}/env.{kind}.${{SLURMD_NODENAME:-unknown}}.$$" '
            f'"{c.log_dir}/env.{kind}.${{SLURMD_NODENAME:-unknown}}"\n'
            f"{target}\n"
        )
        p = c.workdir / "bin" / kind
        p.write_text(script)
        p.chmod(0o755)


def write_gpuhc_yaml(c: "SlurmCluster") -> None:
    """The test's gpuhc config, plus one ``hosts`` override per node that has a scenario."""
    data: dict[str, Any] = dict(c.gpuhc_config or {})
    # Bundles stay in the test's directory unless the test names its own: a retirement on the
    # cluster otherwise wrote /var/lib/gpuhc/retired (tests/helpers/live_paths.py caught it in CI).
    slurm = data["slurm"] = dict(data.get("slurm") or {})
    slurm.setdefault("postmortem_dir", str(c.workdir / "postmortem"))
    slurm["retire_bundle"] = {"dir": str(c.workdir / "retired"), **(slurm.get("retire_bundle") or {})}
    hosts = list(data.get("hosts") or [])
    for node, scenario in c.node_scenarios.items():
        hosts.append({"match": node, "sources": {"nvml_scenario": str(scenario)}})
    if hosts:
        data["hosts"] = hosts
    c.gpuhc_yaml.write_text(yaml.safe_dump(data, sort_keys=False))


def write_gres(c: "SlurmCluster") -> None:
    """Fake GPUs: Slurm wants character devices for GPU files and takes the index from the
    name; links to /dev/null pass its stat() without mknod rights."""
    if not c.gpus_per_node:
        return
    dev = c.workdir / "dev"
    dev.mkdir(exist_ok=True)
    for i in range(c.gpus_per_node):
        link = dev / f"nvidia{i}"
        if not link.is_symlink():
            link.symlink_to("/dev/null")
    if c.gres_conf is not None:  # the test's own records, e.g. MIG slices through nvidia-caps files
        text = c.gres_conf.replace("{dev}", str(dev))
        for path in re.findall(re.escape(str(dev)) + r"/[\w./-]+", text):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            if not os.path.islink(path):
                os.symlink("/dev/null", path)
        (c.workdir / "gres.conf").write_text(text)
        return
    last = c.gpus_per_node - 1
    files = f"{dev}/nvidia[0-{last}]" if last else f"{dev}/nvidia0"
    only = f"NodeName={','.join(c.gpu_nodes)} " if c.gpu_nodes is not None else ""
    (c.workdir / "gres.conf").write_text(f"{only}Name=gpu Type=fake File={files}\n")


REBOOT = """#!/bin/sh
# RebootProgram of test cluster {name}: "reboots" the node whose slurmd runs this, by asking its
# machine (bin/node, which stops slurmd and boots it again) through the file reboot/NODE.
pid=$$
while [ "$pid" -gt 1 ] && [ "$(cat /proc/$pid/comm)" != slurmd ]; do
    read -r _ _ _ pid _ < /proc/$pid/stat
done
node=$(tr '\\0' '\\n' < /proc/$pid/cmdline | sed -n '/^-N$/{{n;p;q}}')
echo "$(date +%s.%N) reboot $node" >> {log}/calls.log
touch {wd}/reboot/"$node"
"""

NODE = """#!/bin/sh
# One "machine" of test cluster {name}: its slurmd, booted again whenever bin/reboot asked.
# Each boot runs slurmd in a new time namespace whose boot clock starts at zero (Slurm reads the
# node's boot time from its uptime), then the node's boot units (bin/boot), as systemd would.
# The machine itself stops slurmd on a reboot request (a second after it, as a shutdown takes
# a moment): Slurm 26.05 ends whatever its RebootProgram leaves running.
node=$1
while :; do
    rm -f {wd}/reboot/"$node"
    up=$(cut -d. -f1 /proc/uptime)
    unshare --time --boottime=-"$up" {slurmd} &
    slurmd=$!
    sh {wd}/bin/boot "$node" >> {log}/boot."$node".log 2>&1 &
    rebooting=
    while [ -e /proc/$slurmd ] && [ "$(cut -d' ' -f3 /proc/$slurmd/stat 2>/dev/null)" != Z ]; do
        if [ -e {wd}/reboot/"$node" ]; then
            rebooting=1
            sleep 1
            kill -TERM "$slurmd"
            break
        fi
        sleep 0.5
    done
    wait "$slurmd"
    rc=$?
    [ -n "$rebooting" ] || exit "$rc"
    # The machine's time off, if the test gives it one: the real campaign's bin/down waits out
    # the model's reboot there (bench/campaign_model/real_boot.py); without it, it boots at once.
    [ ! -x {wd}/bin/down ] || {wd}/bin/down "$node"
done
"""

BOOT = """#!/bin/sh
# Boot units of a test node of cluster {name}: examples/systemd/gpuhc-retest.service's commands
# (ExecStartPre, ExecStart), started with slurmd as After= with Type=simple does, with the
# node's gpuhc settings.
node=$1
echo "$(date +%s.%N) boot $node" >> {log}/calls.log
export PATH="{path}"
export SLURM_CONF="{conf}" GPUHC_CONFIG="{yaml}" GPUHC_STATE_DIR="{state}/$node" PYTHONPATH="{repo}"
export SLURMD_NODENAME="$node"   # the host name, on a real node
{command}
echo "$(date +%s.%N) boot-done $node rc=$?" >> {log}/calls.log
"""


def retest_unit_commands() -> list[list[str]]:
    """ExecStartPre then ExecStart of examples/systemd/gpuhc-retest.service, as argv lists
    (systemd's `$$` and `%%` escapes undone)."""
    unit = (REPO / "examples" / "systemd" / "gpuhc-retest.service").read_text()
    lines = [ln for ln in unit.splitlines() if ln.startswith("ExecStartPre=")]
    lines += [ln for ln in unit.splitlines() if ln.startswith("ExecStart=")]
    return [shlex.split(ln.split("=", 1)[1].replace("$$", "$").replace("%%", "%")) for ln in lines]


def write_reboot(c: "SlurmCluster") -> None:
    """RebootProgram, the per-node "machine" that reboots, and its boot units (reboot=True)."""
    (c.workdir / "reboot").mkdir(exist_ok=True)
    path = ":".join(([str(c.runtime.client_bin)] if c.runtime is not None else []) +
                    [str(Path(sys.executable).parent), *SBIN])
    commands = []
    for argv in retest_unit_commands():
        if argv[0] == "/usr/local/bin/gpuhc":  # where the README installs it; here: the tests' gpuhc
            argv = [*gpuhc_bin().split(), *argv[1:]]
        commands.append(shlex.join(argv))
    fields = dict(name=c.name, wd=c.workdir, log=c.log_dir, conf=c.conf_path, yaml=c.gpuhc_yaml, state=c.state_root,
                  repo=REPO, path=path, command=" && \\\n".join(commands),
                  slurmd=shlex.join(c.slurmd_argv("\"$node\"")))
    fields["slurmd"] = fields["slurmd"].replace("\'\"$node\"\'", '"$node"')
    for name, text in (("reboot", REBOOT), ("node", NODE), ("boot", BOOT)):
        p = c.workdir / "bin" / name
        p.write_text(text.format(**fields))
        p.chmod(0o755)
