"""DCGM diagnostics: run ``dcgmi diag -r <level> -j`` when DCGM is installed and judge its JSON.

DCGM's diagnostic is NVIDIA's own acceptance test and knows things gpuhc does not (power and
thermal targets, PCIe replay under stress, EUD). gpuhc runs it after its own worker has exited
(DCGM refuses GPUs that another process holds) and turns each test result into a Result.

The JSON has changed shape across DCGM versions, so the parser goes by feature, not version:
the top key is "DCGM GPU Diagnostic" (3.x) or "DCGM Diagnostic" (4.x) and holds
``test_categories`` (or, in hand-edited files, the category list directly); a result names its
GPU by ``gpu_ids`` ("0" or "0,1"), ``gpu_id``, or ``entity_group``/``entity_id``; warnings are a
string, a list of strings, or a list of ``{"warning"/"message": ..}`` objects.

What a failure means depends on the test: hardware, integration and stress tests failing is a
hardware finding (drain + hardware ticket; a pending row remap: drain + GPU reset); deployment
tests failing (missing libraries, permissions, environment variables, a graphics process) say
the diagnostic could not test the hardware, which is an error, not a verdict on the node.
"""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

from gpuhc.model.result import Action, Result, Status

CHECK = "dcgm"
SEARCH = ("/usr/bin/dcgmi", "/usr/local/bin/dcgmi", "/usr/sbin/dcgmi")
# deployment tests that are about the hardware rather than the software around it
HARDWARE_DEPLOYMENT = {"page retirement/row remap": Action.RESET_GPU, "inforom": Action.DRAIN_TICKET}


class DcgmParseError(ValueError):
    pass


def find_dcgmi(configured: str | None = None) -> str | None:
    """The dcgmi executable: configured path, PATH, then the usual places (Slurm's prolog and
    health check run with no PATH at all)."""
    from gpuhc.files.fsutil import UnsafePath, trusted_which

    if configured and not os.access(configured, os.X_OK):
        return None
    try:  # run as root: only a program under the program rule, its real path (gpuhc/files/fsutil.py)
        return trusted_which(configured or "dcgmi", "dcgmi", tuple(os.path.dirname(p) for p in SEARCH))
    except UnsafePath:
        return None


def run(level: int, timeout_s: float, configured: str | None, thr: dict[str, Any]) -> list[Result]:
    exe = find_dcgmi(configured)
    if exe is None:
        if configured:
            return [Result(CHECK, Status.ERROR, f"dcgmi not executable at {configured} (config active.dcgm_path)")]
        return [Result(CHECK, Status.NA, "DCGM not installed (no dcgmi)")]
    argv = [exe, "diag", "-r", str(level), "-j"]
    try:
        proc = subprocess.run(argv, capture_output=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return [Result(CHECK, Status.ERROR, f"dcgmi diag -r {level} timed out after {timeout_s:.0f}s")]
    except OSError as e:
        return [Result(CHECK, Status.ERROR, f"cannot run {exe}: {e.strerror or e}")]
    text = proc.stdout.decode(errors="replace")
    try:
        doc = parse_json_text(text)
    except DcgmParseError as e:
        tail = " ".join((proc.stderr.decode(errors="replace") or text).split())[-200:]
        return [Result(CHECK, Status.ERROR, f"dcgmi diag -r {level} (exit {proc.returncode}): {e}"
                       + (f": {tail}" if tail else ""))]
    return judge(doc, thr, level)


def parse_json_text(text: str) -> dict[str, Any]:
    """dcgmi may print a line or two before its JSON; take the outermost object."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        raise DcgmParseError("no JSON in the output")
    try:
        doc = json.loads(text[start:end + 1])
    except ValueError as e:
        raise DcgmParseError(f"unreadable JSON ({e})") from None
    if not isinstance(doc, dict):
        raise DcgmParseError("JSON is not an object")
    return doc


def tests(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Flatten to [{category, test, status, gpus, warnings, info}], one per test result."""
    diag = next((v for k, v in doc.items() if "diagnostic" in k.lower()), None)
    if diag is None:
        raise DcgmParseError("no 'DCGM Diagnostic' section")
    if isinstance(diag, dict):
        if diag.get("runtime_error"):
            raise DcgmParseError(f"DCGM runtime error: {' '.join(str(diag['runtime_error']).split())}")
        cats = diag.get("test_categories")
    else:
        cats = diag  # hand-edited files put the category list directly under the top key
    if not isinstance(cats, list):
        raise DcgmParseError("no test_categories list")
    out = []
    for cat in cats:
        if not isinstance(cat, dict):
            continue
        for test in cat.get("tests") or []:
            if not isinstance(test, dict):
                continue
            for res in test.get("results") or []:
                if isinstance(res, dict):
                    out.append({
                        "category": str(cat.get("category", "")),
                        "test": str(test.get("name", "?")),
                        "status": str(res.get("status", "")).strip().lower(),
                        "gpus": _gpus(res),
                        "warnings": _texts(res.get("warnings") or res.get("warning")),
                        "info": _texts(res.get("info")),
                    })
    return out


def _gpus(res: dict[str, Any]) -> list[int]:
    raw = res.get("gpu_ids", res.get("gpu_id"))
    if raw is None and str(res.get("entity_group", "GPU")).upper() == "GPU":
        raw = res.get("entity_id")
    if raw is None:
        return []
    items = raw if isinstance(raw, list) else str(raw).split(",")
    return [int(x) for x in (str(i).strip() for i in items) if x.isascii() and x.isdigit()]


def _texts(v: Any) -> list[str]:
    if v is None:
        return []
    if isinstance(v, (str, int, float)):
        return [" ".join(str(v).split())]
    if isinstance(v, dict):
        return [" ".join(str(v.get("warning") or v.get("message") or v).split())]
    if isinstance(v, list):
        return [t for x in v for t in _texts(x)]
    return [str(v)]


def judge(doc: dict[str, Any], thr: dict[str, Any], level: int | None = None) -> list[Result]:
    run_name = f"dcgmi diag -r {level}" if level else "dcgmi diag"
    try:
        items = tests(doc)
    except DcgmParseError as e:
        return [Result(CHECK, Status.ERROR, f"{run_name}: {e}")]
    if not items:
        return [Result(CHECK, Status.ERROR, f"{run_name}: no test results")]
    warn_is_fail = bool(thr.get("warn_is_fail", False))
    out: list[Result] = []
    counts: dict[str, int] = {}
    for t in items:
        counts[t["status"]] = counts.get(t["status"], 0) + 1
        subject = ",".join(f"gpu{g}" for g in t["gpus"]) or "node"
        why = "; ".join(t["warnings"])[:200] or "no detail"
        name = f"{t['category']}/{t['test']}" if t["category"] else t["test"]
        if t["status"] == "fail" or (t["status"] == "warn" and warn_is_fail):
            status, action = _failure(t)
            out.append(Result(CHECK, status, f"{run_name}: {name} failed on {subject}: {why}", subject,
                              t["status"], "pass", action))
        elif t["status"] == "warn":
            out.append(Result(CHECK, Status.WARN, f"{run_name}: {name} warns on {subject}: {why}", subject))
    if not out:
        summary = ", ".join(f"{n} {s or 'unknown'}" for s, n in sorted(counts.items()))
        out.append(Result(CHECK, Status.PASS, f"{run_name}: {summary}", "node", counts))
    return out


def _failure(t: dict[str, Any]) -> tuple[Status, Action]:
    test = t["test"].strip().lower()
    if t["category"].strip().lower() in ("deployment", "software"):
        action = HARDWARE_DEPLOYMENT.get(test)
        if action is None:
            return Status.ERROR, Action.NONE  # the diagnostic could not test the hardware
        return Status.FAIL, action
    return Status.FAIL, Action.DRAIN_TICKET
