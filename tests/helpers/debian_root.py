"""A clean Debian 12 root with the checkout in it, and README.md's shell blocks verbatim: the
install tests' ground (tests/install/)."""

from __future__ import annotations


import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers.paths import REPO
from tests.helpers.slurm_release import CHROOT_CACHE


ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LANG": "C.UTF-8"}


def readme_block(heading: str, index: int = 0) -> str:
    """The ``index``-th ```sh block under a README heading, as written."""
    text = (REPO / "README.md").read_text()
    section = text.split(f"\n{heading}\n", 1)[1]
    section = re.split(r"\n#{1,2} ", section, maxsplit=1)[0]
    return re.findall(r"```sh\n(.*?)```", section, re.S)[index]


def build_base(name: str = "bookworm-python", include: str = "python3,python3-pip") -> Path:
    """The cached Debian 12 chroot ``name`` with only minbase and ``include``: built once.

    Several pytest-xdist workers may ask for it at once on a fresh machine (CI's): the first
    builds it under an exclusive lock, the others wait and find it made. A half-made copy (a build
    that failed, or a run interrupted mid-build) is removed, never renamed into place."""
    import fcntl

    base = CHROOT_CACHE / name
    if (base / "usr/bin/python3").exists():
        return base
    base.parent.mkdir(parents=True, exist_ok=True)
    with open(base.with_name(name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or the process dies
        if (base / "usr/bin/python3").exists():
            return base  # another worker built it while this one waited
        for stale in base.parent.glob(name + ".tmp.*"):  # left by an interrupted run: the lock says none builds now
            _remove_root(stale)
        _remove_root(base)  # a base without python3 is half-made
        tmp = base.with_name(base.name + f".tmp.{os.getpid()}")
        try:
            cp = subprocess.run(["mmdebstrap", "--quiet", "--variant=minbase", "--mode=root",
                                 "--aptopt=APT::Install-Recommends \"false\"",
                                 "--aptopt=Acquire::Check-Valid-Until \"false\"",
                                 f"--include={include}", "bookworm", str(tmp), "http://deb.debian.org/debian"],
                                capture_output=True, text=True, timeout=1200)
            assert cp.returncode == 0, cp.stderr[-3000:]
            tmp.rename(base)
        finally:
            _remove_root(tmp)
    return base


def _remove_root(path: Path) -> None:
    """Remove a chroot, never crossing into another file system: an interrupted mmdebstrap can
    leave /proc or /dev mounted inside it, and a plain recursive removal would follow them into
    the host's (tests/matrix/build-chroot.sh removes its roots the same way)."""
    if path.exists() or path.is_symlink():
        subprocess.run(["rm", "-rf", "--one-file-system", "--", str(path)], check=False)


def clean_root(base: Path, root: Path):
    """A fresh copy of the chroot ``base`` at ``root`` with the checkout at /root/gpuhc and a
    copy of the host's CA certificates; returns a runner of shell text inside it (its own mount
    namespace: /proc, /dev, the host's resolv.conf, read only)."""
    if os.geteuid() != 0:
        pytest.fail("the install test builds a chroot and must run as root (CI does)", pytrace=False)
    subprocess.run(["cp", "-a", str(base), str(root)], check=True)
    # The host's CAs (a network whose proxy re-signs TLS has its CA there), copied, never
    # bind-mounted: a package the test installs in the root (python3-venv brings
    # ca-certificates) runs update-ca-certificates, which rewrites the bundle it finds, and
    # must rewrite the root's copy, not the host's. The local CAs go along so that it keeps them.
    # (The root's own entries go first: its links name absolute paths, which outside the
    # chroot are the host's files, and a copy onto them would write there.)
    for host, mine in (("/etc/ssl/certs", "etc/ssl/certs"), ("/usr/local/share/ca-certificates",
                                                             "usr/local/share/ca-certificates")):
        if Path(host).is_dir():
            shutil.rmtree(root / mine, ignore_errors=True)
            (root / mine).parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(["cp", "-rL", host, str(root / mine)], check=True)
    files = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                           check=True).stdout.split(b"\0")
    dest = root / "root" / "gpuhc"
    for name in filter(None, files):
        src = REPO / os.fsdecode(name)
        if src.is_file():
            (dest / os.fsdecode(name)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / os.fsdecode(name))

    def run(script: str, timeout: float = 900) -> subprocess.CompletedProcess:
        mounts = (f"mount -t proc proc {root}/proc && mount --rbind /dev {root}/dev && "
                  f"touch {root}/etc/resolv.conf && mount --bind /etc/resolv.conf {root}/etc/resolv.conf && "
                  f"mount -o remount,bind,ro {root}/etc/resolv.conf && "
                  f"exec chroot {root} /bin/sh -ec 'cd /root/gpuhc\n'\"$1\"")
        return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", mounts, "sh", script],
                              env=ENV, capture_output=True, text=True, timeout=timeout)

    return run
