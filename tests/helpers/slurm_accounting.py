"""A real Slurm cluster with real accounting: MariaDB and slurmdbd (Debian's packages) next to the
slurmctld and slurmds of :class:`slurm_cluster.SlurmCluster`.

Why real: ``gpuhc fleet stats`` reads ``sacctmgr show event`` and ``gpuhc fleet suspects`` reads
``sacct``; their output formats, their time windows and the way Slurm records a node that stops
answering (NODE_FAIL for its job, a DOWN event for the node) are exactly what a fake would get
wrong.

Everything is private to the test: MariaDB gets its own data directory under the work directory
and listens on a free port on 127.0.0.1 with ``--skip-grant-tables`` (nothing else can reach it,
and no password needs setting up); slurmdbd gets its own port and a database named after the
cluster. Order: munged, MariaDB, slurmdbd, ``sacctmgr add cluster``, then slurmctld and the
slurmds as usual; stopped in reverse (MariaDB last).

What this adds to the base cluster's slurm.conf (by rewriting its text, see
:meth:`AccountingCluster.slurm_conf`): ``AccountingStorageType=accounting_storage/slurmdbd``
with our host and port and our munge socket as ``AccountingStoragePass`` (how Slurm names
the socket of a second munged for accounting), and ``SlurmdTimeout=10`` so that a stopped slurmd makes its job
NODE_FAIL in seconds rather than minutes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import Any

from tests.helpers.slurm_cluster import ClusterError, SlurmCluster, free_ports

SLURMD_TIMEOUT = 10


def _binary(*names: str) -> str:
    for name in names:
        for d in ("/usr/sbin", "/usr/bin", "/sbin", "/bin"):
            if os.access(f"{d}/{name}", os.X_OK):
                return f"{d}/{name}"
    raise ClusterError(f"{names[0]} not found (install Debian packages mariadb-server slurmdbd)")


class AccountingCluster(SlurmCluster):
    def __init__(self, workdir: str | os.PathLike, **kwargs: Any) -> None:
        super().__init__(workdir, **kwargs)
        self.db_dir = self.workdir / "mariadb"
        self.db_port = 0
        self.dbd_port = 0
        self._db: subprocess.Popen | None = None

    # ------------------------------------------------------------------ configuration

    def slurm_conf(self) -> str:
        text = super().slurm_conf()
        for old, new in (
            ("AccountingStorageType=accounting_storage/none",
             f"AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=localhost\n"
             f"AccountingStoragePort={self.dbd_port}\n"
             # The munge socket of the connection to slurmdbd (AuthInfo covers slurmctld's only).
             f"AccountingStoragePass={self.munge_socket}"),
            ("SlurmdTimeout=60", f"SlurmdTimeout={SLURMD_TIMEOUT}"),
        ):
            if old not in text:
                raise ClusterError(f"slurm.conf of the base cluster has no {old!r} to replace: update {__file__}")
            text = text.replace(old, new)
        return text

    def _write_dbd_conf(self) -> None:
        conf = self.workdir / "slurmdbd.conf"  # slurmdbd looks next to SLURM_CONF
        conf.write_text("\n".join([
            "AuthType=auth/munge",
            f"AuthInfo=socket={self.munge_socket}",
            "DbdHost=localhost",
            f"DbdPort={self.dbd_port}",
            "SlurmUser=root",
            f"LogFile={self.log_dir}/slurmdbd.log",
            f"PidFile={self.workdir}/slurmdbd.pid",
            "DebugLevel=info",
            "StorageType=accounting_storage/mysql",
            "StorageHost=127.0.0.1",
            f"StoragePort={self.db_port}",
            "StorageUser=root",
            f"StorageLoc=acct_{self.name}",
        ]) + "\n")
        conf.chmod(0o600)  # slurmdbd refuses a config others can read (it may hold a password)

    # ------------------------------------------------------------------ lifecycle

    def _prepare(self) -> None:
        self.db_port, self.dbd_port = free_ports(2)
        super()._prepare()  # writes slurm.conf, which needs the ports above
        self._write_dbd_conf()

    def _start_ctld(self) -> None:
        self._start_mariadb()
        self._spawn("slurmdbd", [_binary("slurmdbd"), "-D"])
        self.wait_for(self._dbd_answers, 180, "slurmdbd answering sacctmgr")
        self.run(["sacctmgr", "-i", "add", "cluster", self.name], timeout=30)
        super()._start_ctld()

    def _dbd_answers(self) -> bool:
        if self._dead("slurmdbd"):
            raise ClusterError(f"slurmdbd exited at start\n{self.logs_tail()}")
        return self.run(["sacctmgr", "-n", "-P", "show", "cluster"], check=False, timeout=15).returncode == 0

    def _start_mariadb(self) -> None:
        self.db_dir.mkdir(exist_ok=True)
        log = self.log_dir / "mariadb.log"
        init = subprocess.run([_binary("mariadb-install-db", "mysql_install_db"), f"--datadir={self.db_dir}",
                               "--user=root", "--auth-root-authentication-method=normal", "--skip-test-db"],
                              capture_output=True, text=True, timeout=120)
        if init.returncode != 0:
            raise ClusterError(f"mariadb-install-db failed: {init.stderr[-2000:] or init.stdout[-2000:]}")
        sock = self.sock_dir / "mysqld.sock"
        argv = [_binary("mariadbd", "mysqld"), "--no-defaults", f"--datadir={self.db_dir}", "--user=root",
                f"--port={self.db_port}", "--bind-address=127.0.0.1", f"--socket={sock}",
                f"--pid-file={self.workdir}/mariadb.pid", f"--log-error={log}", "--skip-grant-tables",
                "--innodb-buffer-pool-size=32M", "--innodb-log-file-size=16M", "--skip-log-bin"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        self._db = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL, start_new_session=True, env=env)
        deadline = time.monotonic() + 180  # returns at its socket: the bound is for a busy machine
        while not sock.exists():
            if self._db.poll() is not None or time.monotonic() > deadline:
                tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
                raise ClusterError(f"MariaDB did not start\n{tail}")
            time.sleep(0.2)

    def stop(self) -> None:
        super().stop()  # the slurm daemons (slurmdbd among them, by the cluster's mark) and munged
        if self._db is not None:
            if self._db.poll() is None:
                os.killpg(self._db.pid, signal.SIGTERM)
                try:
                    self._db.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(self._db.pid, signal.SIGKILL)
                    self._db.wait(timeout=10)
            self._db = None

    # ------------------------------------------------------------------ helpers for tests

    def stop_slurmd(self, node: str) -> None:
        """Stop one node's slurmd (SIGKILL: a crashed node says goodbye to nobody)."""
        proc = self._procs.pop(f"slurmd.{node}")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)

    def start_slurmd(self, node: str) -> None:
        self._start_slurmd(node)


def accounting_cluster(tmp_path_factory, started: list, **kwargs: Any) -> AccountingCluster:
    """Start an :class:`AccountingCluster` (kwargs as SlurmCluster's) and record it in ``started``."""
    from tests.helpers.slurm_cluster import start_or_fail

    cluster = AccountingCluster(kwargs.pop("workdir", None) or tmp_path_factory.mktemp("acct"), **kwargs)
    return start_or_fail(cluster, started, "Slurm accounting test cluster")


def gpuhc_argv(*args: str) -> list[str]:
    from tests.helpers.slurm_cluster import gpuhc_bin

    return [*gpuhc_bin().split(), *args]

