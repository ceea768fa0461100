"""The live node's paths, which no test may write (issue 50, point 6): a snapshot of them before and
after the session (tests/conftest.py), and a way to run a command with them out of reach.

A site runs the suite on a staging node and then installs gpuhc there: a fake retire bundle, a
state file or a metric left behind would read as that node's own evidence.
"""

from __future__ import annotations

import os

# Every place install.sh or gpuhc's defaults write on a node (install.sh, etc/gpuhc.yaml, the
# schema's defaults), and the textfile directory's gpuhc files.
# (Not /var/cache/gpuhc: the parse memo, gpuhc/files/parsecache.py, holds no evidence and is keyed by
# each file's text, so a test's entry can only cost the node a parse. tests/conftest.py points
# the session's own runs elsewhere; a subprocess a test starts with a bare environment may still
# reach it.)
# tests/project/test_live_paths.py holds this list against install.sh and README's install steps.
LIVE_DIRS = ("/var/lib/gpuhc", "/etc/gpuhc", "/var/log/gpuhc", "/run/gpuhc", "/opt/gpuhc", "/opt/gpuhc.releases",
             "/usr/local/share/gpuhc")
LIVE_FILES = ("/usr/local/bin/gpuhc", "/usr/local/sbin/gpuhc-slack-webhook", "/usr/local/share/man/man1/gpuhc.1",
              "/usr/share/bash-completion/completions/gpuhc", "/etc/tmpfiles.d/gpuhc.conf",
              "/etc/tmpfiles.d/gpuhc-sweep.conf", "/etc/logrotate.d/gpuhc", "/etc/systemd/system/gpuhc-watch.service",
              "/etc/systemd/system/gpuhc-retest.service", "/etc/systemd/system/gpuhc-sweep.service",
              "/etc/systemd/system/gpuhc-sweep.timer", "/etc/cron.d/gpuhc-sweep")
TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"
MAX_ENTRIES = 20000  # a node's gpuhc state is a few hundred files; beyond this, the count says it


def covers(path: str) -> bool:
    """Is ``path`` one the snapshot watches?"""
    return path in LIVE_FILES or any(path == d or path.startswith(d + "/") for d in LIVE_DIRS)


def snapshot() -> dict[str, tuple]:
    """path -> (kind, size, mtime_ns) of everything under the live paths (links not followed)."""
    out: dict[str, tuple] = {}

    def note(path: str) -> None:
        try:
            st = os.lstat(path)
        except OSError:
            return
        out[path] = ("d" if os.path.isdir(path) and not os.path.islink(path) else "f", st.st_size, st.st_mtime_ns)

    for top in LIVE_DIRS:
        note(top)
        for root, dirs, files in os.walk(top):
            for name in dirs + files:
                note(os.path.join(root, name))
                if len(out) > MAX_ENTRIES:
                    return out
    for path in LIVE_FILES:
        note(path)
    if os.path.isdir(TEXTFILE_DIR):
        for name in os.listdir(TEXTFILE_DIR):
            if name.startswith(("gpuhc", ".gpuhc")):
                note(os.path.join(TEXTFILE_DIR, name))
    return out


def changes(before: dict[str, tuple], after: dict[str, tuple]) -> list[str]:
    """What the session did to the live paths, one line each: made, changed, removed."""
    out = [f"made {p}" for p in sorted(set(after) - set(before))]
    out += [f"removed {p}" for p in sorted(set(before) - set(after))]
    out += [f"changed {p}" for p in sorted(set(before) & set(after))
            if before[p] != after[p] and before[p][0] == "f"]
    return out


def isolated(argv: list[str]) -> list[str]:
    """``argv`` run in a mount namespace of its own where the live directories are empty
    scratch (tmpfs), for a test of gpuhc's built-in defaults, which name the live paths."""
    mounts = []
    for path in ("/var/lib/gpuhc", "/var/log", "/run/gpuhc", TEXTFILE_DIR, "/var/cache/gpuhc"):
        if os.path.isdir(path):
            mounts.append(f"mount -t tmpfs gpuhc-test {path}")
    script = " && ".join(mounts + ['exec "$@"'])
    return ["unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", script, "isolated", *argv]
