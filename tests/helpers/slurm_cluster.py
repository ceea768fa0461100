"""A real Slurm cluster on localhost for integration tests: one slurmctld, one slurmd per node.

Why a real one: gpuhc's Slurm side (drain reasons, prolog failures, HealthCheckProgram's empty
environment, requeue on prolog error) is exactly where fakes lie. Debian's slurmd is built with
multiple-slurmd support, so ``NodeName=nX NodeHostname=localhost NodeAddr=127.0.0.1 Port=<p>``
and one ``slurmd -N nX`` each gives a cluster of N "nodes" on one host, each running its own
HealthCheckProgram/Prolog/Epilog with its own ``SLURMD_NODENAME``.

Everything lives under the test's work directory (config, state, logs, pid files) plus a
short private directory for the sockets: munge's and slurmd's spool, where slurmstepd makes its
own (UNIX socket paths are limited to 108 bytes and pytest's tmp paths are long). munged runs as root with ``--force`` on a private copy of the
key and a private socket: that way a system munged, a leftover one, or another test session's
cluster never clashes with ours, and there are no ownership rules on pytest's root-owned tmp
directories to satisfy. Slurm is pointed at the socket with ``AuthInfo=socket=...``.

Usage in a test (all such tests are marked ``slurm``)::

    def test_x(slurm_cluster):
        c = slurm_cluster(nodes=("n1", "n2"), healthcheck=True)
        c.scontrol("update", "NodeName=n1", "State=DRAIN", "Reason=x")
        c.wait_for(lambda: c.node("n1").drained, 10, "n1 drained")

The files the cluster is made of (slurm.conf, gres.conf, the wrappers, gpuhc.yaml) are written
by ``tests/helpers/slurm_cluster_files.py``; this module starts, watches and stops the daemons.

Slurm CLI calls must go through :meth:`SlurmCluster.run` (or pass :meth:`SlurmCluster.env`):
that sets ``SLURM_CONF`` so the commands talk to this cluster and nothing else.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterable

from tests.helpers.slurm_cluster_files import (REPO, SBIN, free_ports, gpuhc_bin, slurm_conf, write_gpuhc_yaml, write_gres, write_reboot,
                                 write_wrappers)
from tests.helpers.slurm_release import ChrootRuntime, ReleaseError, SlurmRelease, host_version, release as find_release

__all__ = ["REPO", "ClusterError", "SlurmCluster", "cluster_processes", "daemons_alive", "free_ports", "gpuhc_bin",
           "process_identity"]


class ClusterError(RuntimeError):
    """The test cluster could not start or did not reach the expected state; says why, with logs."""


def _which(name: str) -> str:
    for d in SBIN:
        p = Path(d) / name
        if p.is_file() and os.access(p, os.X_OK):
            return str(p)
    found = shutil.which(name)
    if not found:
        raise ClusterError(f"{name} not found (install Debian packages slurmctld slurmd slurm-client munge)")
    return found


class SlurmCluster:
    """Start/stop a throw-away Slurm cluster. Use as a context manager or via the fixture."""

    def __init__(
        self,
        workdir: str | os.PathLike,
        nodes: Iterable[str] = ("n1", "n2", "n3", "n4"),
        gpuhc_config: dict | None = None,
        extra_conf: str | Iterable[str] = (),
        node_scenarios: dict[str, str] | None = None,
        healthcheck: bool = False,
        prolog: bool = False,
        epilog: bool = False,
        healthcheck_interval: int = 5,
        healthcheck_node_state: str = "ANY",
        gpus_per_node: int = 0,
        cpus: int = 2,
        prolog_epilog_timeout: int = 60,
        start_timeout: float = 120.0,
        debug: str = "info",
        shim_dir: str | os.PathLike | None = None,
        prolog_flags: str | None = None,
        release: SlurmRelease | str | None = None,
        reboot: bool = False,
        gres_conf: str | None = None,
        gpu_nodes: Iterable[str] | None = None,
    ) -> None:
        self.workdir = Path(workdir).resolve()
        self.nodes = tuple(nodes)
        if not self.nodes:
            raise ValueError("a cluster needs at least one node")
        self.gpuhc_config = gpuhc_config
        # Lines for slurm.conf: one string (lines joined by newlines, as before) or a list. A
        # `Key=value` line whose key the harness writes replaces the harness's line in place
        # (accounting, scheduler, timeouts); other lines (NodeName=, PartitionName=, new keys)
        # are appended.
        self.extra_conf: list[str] = (extra_conf.strip().splitlines() if isinstance(extra_conf, str)
                                      else [str(x) for x in extra_conf])
        self.node_scenarios = dict(node_scenarios or {})
        self.healthcheck, self.prolog, self.epilog = healthcheck, prolog, epilog
        self.healthcheck_interval = healthcheck_interval
        self.healthcheck_node_state = healthcheck_node_state
        self.gpus_per_node = gpus_per_node
        # gres.conf text instead of one File= line ("{dev}": the stand-in device directory; every
        # device file it names is made there, a link to /dev/null): MIG slices as MultipleFiles= records.
        self.gres_conf = gres_conf
        # Which nodes slurm.conf gives gpus_per_node GPUs (Gres=); None: every node. The others
        # are CPU nodes to Slurm, as in a mixed cluster (tests/slurm_real/test_doctor.py).
        self.gpu_nodes = None if gpu_nodes is None else tuple(gpu_nodes)
        self.cpus = cpus
        self.prolog_epilog_timeout = prolog_epilog_timeout
        self.prolog_flags = prolog_flags  # e.g. "Alloc", as slurm/slurm.conf.example recommends
        self.start_timeout = start_timeout
        self.debug = debug
        # Where the wrappers find healthcheck.sh/prolog.sh/epilog.sh: the repo's shims by
        # default; a test of the harness itself points elsewhere to stay out of gpuhc's verdicts.
        self.shim_dir = Path(shim_dir) if shim_dir is not None else REPO / "slurm"
        # Which Slurm: the host's packages (None) or a release of the matrix in its Debian chroot
        # (tests/helpers/slurm_release.py); a version string ("24.11") is looked up.
        if isinstance(release, str):
            release = find_release(release)
        self.release: SlurmRelease = release or SlurmRelease(host_version() or "host")
        self.runtime: ChrootRuntime | None = None
        # reboot=True: a RebootProgram that "reboots" only the node asking (its slurmd restarts in
        # a fresh time namespace, so Slurm sees a new boot time), then the node's boot units
        # run (gpuhc-retest.service's command). See write_reboot in tests/helpers/slurm_cluster_files.py.
        self.reboot = reboot
        self.name = "gpuhct" + secrets.token_hex(3)
        self.conf_path = self.workdir / "slurm.conf"
        self.log_dir = self.workdir / "log"
        self.gpuhc_yaml = self.workdir / "gpuhc.yaml"
        self.state_root = self.workdir / "state"
        self.sock_dir: Path | None = None
        self.munge_socket: Path | None = None
        self.ctld_port = 0
        self.node_ports: dict[str, int] = {}
        self._procs: dict[str, subprocess.Popen] = {}
        self._clients: list[subprocess.Popen] = []  # srun/salloc a test started with popen()
        self._started = False

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> "SlurmCluster":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def start(self) -> "SlurmCluster":
        """Write the config, start munged, slurmctld and the slurmds; wait until all nodes are up."""
        if os.geteuid() != 0:
            raise ClusterError("the Slurm test cluster must run as root (slurmd runs jobs as their user)")
        try:
            self._prepare()
            self._start_munge()
            self._start_ctld()
            for node in self.nodes:
                self._start_slurmd(node)
            self._started = True
            self.wait_for(self._all_nodes_up, self.start_timeout, "all nodes registered and not DOWN")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop everything of this cluster: the clients a test left running, the daemons (process
        groups), then every process still carrying the cluster's mark (slurmstepd and the jobs'
        processes, which live in sessions of their own and survive their daemons)."""
        for proc in self._clients:  # first: a hanging srun would otherwise re-ask for its job
            self._kill_group(proc, grace=2)
        # slurmds first (with their scripts), then the controller, munge last.
        order = [k for k in self._procs if k.startswith("slurmd")] + [k for k in ("slurmctld", "munged") if k in self._procs]
        for key in order:
            self._kill_group(self._procs[key])
        self._kill_strays()
        if self.runtime is not None:  # the chroot's mount namespace goes last: daemons ran in it
            self.runtime.stop()  # kept: its namespace id still finds anything left behind
        self._procs.clear()
        self._clients.clear()
        self._started = False
        if self.sock_dir is not None:
            shutil.rmtree(self.sock_dir, ignore_errors=True)
            self.sock_dir = None

    def _kill_group(self, proc: subprocess.Popen, grace: float = 5) -> None:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
        # The group may hold children that outlive the leader (a prolog, an srun's helpers).
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass

    def _kill_strays(self, grace: float = 3.0) -> None:
        """Whatever of the cluster outlived its daemon: slurmstepd daemonises out of slurmd's
        process group, and a job's processes run in a session of their own, so killing the
        groups misses both (a SIGKILLed slurmstepd leaves its job to init). Found by the
        cluster's mark (see :func:`cluster_processes`), never by name alone: another cluster
        may be running. SIGTERM first, slurmstepd before the rest, so a step can end its tasks
        the way Slurm does; SIGKILL for anything left after ``grace``, or as soon as all that is
        left blocks or ignores SIGTERM (slurmstepd blocks it: waiting would only cost time)."""
        pids = cluster_processes(self)
        if not pids:
            return
        for pid in sorted(pids, key=lambda p: _comm(p) != "slurmstepd"):
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while (left := cluster_processes(self)) and time.monotonic() < deadline:
            if all(_deaf_to_sigterm(pid) for pid in left):
                break
            time.sleep(0.05)
        deadline = time.monotonic() + 10
        while (left := cluster_processes(self)) and time.monotonic() < deadline:
            for pid in left:
                _signal(pid, signal.SIGKILL)
            time.sleep(0.05)

    # ------------------------------------------------------------------ setup

    def _prepare(self) -> None:
        for d in (self.workdir, self.log_dir, self.workdir / "ctld_state", self.state_root, self.workdir / "bin"):
            d.mkdir(parents=True, exist_ok=True)
        for node in self.nodes:
            (self.state_root / node).mkdir(exist_ok=True)
        self.sock_dir = Path(tempfile.mkdtemp(prefix="gpuhc-munge-", dir="/tmp"))
        self.sock_dir.chmod(0o755)  # clients running as a job's (non-root) user need the socket
        self.munge_socket = self.sock_dir / "munge.sock"
        # slurmd's spool holds slurmstepd's sockets (``<node>_<job>.<step>``): under pytest-xdist's
        # longer tmp paths they passed 108 bytes and every job step failed, so they live here too.
        (self.sock_dir / "spool").mkdir()
        if self.release.chroot:
            self.runtime = ChrootRuntime(self.release, self.workdir, [self.workdir, self.sock_dir, REPO],
                                         self.env())
            try:
                self.runtime.start()
            except ReleaseError as e:
                raise ClusterError(str(e)) from None
        ports = free_ports(len(self.nodes) + 1)
        self.ctld_port = ports[0]
        self.node_ports = dict(zip(self.nodes, ports[1:]))
        write_gres(self)
        self._write_wrappers()
        if self.reboot:
            write_reboot(self)
        self._write_gpuhc_yaml()
        self.conf_path.write_text(self.slurm_conf())

    def slurm_conf(self) -> str:
        return slurm_conf(self)

    def _write_wrappers(self) -> None:
        write_wrappers(self)

    def _write_gpuhc_yaml(self) -> None:
        write_gpuhc_yaml(self)

    def _start_munge(self) -> None:
        key = self.sock_dir / "munge.key"
        system_key = Path("/etc/munge/munge.key")
        if system_key.is_file():
            shutil.copyfile(system_key, key)
        else:  # a private key is as good: only this cluster's daemons and clients use it
            key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        argv = [
            self._which("munged"), "--foreground", "--force",
            f"--socket={self.munge_socket}", f"--key-file={key}",
            f"--pid-file={self.sock_dir}/munged.pid", f"--seed-file={self.sock_dir}/munged.seed",
            f"--log-file={self.log_dir}/munged.log",
        ]
        self._spawn("munged", argv)
        self.wait_for(lambda: self.munge_socket.exists() or self._dead("munged"), 60, "munged socket")
        if self._dead("munged"):
            raise ClusterError(f"munged exited at start\n{self.logs_tail()}")

    def _start_ctld(self) -> None:
        self._spawn("slurmctld", [self._which("slurmctld"), "-D", "-i", "-f", str(self.conf_path)])

    def slurmd_argv(self, node: str) -> list[str]:
        argv = [self._which("slurmd"), "-D", "-N", node, "-f", str(self.conf_path)]
        return self.runtime.wrap(argv) if self.runtime is not None else argv

    def _start_slurmd(self, node: str) -> None:
        if self.reboot:  # the node's "machine": slurmd under bin/node, which can reboot it
            self._spawn(f"slurmd.{node}", ["sh", str(self.workdir / "bin" / "node"), node], wrap=False)
        else:
            self._spawn(f"slurmd.{node}", self.slurmd_argv(node), wrap=False)

    def stop_slurmd(self, node: str) -> None:
        """Stop this node's slurmd (with its scripts), as `systemctl stop slurmd` would; a
        test that stops one starts it again with :meth:`start_slurmd` (a stopped daemon is
        otherwise an error of :meth:`wait_for`)."""
        self._kill_group(self._procs.pop(f"slurmd.{node}"))

    def start_slurmd(self, node: str) -> None:
        self._start_slurmd(node)

    def _which(self, name: str) -> str:
        if self.runtime is not None:  # Debian puts every daemon in /usr/sbin
            return f"/usr/sbin/{name}"
        return _which(name)

    def _spawn(self, key: str, argv: list[str], wrap: bool = True) -> None:
        if self.runtime is not None and wrap:
            argv = self.runtime.wrap(argv)
        out = open(self.log_dir / f"{key}.out", "ab")
        try:
            self._procs[key] = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=self.env(), start_new_session=True, cwd=self.workdir,
            )
        finally:
            out.close()

    def _dead(self, key: str) -> bool:
        proc = self._procs.get(key)
        return proc is None or proc.poll() is not None

    # ------------------------------------------------------------------ talking to it

    def env(self, **extra: str) -> dict[str, str]:
        """Environment for Slurm CLI calls against this cluster (and nothing else)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_"))}
        env["SLURM_CONF"] = str(self.conf_path)
        first = [str(self.runtime.client_bin)] if self.runtime is not None else []
        env["PATH"] = ":".join([*first, str(Path(sys.executable).parent), *SBIN, env.get("PATH", "")])
        env.update(extra)
        return env

    def run(self, argv: list[str], timeout: float = 30, check: bool = True, **kw: Any) -> subprocess.CompletedProcess:
        """Run a Slurm client command with this cluster's SLURM_CONF; raise with its output on failure."""
        env = self.env(**kw.pop("env", {}))
        try:
            cp = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, cwd=kw.pop("cwd", self.workdir), **kw)
        except subprocess.TimeoutExpired as e:
            raise ClusterError(f"{' '.join(argv)} timed out after {timeout}s\n{self.logs_tail()}") from e
        if check and cp.returncode != 0:
            raise ClusterError(f"{' '.join(argv)} exited {cp.returncode}: {cp.stderr.strip() or cp.stdout.strip()}")
        return cp

    def scontrol(self, *args: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
        return self.run(["scontrol", *args], check=check, timeout=timeout)

    def nodes_now(self) -> list:
        from gpuhc.slurm.read.nodes import parse_show_node_oneline

        cp = self.scontrol("show", "node", "-o")
        return parse_show_node_oneline(cp.stdout)

    def node(self, name: str):
        """The node as Slurm reports it now (a :class:`gpuhc.slurm.read.nodes.Node`)."""
        from gpuhc.slurm.read.nodes import parse_show_node_oneline

        found = parse_show_node_oneline(self.scontrol("show", "node", "-o", name).stdout)
        if len(found) != 1:
            raise ClusterError(f"scontrol show node {name}: expected one node, got {len(found)}")
        return found[0]

    def popen(self, argv: list[str], **kw: Any) -> subprocess.Popen:
        """Start a Slurm client in the background (an ``srun`` the test does not wait for), with
        this cluster's environment; one still running at teardown is killed with the cluster."""
        kw.setdefault("stdout", subprocess.DEVNULL)
        kw.setdefault("stderr", subprocess.DEVNULL)
        proc = subprocess.Popen(argv, env=self.env(**kw.pop("env", {})), stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=kw.pop("cwd", self.workdir), **kw)
        self._clients.append(proc)
        return proc

    def sbatch(self, *args: str, timeout: float = 30) -> int:
        """Submit a job, return its id."""
        cp = self.run(["sbatch", "--parsable", *args], timeout=timeout)
        return int(cp.stdout.strip().split(";")[0])

    def job_state(self, job_id: int) -> str:
        """The job's state as squeue prints that one field (every state slurmctld still holds);
        "GONE" once it is forgotten. Not from ``show job -o``'s text: the job's own name comes
        first there and may hold ``JobState=`` (tests/fixtures/slurm_jobs)."""
        cp = self.run(["squeue", "-h", "-t", "all", "-j", str(job_id), "-o", "%T"], check=False)
        state = cp.stdout.strip().split()
        return state[0] if cp.returncode == 0 and state else "GONE"

    def wait_for_job(self, job_id: int, timeout: float = 120, states: tuple[str, ...] = ("COMPLETED",)) -> str:
        """Wait until the job reaches one of ``states`` (or any end state); return the state."""
        final = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "BOOT_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "GONE", *states}
        box: dict[str, str] = {}

        def done() -> bool:
            box["s"] = self.job_state(job_id)
            return box["s"] in final

        self.wait_for(done, timeout, f"job {job_id} in {'/'.join(states)}",
                      pending=lambda: f"job {job_id} last read {box.get('s', '(never read)')}")
        return box["s"]

    def wait_for(self, predicate: Callable[[], Any], timeout: float, what: str = "condition", interval: float = 0.25,
                 pending: Callable[[], str] | None = None) -> Any:
        """Poll ``predicate`` until truthy and return its value. It returns as soon as the event
        happens, so a bound generous enough for a busy 2-core machine costs a fast one nothing.
        A command failing while the cluster settles, or a file not (fully) written yet, counts
        as not yet. On timeout raise with what was still pending: ``pending()`` (the test's own
        account, e.g. a count as last read), the live nodes and the jobs as slurmctld shows
        them then, and the daemons' log tails."""
        deadline = time.monotonic() + timeout
        last_err: Exception | None = None
        while True:
            try:
                value = predicate()
                if value:
                    return value
            except (ClusterError, OSError, ValueError) as e:
                last_err = e
            if time.monotonic() > deadline:
                extra = f"\nlast error: {last_err}" if last_err else ""
                raise ClusterError(f"timed out after {timeout}s waiting for {what}\nstill pending: "
                                   f"{self._pending(pending)}{extra}\n{self.logs_tail()}")
            dead = [k for k in self._procs if self._dead(k)]
            if dead and self._started:
                raise ClusterError(f"daemon(s) exited: {', '.join(dead)}\n{self.logs_tail()}")
            time.sleep(interval)

    def _pending(self, pending: Callable[[], str] | None) -> str:
        """The test's account of what it waited on, then the live nodes' states and reasons and
        the jobs slurmctld still holds, each as read now (or why it could not be read)."""
        said = []
        if pending is not None:
            try:
                said.append(str(pending()))
            except Exception as e:  # noqa: BLE001 - the account must not hide the timeout
                said.append(f"(the test's account failed: {type(e).__name__}: {e})")
        for label, argv in (("nodes", ["sinfo", "-h", "-N", "-n", ",".join(self.nodes), "-o", "%N %T %E"]),
                            ("jobs", ["squeue", "-h", "-t", "all", "-o", "%i %T %r %N"])):
            try:
                cp = self.run(argv, check=False, timeout=10)
                rows = cp.stdout.strip().splitlines() if cp.returncode == 0 else [f"({cp.stderr.strip()})"]
            except ClusterError as e:
                rows = [f"(no answer: {str(e).splitlines()[0]})"]
            said.append(f"{label}: " + ("; ".join(rows[:20]) or "none") + (" ..." if len(rows) > 20 else ""))
        return "\n  ".join(said)

    def _all_nodes_up(self) -> bool:
        for key in ("slurmctld", *(f"slurmd.{n}" for n in self.nodes)):
            if self._dead(key):
                raise ClusterError(f"{key} exited during start\n{self.logs_tail()}")
        # Only the nodes with a slurmd: a test's extra_conf may define records that never register.
        cp = self.run(["sinfo", "-h", "-N", "-n", ",".join(self.nodes), "-o", "%N %T"], check=False, timeout=30)
        if cp.returncode != 0:
            return False
        states = dict(line.split(None, 1) for line in cp.stdout.splitlines() if line.strip())
        return set(states) == set(self.nodes) and all(
            not s.startswith(("down", "unknown", "future")) and not s.endswith("*") for s in states.values()
        )

    def logs_tail(self, lines: int = 25) -> str:
        """The last lines of every daemon log, for error messages."""
        out = []
        for p in sorted(self.log_dir.glob("*")):
            try:
                text = p.read_text(errors="replace").splitlines()[-lines:]
            except OSError:
                continue
            if text:
                out.append(f"--- {p.name} (last {len(text)} lines)\n" + "\n".join(text))
        return "\n".join(out)


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, start time in clock ticks) of a process; None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # the name in parentheses may hold spaces
    return fields[0], int(fields[1]), int(fields[19])


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _deaf_to_sigterm(pid: int) -> bool:
    """Whether SIGTERM is blocked or ignored by the process (/proc/PID/status signal masks)."""
    bit = 1 << (signal.SIGTERM - 1)
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(("SigBlk:", "SigIgn:")) and int(line.split()[1], 16) & bit:
                return True
    except (OSError, ValueError, IndexError):
        return True  # gone or unreadable: nothing to wait for
    return False


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _process_table() -> dict[int, tuple[str, int, int]]:
    table = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (st := _stat(int(entry.name))) is not None:
            table[int(entry.name)] = st
    return table


def cluster_processes(cluster: SlurmCluster) -> list[int]:
    """PIDs of every live process of ``cluster``: its daemons, slurmstepds, prologs and epilogs,
    the jobs' processes, and clients (srun) a test started against it.

    A process is the cluster's when its environment carries the cluster's SLURM_CONF (the
    harness starts every daemon and client with it, slurmstepd inherits it from slurmd, and a
    job inherits it from the sbatch/srun that submitted it), when its command line names the
    work directory, or when it descends from such a process (a job that scrubbed its
    environment). Zombies are dead already; this process and its ancestors are never listed.
    """
    table = _process_table()
    spared, pid = set(), os.getpid()
    while pid > 1 and pid not in spared:
        spared.add(pid)
        pid = table.get(pid, ("", 0, 0))[1]
    known = {p.pid for p in (*cluster._procs.values(), *cluster._clients)}
    marked = [p for p in table if p in known or _belongs_to(p, cluster)]
    children: dict[int, list[int]] = {}
    for p, (_, ppid, _) in table.items():
        children.setdefault(ppid, []).append(p)
    found, stack = set(marked), list(marked)
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in found:
                found.add(child)
                stack.append(child)
    return sorted(p for p in found - spared if table[p][0] != "Z")


def daemons_alive(cluster: SlurmCluster) -> list[int]:
    """Every live process of ``cluster`` (daemons, steps, jobs, clients): empty after stop()."""
    return cluster_processes(cluster)


def process_identity(pid: int) -> tuple[int, int] | None:
    """(pid, start time): tells a process from a later one that reuses its PID."""
    st = _stat(pid)
    return None if st is None or st[0] == "Z" else (pid, st[2])


def _belongs_to(pid: int, cluster: SlurmCluster) -> bool:
    """Whether a process carries the cluster's mark: our SLURM_CONF in its environment, our
    work directory on its command line, or (a release in a chroot) our mount namespace."""
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes()
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    if f"SLURM_CONF={cluster.conf_path}".encode() in env.split(b"\0"):
        return True
    if cluster.runtime is not None and cluster.runtime.owns(pid):
        return True
    # The directory itself or a path below it, as an argument or after `--opt=`: a plain
    # substring test would take .../slurm1 for .../slurm10, another test's cluster.
    wd = re.escape(str(cluster.workdir).encode())
    return re.search(rb"(?:^|[\0=])" + wd + rb"(?:/|\0|$)", cmd) is not None


# ---------------------------------------------------------------------- pytest fixtures

try:
    import pytest
except ImportError:  # the module is also usable from a plain script
    pytest = None  # type: ignore[assignment]

if pytest is not None:

    def start_or_fail(cluster: SlurmCluster, started: list, what: str = "Slurm test cluster") -> SlurmCluster:
        """Start ``cluster``, recorded in ``started`` for the teardown. Never a skip: in CI a
        cluster that cannot start is a failure with its reason."""
        started.append(cluster)
        try:
            cluster.start()
        except ClusterError as e:
            pytest.fail(f"{what} did not start: {e}", pytrace=False)
        return cluster

    def _factory(tmp_path_factory, rel: SlurmRelease | None = None):
        started: list[SlurmCluster] = []

        def make(**kwargs: Any) -> SlurmCluster:
            workdir = kwargs.pop("workdir", None) or tmp_path_factory.mktemp("slurm")
            kwargs.setdefault("release", rel)
            return start_or_fail(SlurmCluster(workdir, **kwargs), started)

        return started, make

    def _stop_all(started: list[SlurmCluster]) -> None:
        """Stop every cluster, then make sure nothing of them is left (an error of the test's
        teardown otherwise: a leaked job would skew every test after it)."""
        left = {}
        for cluster in started:
            cluster.stop()
            if pids := cluster_processes(cluster):
                left[cluster.workdir] = [f"{pid} {_comm(pid)}" for pid in pids]
        if left:
            pytest.fail(f"processes of the test cluster survived its teardown: {left}", pytrace=False)

    @pytest.fixture
    def slurm_cluster(tmp_path_factory, slurm_release):
        """Factory: ``slurm_cluster(**kwargs)`` starts a :class:`SlurmCluster` (kwargs as its
        constructor) on the test's Slurm release (conftest.py); every cluster it made is stopped
        when the test ends."""
        started, make = _factory(tmp_path_factory, slurm_release)
        yield make
        _stop_all(started)

    @pytest.fixture(scope="module")
    def slurm_cluster_module(tmp_path_factory, slurm_release):
        """Same factory, torn down at the end of the module: for tests that can share a cluster
        (reset node states yourself between tests, e.g. ``scontrol update State=RESUME``)."""
        started, make = _factory(tmp_path_factory, slurm_release)
        yield make
        _stop_all(started)
