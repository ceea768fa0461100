"""Post-mortem bundle for a failed job, written by the epilog.

When a job ends non-zero, the evidence that explains it (an Xid a second before the crash, an IB
port that went down, a GPU that fell off the bus) is on the node *now* and may be gone after the
next reboot. The epilog copies it into one directory (or one .tar.gz) an admin can attach to a
ticket:

- ``job.json``: node, job id, user, the exit code as Slurm gave it, time, GPUs, gpuhc version;
- ``results.json``: this epilog's run (``RunReport.to_dict()``);
- ``snapshot.yaml``: the node's readings in the scenario format, so anyone can replay the verdict
  with ``gpuhc check --nvml-scenario snapshot.yaml``;
- ``kernel.log``: the most recent NVRM/NVSwitch/mlx5 events, one per line;
- ``ib.json``: InfiniBand ports and their counters.

Bundles are named ``<node>-<jobid>-<UTC time>``, mode 0700 (they hold user names and job ids),
and only the newest ``postmortem_keep`` of a node are kept. Every part is best effort: a part
that cannot be written is listed in ``job.json`` under ``missing`` instead of losing the rest.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tarfile
import tempfile
import time
from typing import Any

_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def _safe(text: str) -> str:
    return _SAFE.sub("_", text)[:64] or "unknown"


def bundle_name(node: str, job_id: str, when: float) -> str:
    return f"{_safe(node)}-{_safe(job_id)}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(when))}"


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)


def _kernel_lines(snapshot, limit: int) -> list[str]:
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


def _ib(snapshot) -> list[dict[str, Any]]:
    if snapshot is None or not snapshot.ib_ports:
        return []
    return [{"device": p.device, "port": p.port, "state": p.state, "phys_state": p.phys_state,
             "rate_gbps": p.rate_gbps, "link_layer": p.link_layer, "counters": dict(p.counters)}
            for p in snapshot.ib_ports]


def collect(staging: str, flow, report) -> list[str]:
    """Write the bundle's files into ``staging``; return the parts that could not be written."""
    from gpuhc import __version__

    env, slurm = flow.env, flow.slurm
    snapshot = getattr(report, "snapshot", None)
    missing: list[str] = []
    parts: dict[str, Any] = {}
    if report is not None:
        parts["results.json"] = lambda: json.dumps(report.to_dict(), indent=2) + "\n"
    else:
        missing.append("results.json (the epilog checks did not run)")
    if snapshot is not None:
        def snap() -> str:
            import yaml

            from gpuhc.sources.snapshot_io import dump_snapshot

            return yaml.safe_dump(dump_snapshot(snapshot), sort_keys=False, default_flow_style=None)

        parts["snapshot.yaml"] = snap
    parts["kernel.log"] = lambda: "".join(x + "\n" for x in _kernel_lines(snapshot, int(slurm["postmortem_kernel_lines"])))
    parts["ib.json"] = lambda: json.dumps(_ib(snapshot), indent=2) + "\n"
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
        "missing": missing,
    }
    _write(os.path.join(staging, "job.json"), json.dumps(meta, indent=2) + "\n")
    return missing


def write_bundle(flow, report) -> str:
    """Write the bundle; return its path. Raises OSError when nothing could be written."""
    slurm = flow.slurm
    root = slurm["postmortem_dir"]
    os.makedirs(root, mode=0o700, exist_ok=True)
    name = bundle_name(flow.node, flow.env.get("SLURM_JOB_ID", "nojob"), flow.now())
    staging = tempfile.mkdtemp(prefix=f".{name}.", dir=root)  # mode 0700; renamed when complete
    try:
        collect(staging, flow, report)
        if slurm["postmortem_format"] == "tar.gz":
            final = os.path.join(root, name + ".tar.gz")
            tmp = final + ".tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as f, tarfile.open(fileobj=f, mode="w:gz") as tar:
                tar.add(staging, arcname=name)
            os.replace(tmp, final)
        else:
            final = os.path.join(root, name)
            if os.path.exists(final):  # same job, same second: keep both
                final += f".{os.getpid()}"
            os.rename(staging, final)
            os.chmod(final, 0o700)
            staging = ""
    finally:
        if staging:
            shutil.rmtree(staging, ignore_errors=True)
    prune(root, flow.node, int(slurm["postmortem_keep"]))
    return final


def prune(root: str, node: str, keep: int) -> list[str]:
    """Remove this node's oldest bundles beyond ``keep`` (names sort by time within a node)."""
    prefix = _safe(node) + "-"
    mine = []
    for entry in os.listdir(root):
        if entry.startswith(prefix) and not entry.endswith(".tmp"):
            path = os.path.join(root, entry)
            mine.append((os.path.getmtime(path), entry, path))
    mine.sort()
    removed = []
    for _, _, path in mine[: max(0, len(mine) - keep)]:
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.unlink(path)
            except OSError:
                continue
        removed.append(path)
    return removed
