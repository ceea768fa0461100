"""The retire bundle: the evidence a vendor asks for, written when gpuhc or an admin retires a
node (docs/repair.md "The retire bundle").

A retired node leaves service for good, and the next step is usually an RMA. What the vendor
asks for is on the node now and may be gone after the repair: so, into one directory (or one
.tar.gz), published the way the epilog's post-mortem bundle is (:func:`gpuhc.postmortem.job.publish`:
root-only directories, files created exclusively, whole or not at all):

- ``retire.json``: node, time, why, the reason, the GPUs (index, UUID, serial, PCI), which of
  NVIDIA's published RMA criteria the evidence meets and the evidence beside them, what is missing;
- ``snapshot.yaml``: the node's readings, replayable with ``gpuhc check --nvml-scenario``;
- ``kernel.log`` and ``kernel-events.log``: the newest raw kernel lines and the parsed events;
- ``fault-history.jsonl``: this node's runs that drained it, kept it drained, were withheld by
  the breaker, resumed it or climbed the remediation ladder, as gpuhc's event log has them;
- ``nvidia-bug-report.log.gz``: NVIDIA's own report, where ``nvidia-bug-report.sh`` is installed,
  killed at its time bound (the run's deadline or ``slurm.retire_bundle.bug_report_timeout_s``).

Every part is best effort; a part that could not be had is named in ``missing``.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from typing import Any

from gpuhc.model.deadline import Deadline
from gpuhc.postmortem.job import _event_lines, _safe, _write, kernel_tail, publish

HISTORY_MAX_BYTES = 8 << 20  # of the event log's end read for the fault history
HISTORY_ACTIONS = ("drain", "keep", "blocked", "resume")

# NVIDIA's row remapper keeps a failure flag; NVIDIA GPU Memory Error Management ("Error
# Recovery and Response Flags", "RMA Policy Thresholds for Row-Remapping") defines it as the
# row-remapping failure of its RMA policy. Pre-Ampere page retirement holds at most 64 pages
# (same document, "Row Remapping", the comparison table), so a full table is reported beside it.
PAGE_RETIREMENT_MAX = 64
# Xids of memory errors the same document lists for in-band reporting (48 DBE, 63 and 64 the
# row-remapping InfoROM record written or failed, 94/95 contained and uncontained ECC).
MEMORY_XIDS = (48, 63, 64, 94, 95)


def rma_assessment(snapshot) -> list[dict[str, Any]]:
    """Per GPU: which published RMA criteria the readings meet, and the evidence beside them. Pure."""
    nvml = getattr(snapshot, "nvml", None)
    events = list(getattr(getattr(snapshot, "kernel", None), "events", None) or [])
    out = []
    for g in (nvml.gpus if nvml is not None else []):
        met, evidence = [], []
        if g.remap_failure:
            met.append("row-remapping failure (NVIDIA GPU Memory Error Management, RMA policy)")
        retired = (g.retired_pages_sbe or 0) + (g.retired_pages_dbe or 0)
        if retired >= PAGE_RETIREMENT_MAX:
            met.append(f"page retirement table full ({retired} of {PAGE_RETIREMENT_MAX} pages retired)")
        elif retired:
            evidence.append(f"{retired} pages retired (sbe {g.retired_pages_sbe}, dbe {g.retired_pages_dbe})")
        for label, value in (("uncorrectable ECC errors, aggregate", g.ecc_aggregate_uncorrected),
                             ("uncorrectable ECC errors, volatile", g.ecc_volatile_uncorrected),
                             ("rows remapped for uncorrectable errors", g.remap_uncorrectable)):
            if value:
                evidence.append(f"{label}: {value}")
        if g.remap_pending:
            evidence.append("row remapping pending (a reset applies it)")
        if g.lost:
            evidence.append("NVML has lost the GPU")
        xids: dict[int, int] = {}
        for ev in events:
            if ev.code in MEMORY_XIDS and ev.pci and g.pci_bus_id.startswith(ev.pci):
                xids[ev.code] = xids.get(ev.code, 0) + 1
        evidence += [f"Xid {code} x{n} in the kernel log" for code, n in sorted(xids.items())]
        out.append({"gpu": g.index, "uuid": g.uuid, "serial": g.serial, "pci": g.pci_bus_id,
                    "rma_criteria_met": met, "evidence": evidence})
    return out


def fault_history(event_log: str | None, node: str) -> tuple[list[str], str]:
    """This node's lines of gpuhc's event log that drained, kept, withheld, resumed or remediated
    it, oldest first, as written (JSON), and a note on where they came from."""
    from gpuhc.files.untrusted import UntrustedInputError, read_tail

    if not event_log:
        return [], "no event log configured (output.event_log)"
    try:
        data, cut = read_tail(event_log, HISTORY_MAX_BYTES, "event log")
    except (UntrustedInputError, OSError) as e:
        return [], f"event log not read: {e}"
    lines = []
    for raw in data.splitlines():
        if node.encode() not in raw:
            continue
        try:
            doc = json.loads(raw)
            sl = doc.get("slurm") or {}
        except (ValueError, AttributeError):
            continue
        if doc.get("node") == node and (sl.get("action") in HISTORY_ACTIONS or sl.get("remediation")):
            lines.append(json.dumps(doc, sort_keys=True))
    note = f"{len(lines)} runs from {event_log}" + (f" (its last {HISTORY_MAX_BYTES >> 20} MiB)" if cut else "")
    return lines, note


def bug_report(staging: str, binary: str, timeout_s: float) -> str:
    """Run nvidia-bug-report.sh into the bundle within ``timeout_s``; a note on how it ended."""
    from gpuhc.files.fsutil import UnsafePath, trusted_which

    try:  # run as root: only a program under the program rule, its real path (gpuhc/files/fsutil.py)
        exe = trusted_which(binary, binary)
    except UnsafePath as e:
        return f"{binary} not run: {e}"
    if exe is None:
        return f"{binary} not installed"
    if timeout_s < 1.0:
        return f"{binary} not run: no time left in this run"
    out = os.path.join(staging, "nvidia-bug-report.log")
    t0 = time.monotonic()
    try:
        cp = subprocess.run([exe, "--output-file", out], stdin=subprocess.DEVNULL, capture_output=True,
                            timeout=timeout_s, check=False, cwd=staging)
    except subprocess.TimeoutExpired:
        return f"{binary} killed at its time bound ({timeout_s:.0f}s); what it wrote is kept"
    except OSError as e:
        return f"{binary}: {e.strerror or e}"
    took = time.monotonic() - t0
    return f"{binary} exit {cp.returncode} after {took:.0f}s"


README = """gpuhc retire bundle: the evidence for a vendor (RMA) ticket

retire.json               node, time, why, reason, GPUs (index, UUID, serial, PCI), which of
                          NVIDIA's published RMA criteria the readings meet and the evidence
                          beside them; "missing" lists what could not be had
snapshot.yaml             the node's readings; replay: gpuhc check --nvml-scenario snapshot.yaml
kernel.log                the newest raw kernel-log lines ({kernel_note})
kernel-events.log         the NVRM/NVSwitch/mlx5 events the checks parsed
fault-history.jsonl       gpuhc's runs that drained, kept, resumed or remediated this node ({history_note})
nvidia-bug-report.log.gz  NVIDIA's report ({bug_note})
"""


def collect(staging: str, node: str, why: str, reason: str | None, snapshot, spec, settings: dict,
            event_log: str | None, now: float, deadline: Deadline) -> list[str]:
    """Write the bundle's files into ``staging``; return what is missing."""
    from gpuhc import __version__

    missing: list[str] = []
    parts: dict[str, Any] = {}
    if snapshot is not None:
        def snap() -> str:
            import yaml

            from gpuhc.sources.snapshot_format import dump_snapshot

            return yaml.safe_dump(dump_snapshot(snapshot), sort_keys=False, default_flow_style=None)

        parts["snapshot.yaml"] = snap
    else:
        missing.append("snapshot.yaml (the node could not be read)")
    limit = int(settings["kernel_lines"])
    try:
        lines, kernel_note = kernel_tail(spec, snapshot, limit, max(0.5, deadline.cap(5.0)))
    except Exception as e:  # best effort: a bug here must not cost the rest of the bundle
        lines, kernel_note = [], f"kernel log not read ({type(e).__name__}: {e})"
    history, history_note = fault_history(event_log, node)
    parts["kernel.log"] = lambda: "".join(x + "\n" for x in lines) if lines else f"# no raw lines: {kernel_note}\n"
    parts["kernel-events.log"] = lambda: "".join(x + "\n" for x in _event_lines(snapshot, limit))
    parts["fault-history.jsonl"] = lambda: "".join(x + "\n" for x in history)
    for name, make in parts.items():
        try:
            _write(os.path.join(staging, name), make())
        except Exception as e:
            missing.append(f"{name} ({type(e).__name__}: {e})")
    bug_note = bug_report(staging, settings["bug_report"], deadline.cap(float(settings["bug_report_timeout_s"]), keep=2.0))
    if not os.path.exists(os.path.join(staging, "nvidia-bug-report.log.gz")):
        missing.append(f"nvidia-bug-report.log.gz ({bug_note})")
    nvml = getattr(snapshot, "nvml", None)
    meta = {"node": node, "time": now, "why": why, "reason": reason, "gpuhc_version": __version__,
            "driver_version": getattr(nvml, "driver_version", None),
            "gpus": rma_assessment(snapshot), "kernel_log": {"lines": len(lines), "note": kernel_note},
            "fault_history": history_note, "bug_report": bug_note, "missing": missing}
    _write(os.path.join(staging, "README.txt"),
           README.format(kernel_note=kernel_note, history_note=history_note, bug_note=bug_note))
    _write(os.path.join(staging, "retire.json"), json.dumps(meta, indent=2) + "\n")
    return missing


def write_retire_bundle(settings: dict, fmt: str, node: str, why: str, reason: str | None, snapshot, spec,
                        event_log: str | None, now: float, deadline: Deadline) -> str:
    """Write and publish the bundle (``slurm.retire_bundle``); return its path. Raises OSError
    when nothing could be written and :class:`gpuhc.postmortem.job.UnsafeDirectory` (as root) for a
    directory others could write to."""
    name = f"{_safe(node)}-retired-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(now))}"
    return publish(settings["dir"], "slurm.retire_bundle.dir", name, fmt,
                   lambda staging: collect(staging, node, why, reason, snapshot, spec, settings, event_log, now,
                                           deadline), node, int(settings["keep"]))
