"""tests/matrix/build-chroot.sh leaves no half-made root behind: a build killed by SIGINT, SIGTERM
or SIGHUP removes its own ROOT.tmp.PID, and the next build removes what one killed outright left
(issue 50, point 6). mmdebstrap is the one stand-in: a script that makes a root's marker in the
target it is given (a real one downloads Debian for minutes), so only the script's own part runs."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from tests.helpers.paths import TESTS

SCRIPT = TESTS / "matrix" / "build-chroot.sh"
# Called as mmdebstrap's argv ends: SUITE TARGET MIRROR. $SLOW: stays a minute in the build.
FAKE = """#!/bin/sh
for a; do target=${prev:-}; prev=$a; done
mkdir -p "$target/usr/sbin"
printf '#!/bin/sh\\n' > "$target/usr/sbin/slurmctld"
chmod +x "$target/usr/sbin/slurmctld"
if [ -n "${SLOW:-}" ]; then sleep 60; fi
"""


def _env(tmp_path, slow: bool) -> dict[str, str]:
    bin_ = tmp_path / "bin"
    bin_.mkdir(exist_ok=True)
    (bin_ / "mmdebstrap").write_text(FAKE)
    (bin_ / "mmdebstrap").chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_}:{os.environ['PATH']}")
    env.pop("SLOW", None)
    return dict(env, SLOW="1") if slow else env


def _left(tmp_path) -> list[str]:
    return sorted(p.name for p in (tmp_path / "cache").glob("trixie.tmp.*"))


def test_the_next_build_removes_what_a_killed_one_left(tmp_path):
    stale = tmp_path / "cache" / "trixie.tmp.4242"
    (stale / "usr").mkdir(parents=True)  # a build killed by SIGKILL: no trap ran
    cp = subprocess.run(["dash", str(SCRIPT), "trixie", str(tmp_path / "cache" / "trixie")], env=_env(tmp_path, False),
                        capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0, cp.stderr
    assert (tmp_path / "cache" / "trixie" / "usr" / "sbin" / "slurmctld").exists() and _left(tmp_path) == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_an_interrupted_build_removes_its_own_temporary_root(tmp_path, sig):
    root = tmp_path / "cache" / "trixie"
    # A build under nohup (or a runner that ignores SIGHUP) inherits the signal ignored, and a
    # shell may not trap a signal ignored at its start (POSIX): the build then never sees the
    # hang-up at all. The test plays a terminal's session, where SIGHUP has its default action.
    p = subprocess.Popen(["dash", str(SCRIPT), "trixie", str(root)], env=_env(tmp_path, True),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
                         preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 30
        while not list((tmp_path / "cache").glob("trixie.tmp.*/usr/sbin/slurmctld")):
            assert p.poll() is None and time.monotonic() < deadline, p.stderr.read() if p.stderr else ""
            time.sleep(0.05)
        os.killpg(p.pid, sig)  # as Ctrl-C, a CI runner's stop or a closed terminal reach the build
        assert p.wait(timeout=30) != 0
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert _left(tmp_path) == [] and not root.exists()
