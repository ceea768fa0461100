"""The files a test Slurm cluster is made of: slurm.conf, gres.conf, the wrapper scripts Slurm
runs, and gpuhc.yaml. Split from ``slurm_cluster.py`` (which starts and stops the daemons) so
that each stays readable; these functions only read the cluster's settings and write files.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from slurm_cluster import SlurmCluster

REPO = Path(__file__).resolve().parent.parent
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
        f"SlurmdSpoolDir={wd}/spool/%n",
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
    gres = ""
    if c.gpus_per_node:
        lines.append("GresTypes=gpu")
        gres = f" Gres=gpu:fake:{c.gpus_per_node}"
    for node, port in c.node_ports.items():
        lines.append(
            f"NodeName={node} NodeHostname=localhost NodeAddr=127.0.0.1 Port={port} "
            f"CPUs={c.cpus} RealMemory=1000{gres} State=UNKNOWN"
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
    for kind in ("healthcheck", "prolog", "epilog"):
        shim = c.shim_dir / f"{kind}.sh"
        target = f'exec /bin/sh "{shim}" "$@"' if shim.is_file() else "exit 0"
        script = (
            "#!/bin/sh\n"
            f"# written by tests/slurm_cluster.py for cluster {c.name}\n"
            f'export PATH="{path}"\n'
            f'export SLURM_CONF="{c.conf_path}"\n'
            f'export GPUHC_CONFIG="{c.gpuhc_yaml}"\n'
            f'export GPUHC_STATE_DIR="{c.state_root}/${{SLURMD_NODENAME:-unknown}}"\n'
            f'export GPUHC_BIN="{gpuhc_bin()}"\n'
            f'export PYTHONPATH="{REPO}"\n'
            f'echo "$(date +%s.%N) {kind} ${{SLURMD_NODENAME}} ${{SLURM_JOB_ID:-}}" >> "{c.log_dir}/calls.log"\n'
            # The environment Slurm gave us, for tests that assert on it (and for debugging).
            f'env > "{c.log_dir}/env.{kind}.${{SLURMD_NODENAME:-unknown}}"\n'
            f"{target}\n"
        )
        p = c.workdir / "bin" / kind
        p.write_text(script)
        p.chmod(0o755)


def write_gpuhc_yaml(c: "SlurmCluster") -> None:
    """The test's gpuhc config, plus one ``hosts`` override per node that has a scenario."""
    data: dict[str, Any] = dict(c.gpuhc_config or {})
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
    last = c.gpus_per_node - 1
    files = f"{dev}/nvidia[0-{last}]" if last else f"{dev}/nvidia0"
    (c.workdir / "gres.conf").write_text(f"Name=gpu Type=fake File={files}\n")
