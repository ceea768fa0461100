"""Post-mortem bundle for a failed job, written by the epilog.

When a job ends non-zero, the evidence that explains it (an Xid a second before the crash, an IB
port that went down, a GPU that fell off the bus) is on the node *now* and may be gone after the
next reboot. The epilog copies it into one directory (or one .tar.gz) an admin can attach to a
ticket:

- ``README.txt``: what each file is, and where this bundle's kernel lines came from;
- ``job.json``: node, job id, user, the exit code as Slurm gave it, time, GPUs, gpuhc version;
- ``results.json``: this epilog's run (``RunReport.to_dict()``);
- ``snapshot.yaml``: the node's readings in the scenario format, so anyone can replay the verdict
  with ``gpuhc check --nvml-scenario snapshot.yaml``;
- ``kernel.log``: the newest raw kernel-log lines (``postmortem_kernel_lines`` of them), read from
  where the checks read theirs (``/dev/kmsg``, else ``dmesg``, or the recorded file), bounded in
  bytes and time, one printable line each; a replayed scenario has no raw lines, and the file
  says so in its only line;
- ``kernel-events.log``: the NVRM/NVSwitch/mlx5 events the checks parsed, one per line;
- ``ib.json``: InfiniBand ports and their counters.

Safety, because the epilog runs as root in a directory an admin configured: as root, a bundle
directory not owned by root or writable by group or others, or inside one that is, is refused
(someone could plant a symlink there and have root overwrite any file; :mod:`gpuhc.files.fsutil`);
every file is created with ``O_EXCL`` (and ``O_NOFOLLOW``) in a fresh ``mkdtemp`` staging
directory, and a ``.tar.gz`` goes through a ``mkstemp`` temporary file. A refusal costs the bundle, never the node or the job: the epilog
logs it loudly and goes on.

Bundles are named ``<node>-<jobid>-<UTC time>``, mode 0700 (they hold user names and job ids),
and only the newest ``postmortem_keep`` of a node are kept. Every part is best effort: a part
that cannot be written is listed in ``job.json`` under ``missing`` instead of losing the rest.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import re
import shutil
import stat
import tarfile
import tempfile
import time
from typing import Any

from gpuhc.errors import GpuhcError
from gpuhc.files.fsutil import UnsafePath, check_dir_chain, make_dirs, write_new

_SAFE = re.compile(r"[^A-Za-z0-9._-]+")
KMSG = "/dev/kmsg"  # the live kernel log; tests point it at a recorded file
DMESG: str | None = None  # dmesg binary; None: found as gpuhc.sources.kernel_log finds it
TAIL_MAX_BYTES = 1 << 20  # raw kernel lines kept in a bundle, at most
TAIL_SCAN_BYTES = 16 << 20  # read at most this much of /dev/kmsg (a ring buffer is a few MiB)
LINE_MAX_CHARS = 2000


# A directory root must not write in (someone else could plant links there): the refusal every
# file root writes shares (gpuhc.files.fsutil).
UnsafeDirectory = UnsafePath


def check_root_dir(directory: str, what: str) -> None:
    """As root, refuse a bundle directory that is not root's alone, or sits in one that is not."""
    check_dir_chain(directory, what)


def _safe(text: str) -> str:
    return _SAFE.sub("_", text)[:64] or "unknown"


def bundle_name(node: str, job_id: str, when: float) -> str:
    return f"{_safe(node)}-{_safe(job_id)}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(when))}"


def _write(path: str, text: str) -> None:
    write_new(path, text.encode("utf-8"), 0o600)


def _event_lines(snapshot, limit: int) -> list[str]:
    if snapshot is None or snapshot.kernel is None or limit <= 0:
        return []
    lines = []
    for ev in snapshot.kernel.events[-limit:]:
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ev.time)) if ev.time else "-"
        parts = [when, ev.kind.value]
        for label, value in (("pci", ev.pci), ("code", ev.code), ("dev", ev.device), ("port", ev.port),
                             ("state", ev.state)):
            if value is not None:
                parts.append(f"{label}={value}")
        lines.append(" ".join(parts) + " " + " ".join(ev.message.split()))
    return lines


# ---------------------------------------------------------------------------- raw kernel lines


def printable(line: str) -> str:
    """One printable line: control characters escaped (kmsg itself escapes most), length capped."""
    out = "".join(c if c.isprintable() else (f"\\x{ord(c):02x}" if ord(c) < 256 else "?") for c in line)
    return out if len(out) <= LINE_MAX_CHARS else out[:LINE_MAX_CHARS] + "..."


class _Tail:
    """The newest ``limit`` lines fed to it, within TAIL_MAX_BYTES."""

    def __init__(self, limit: int):
        self.lines: collections.deque[str] = collections.deque(maxlen=max(0, limit))

    def add(self, line: str) -> None:
        if self.lines.maxlen:
            self.lines.append(printable(line))

    def result(self) -> list[str]:
        out, size = [], 0
        for line in reversed(self.lines):
            size += len(line.encode()) + 1
            if size > TAIL_MAX_BYTES:
                break
            out.append(line)
        return out[::-1]


def _kmsg_line(record: str, boot: float) -> str | None:
    """``prio,seq,usec,flags;text`` -> ``<UTC time> text``; continuation lines (`` KEY=value``) drop."""
    if not record or record.startswith(" "):
        return None
    head, sep, text = record.partition(";")
    fields = head.split(",")
    if not sep or len(fields) < 3 or not fields[2].isdigit():
        return record  # not kmsg-shaped (a copy of another log): keep it as it is
    when = boot + int(fields[2]) / 1e6
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(when)) + f".{int(when * 1e6) % 1000000:06d}Z {text}"


def _kmsg_tail(path: str, limit: int, deadline: float) -> list[str]:
    """Newest lines of /dev/kmsg without blocking, within TAIL_SCAN_BYTES and the deadline."""
    from gpuhc.sources.kernel_log import boot_time

    boot = boot_time()
    tail, partial, seen = _Tail(limit), b"", 0
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        while seen < TAIL_SCAN_BYTES and time.monotonic() < deadline:
            try:
                chunk = os.read(fd, 16384)
            except BlockingIOError:
                break  # caught up with the ring buffer
            except BrokenPipeError:
                continue  # the record we were about to read was overwritten: go on
            if not chunk:
                break
            seen += len(chunk)
            *whole, partial = (partial + chunk).split(b"\n")
            for raw in whole:
                line = _kmsg_line(raw.decode("utf-8", "replace"), boot)
                if line is not None:
                    tail.add(line)
    finally:
        os.close(fd)
    return tail.result()


def _dmesg_tail(limit: int, timeout_s: float) -> list[str]:
    from gpuhc.sources.kernel_log import DmesgSource

    dmesg = DmesgSource(timeout_s=max(0.1, timeout_s), binary=DMESG)
    exe = dmesg._find()
    proc = dmesg._run([exe, "--time-format=iso"])
    if proc.returncode != 0:
        proc = dmesg._run([exe])
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise OSError(f"{exe} exit {proc.returncode}: {err[-1] if err else 'no message'}")
    tail = _Tail(limit)
    for line in proc.stdout[-TAIL_SCAN_BYTES:].decode("utf-8", "replace").splitlines():
        tail.add(line)
    return tail.result()


def _file_tail(path: str, limit: int) -> list[str]:
    from gpuhc.sources.kernel_log import recorded_tail

    data = recorded_tail(path, TAIL_SCAN_BYTES)  # no symlink, no FIFO: it cannot hang the epilog
    tail = _Tail(limit)
    for line in data.decode("utf-8", "replace").splitlines():
        tail.add(line)
    return tail.result()


def kernel_tail(spec, snapshot, limit: int, time_s: float) -> tuple[list[str], str]:
    """The newest ``limit`` raw kernel-log lines from where this run's checks read the kernel
    log, and a note saying where they came from (or why there are none)."""
    if limit <= 0:
        return [], "postmortem_kernel_lines is 0"
    source = getattr(getattr(snapshot, "kernel", None), "source", "") or ""
    wanted = spec.kernel_log if spec is not None else None
    if "(scenario" in source or (not source and spec is not None and spec.nvml_scenario and not wanted):
        return [], f"replayed from a scenario ({source or spec.nvml_scenario}): no raw kernel lines"
    if wanted and wanted not in ("kmsg", "dmesg"):
        tries = [("file", wanted)]
    elif wanted == "dmesg" or source == "dmesg":
        tries = [("dmesg", "dmesg")]
    else:
        tries = [("kmsg", KMSG), ("dmesg", "dmesg")]
    deadline = time.monotonic() + time_s
    problems = []
    for kind, where in tries:
        try:
            if kind == "file":
                lines = _file_tail(where, limit)
            elif kind == "kmsg":
                lines = _kmsg_tail(where, limit, deadline)
            else:
                lines = _dmesg_tail(limit, deadline - time.monotonic())
            return lines, f"{len(lines)} lines from {where}"
        except (OSError, GpuhcError) as e:
            problems.append(f"{where}: {getattr(e, 'strerror', None) or e}")
    return [], "kernel log unreadable (" + "; ".join(problems) + ")"


# ---------------------------------------------------------------------------- the bundle


README = """gpuhc post-mortem bundle of a failed job

job.json           node, job id, user, exit code, GPUs, time, gpuhc version; "missing" lists
                   the parts that could not be written
results.json       the epilog's check results
snapshot.yaml      the node's readings; replay with: gpuhc check --nvml-scenario snapshot.yaml
kernel.log         the newest raw kernel-log lines ({kernel_note})
kernel-events.log  the NVRM/NVSwitch/mlx5 events the checks parsed, one per line
ib.json            InfiniBand ports and their counters
"""


def collect(staging: str, flow, report, tail_s: float = 2.0) -> list[str]:
    """Write the bundle's files into ``staging``; return the parts that could not be written."""
    from gpuhc import __version__

    env, slurm = flow.env, flow.slurm
    snapshot = getattr(report, "snapshot", None)
    limit = int(slurm["postmortem_kernel_lines"])
    missing: list[str] = []
    parts: dict[str, Any] = {}
    if report is not None:
        parts["results.json"] = lambda: json.dumps(report.to_dict(), indent=2) + "\n"
    else:
        missing.append("results.json (the epilog checks did not run)")
    if snapshot is not None:
        def snap() -> str:
            import yaml

            from gpuhc.sources.snapshot_format import dump_snapshot

            return yaml.safe_dump(dump_snapshot(snapshot), sort_keys=False, default_flow_style=None)

        parts["snapshot.yaml"] = snap
    try:
        lines, note = kernel_tail(getattr(flow.opts, "sources", None), snapshot, limit, tail_s)
    except Exception as e:  # best effort: a bug here must not cost the rest of the bundle
        lines, note = [], f"kernel log not read ({type(e).__name__}: {e})"
    parts["kernel.log"] = lambda: "".join(x + "\n" for x in lines) if lines else f"# no raw lines: {note}\n"
    parts["kernel-events.log"] = lambda: "".join(x + "\n" for x in _event_lines(snapshot, limit))
    parts["ib.json"] = lambda: json.dumps(_ib(snapshot), indent=2) + "\n"
    parts["README.txt"] = lambda: README.format(kernel_note=note)
    for name, make in parts.items():
        try:
            _write(os.path.join(staging, name), make())
        except Exception as e:
            missing.append(f"{name} ({type(e).__name__}: {e})")
    meta = {
        "node": flow.node,
        "job_id": env.get("SLURM_JOB_ID"),
        "user": env.get("SLURM_JOB_USER"),
        "uid": env.get("SLURM_JOB_UID"),
        "exit_code": env.get("SLURM_JOB_EXIT_CODE"),
        "exit_code2": env.get("SLURM_JOB_EXIT_CODE2"),
        "job_gpus": env.get("SLURM_JOB_GPUS") or env.get("CUDA_VISIBLE_DEVICES"),
        "nodelist": env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST"),
        "time": flow.now(),
        "gpuhc_version": __version__,
        "status": report.status.value if report is not None else None,
        "kernel_log": {"lines": len(lines), "note": note},
        "missing": missing,
    }
    _write(os.path.join(staging, "job.json"), json.dumps(meta, indent=2) + "\n")
    return missing


def _ib(snapshot) -> list[dict[str, Any]]:
    if snapshot is None or not snapshot.ib_ports:
        return []
    return [{"device": p.device, "port": p.port, "state": p.state, "phys_state": p.phys_state,
             "rate_gbps": p.rate_gbps, "link_layer": p.link_layer, "counters": dict(p.counters)}
            for p in snapshot.ib_ports]


def write_bundle(flow, report, tail_s: float = 2.0) -> str:
    """Write the bundle; return its path. Raises OSError when nothing could be written, and
    :class:`UnsafeDirectory` (as root) for a directory others could write to."""
    slurm = flow.slurm
    name = bundle_name(flow.node, flow.env.get("SLURM_JOB_ID", "nojob"), flow.now())
    return publish(slurm["postmortem_dir"], "slurm.postmortem_dir", name, slurm["postmortem_format"],
                   lambda staging: collect(staging, flow, report, tail_s), flow.node, int(slurm["postmortem_keep"]))


def publish(root: str, what: str, name: str, fmt: str, fill, node: str, keep: int) -> str:
    """Make ``root`` (0700) if needed, refuse it as root when others could write there, have
    ``fill(staging)`` write the files into a fresh private directory, then publish it under
    ``name`` (a directory, or ``name.tar.gz`` when ``fmt`` is "tar.gz") whole or not at all, and
    keep the newest ``keep`` of ``node``'s bundles there. The retire bundle
    (:mod:`gpuhc.postmortem.retire`) is published the same way."""
    make_dirs(root, 0o700, what)
    check_root_dir(root, what)
    staging = tempfile.mkdtemp(prefix=f".{name}.", dir=root)  # mode 0700; renamed when complete
    try:
        fill(staging)
        if fmt == "tar.gz":
            final = os.path.join(root, name + ".tar.gz")
            fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tar.gz.tmp", dir=root)  # O_EXCL, 0600
            try:
                with os.fdopen(fd, "wb") as f, tarfile.open(fileobj=f, mode="w:gz") as tar:
                    tar.add(staging, arcname=name)
                os.replace(tmp, final)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        else:
            final = os.path.join(root, name)
            if os.path.lexists(final):  # same job, same second: keep both
                final += f".{os.getpid()}"
            os.rename(staging, final)  # mkdtemp made it 0700 whatever the umask
            staging = ""
    finally:
        if staging:
            shutil.rmtree(staging, ignore_errors=True)
    prune(root, node, keep)
    return final


def prune(root: str, node: str, keep: int) -> list[str]:
    """Remove this node's oldest bundles beyond ``keep`` (names sort by time within a node)."""
    prefix = _safe(node) + "-"
    mine = []
    for entry in os.listdir(root):
        if entry.startswith(prefix) and not entry.endswith(".tmp"):
            path = os.path.join(root, entry)
            try:
                mine.append((os.lstat(path).st_mtime, entry, path))
            except OSError:
                continue
    mine.sort()
    removed = []
    for _, _, path in mine[: max(0, len(mine) - keep)]:
        try:
            if stat.S_ISDIR(os.lstat(path).st_mode):  # lstat: a link is removed, never followed
                shutil.rmtree(path)
            else:
                os.unlink(path)
        except OSError:
            continue
        removed.append(path)
    return removed
