"""Which Slurm a test cluster runs: the host's packages, or another Debian release in a chroot.

The matrix (docs/slurm.md, "Slurm releases"): Debian 12's Slurm 22.05 on the host, Debian 13's
24.11 and Debian unstable's 26.05 each in a chroot built once by ``tests/matrix/build-chroot.sh``
(cached under /var/cache/gpuhc-test/chroots/<suite>). Slurm's clients and daemons only talk to
their own major release (and two before), so everything Slurm of a chroot cluster runs inside
its chroot: munged, slurmctld, the slurmds, and every client (scontrol, sinfo, sbatch...).

How the host's Python drives it, and how the chroot's slurmd runs the host's gpuhc:

* Each cluster gets a private mount namespace (a holder process: ``unshare --mount`` running
  ``sleep``); mounts made there vanish with the cluster and never touch the host's table.
* Inside it, the chroot gets /proc, /sys, /dev, the cluster's work directory, the munge socket
  directory and the repository at the same paths as on the host, and the host's / at ``/.host``.
* ``<workdir>/slurm-bin`` holds one script per Slurm client: ``nsenter`` into the namespace,
  ``chroot`` into the release, run its client. The harness puts it first on PATH for the tests
  and for gpuhc, so ``scontrol`` from anywhere reaches this cluster's release.
* slurmd (in the chroot) runs the wrapper and the repository's shim (slurm/healthcheck.sh...)
  there, with ``GPUHC_BIN`` naming ``<workdir>/bin/gpuhc-host``: ``chroot /.host`` back to the
  host's file system and the host's gpuhc, which calls Slurm through ``slurm-bin`` again. The
  shim is the one that ships, run by the release's own slurmd with its own environment.

The loopback network is shared (no network namespace): the test talks to the daemons' ports.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.paths import TESTS

CHROOT_CACHE = Path(os.environ.get("GPUHC_CHROOT_CACHE", "/var/cache/gpuhc-test/chroots"))
BUILD = TESTS / "matrix" / "build-chroot.sh"
# Debian suites that carry each Slurm release (issue 9): bookworm 22.05.8, trixie 24.11.5,
# sid 26.05.5.
SUITES = {"22.05": "bookworm", "24.11": "trixie", "26.05": "sid"}
CLIENTS = ("scontrol", "sinfo", "squeue", "sbatch", "srun", "salloc", "scancel", "sacct", "sacctmgr", "sprio", "sstat",
           "sdiag", "sshare", "strigger")


class ReleaseError(RuntimeError):
    """A Slurm release of the matrix cannot be used here (no chroot and cannot build one)."""


def host_version() -> str | None:
    """major.minor of the host's Slurm packages (``slurmctld -V``), None without Slurm."""
    exe = shutil.which("slurmctld") or ("/usr/sbin/slurmctld" if os.path.exists("/usr/sbin/slurmctld") else None)
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "-V"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    parts = out.split()
    return ".".join(parts[-1].split(".")[:2]) if parts else None


@dataclass(frozen=True)
class SlurmRelease:
    """One Slurm of the matrix: ``root`` is None for the host's own packages."""

    version: str
    root: Path | None = None

    @property
    def id(self) -> str:
        return f"slurm-{self.version}"

    @property
    def chroot(self) -> bool:
        return self.root is not None

    def ensure(self) -> None:
        """Build the chroot when it is missing (once; later runs reuse it)."""
        if self.root is None or (self.root / "usr/sbin/slurmctld").exists():
            return
        suite = SUITES[self.version]
        cp = subprocess.run(["sh", str(BUILD), suite, str(self.root)], capture_output=True, text=True, timeout=1800)
        if cp.returncode != 0:
            raise ReleaseError(f"building the {suite} chroot for Slurm {self.version} failed "
                               f"(exit {cp.returncode}): {cp.stderr.strip()[-2000:]}")

    def installed_version(self) -> str:
        """The full version this release's slurmctld reports (``slurm 24.11.5``)."""
        argv = ["/usr/sbin/slurmctld", "-V"]
        if self.root is not None:
            argv = ["chroot", str(self.root), *argv]
        return subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout.strip()


def release(version: str) -> SlurmRelease:
    """The release for ``version``: the host's when it matches, else its Debian chroot."""
    if version == host_version():
        return SlurmRelease(version)
    if version not in SUITES:
        raise ReleaseError(f"no Debian suite known for Slurm {version} (known: {', '.join(SUITES)})")
    return SlurmRelease(version, CHROOT_CACHE / SUITES[version])


def selected(spec: str | None) -> list[str]:
    """Versions a run covers: ``spec`` is "all", "host" or a comma list ("22.05,26.05")."""
    spec = (spec or "host").strip()
    if spec == "all":
        return list(SUITES)
    if spec == "host":
        return [host_version() or "22.05"]
    return [v.strip() for v in spec.split(",") if v.strip()]


class ChrootRuntime:
    """One cluster's view of a chroot release: its mount namespace, mounts and client scripts."""

    def __init__(self, rel: SlurmRelease, workdir: Path, binds: list[Path], env: dict[str, str]) -> None:
        assert rel.root is not None
        self.rel = rel
        self.root = rel.root
        self.workdir = workdir
        self.binds = binds
        self.env = env
        self.client_bin = workdir / "slurm-bin"
        self.holder: subprocess.Popen | None = None
        self.ns_id: str | None = None  # "mnt:[4026532...]": marks every process of the cluster
        self.stopped_at: int | None = None  # clock ticks since boot when stop() began

    @property
    def ns(self) -> str:
        assert self.holder is not None
        return f"/proc/{self.holder.pid}/ns/mnt"

    def start(self) -> None:
        self.rel.ensure()
        self.holder = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sleep", "infinity"],
                                       env=self.env, start_new_session=True, stdin=subprocess.DEVNULL)
        mine = os.readlink("/proc/self/ns/mnt")
        deadline = time.monotonic() + 10
        while True:  # unshare has to run before its namespace is the new one
            try:
                if os.readlink(self.ns) != mine:
                    break
            except OSError:
                pass
            if self.holder.poll() is not None or time.monotonic() > deadline:
                raise ReleaseError(f"unshare --mount did not start (exit {self.holder.poll()})")
            time.sleep(0.01)
        self.ns_id = os.readlink(self.ns)
        r = str(self.root)
        script = ["set -e", f"mount --rbind / {r}/.host", f"mount --make-rslave {r}/.host",
                  f"mount --rbind /proc {r}/proc", f"mount --rbind /sys {r}/sys", f"mount --rbind /dev {r}/dev",
                  # the host's names (localhost, its hostname) resolve the same in the chroot
                  f"touch {r}/etc/hosts", f"mount --bind /etc/hosts {r}/etc/hosts"]
        for path in self.binds:
            script += [f"mkdir -p {r}{path}", f"mount --bind {path} {r}{path}"]
        (self.root / ".host").mkdir(exist_ok=True)
        cp = subprocess.run(["nsenter", f"--mount={self.ns}", "sh", "-c", "\n".join(script)],
                            capture_output=True, text=True, timeout=30)
        if cp.returncode != 0:
            raise ReleaseError(f"mounts for the {self.rel.id} chroot failed: {cp.stderr.strip()}")
        self._write_clients()

    def owns(self, pid: int) -> bool:
        """Whether a process lives in this cluster's mount namespace: the daemons, slurmstepd
        (which newer Slurm starts with an environment of its own, detached from slurmd) and
        every job and script under them."""
        try:
            if self.ns_id is None or os.readlink(f"/proc/{pid}/ns/mnt") != self.ns_id:
                return False
            # Once the namespace is empty the kernel may give its id to a new one: another
            # cluster's (pytest-xdist runs several at once). A process that started after this
            # runtime stopped is not ours, whatever its namespace's id.
            return self.stopped_at is None or _start_ticks(pid) <= self.stopped_at
        except (OSError, ValueError):
            return False

    def wrap(self, argv: list[str]) -> list[str]:
        """argv to run a program of the release (absolute path inside the chroot)."""
        return ["nsenter", f"--mount={self.ns}", "chroot", str(self.root), *argv]

    def _write_clients(self) -> None:
        self.client_bin.mkdir(exist_ok=True)
        for name in CLIENTS:
            p = self.client_bin / name
            p.write_text("#!/bin/sh\n"
                         f"# {self.rel.id}: run the chroot's {name} in the test cluster's mount namespace\n"
                         f'exec /usr/bin/nsenter --mount={self.ns} /usr/sbin/chroot {self.root} /usr/bin/{name} "$@"\n')
            p.chmod(0o755)

    def stop(self) -> None:
        if self.stopped_at is None:  # a second stop (the fixture's, after the test's) keeps the first time
            self.stopped_at = _now_ticks()
        if self.holder is not None and self.holder.poll() is None:
            os.killpg(self.holder.pid, signal.SIGKILL)
            self.holder.wait(timeout=10)


def _now_ticks() -> int:
    """Now, in the clock ticks since boot that /proc/<pid>/stat's start time counts."""
    return int(float(Path("/proc/uptime").read_text().split()[0]) * os.sysconf("SC_CLK_TCK"))


def _start_ticks(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rfind(")") + 2:].split()[19])
