"""Topology: how the GPUs reach each other and the NICs, compared with what the node should be.

Read from NVML (no CuPy needed): per GPU its active NVLinks and NUMA node; per GPU pair whether
NVML reports NVLink peer-to-peer and their nearest common PCIe ancestor (the letters
``nvidia-smi topo -m`` prints); per GPU the nearest InfiniBand/RoCE device from sysfs. Keys are
PCI bus ids in the baseline (``topology: {gpus: {pci: ..}, pairs: {"pciA|pciB": ..}}``), because
a GPU index can move between boots while its slot cannot.

Judging: against the node's baseline when there is one (lost NVLinks or a pair that fell back to
PCIe fail with drain + hardware ticket; moved NUMA or NIC affinity warns); otherwise against the
profile (NVLinks per GPU, every pair over NVLink on SXM boards).
"""

from __future__ import annotations

import os
from typing import Any

from gpuhc.active.rates import gpu_order
from gpuhc.model.pci import norm_pci
from gpuhc.model.result import Action, Result, Status

CHECK = "topology"
# nvmlGpuTopologyLevel_t -> nvidia-smi's letters
LEVELS = {0: "SELF", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
SYSFS = "/sys"


# ------------------------------------------------------------------------------- worker side


def measure(params: dict, devices: list[dict]) -> dict[str, Any]:
    from gpuhc.active.nvml_probe import _nvml, _try, handle_for_pci

    nv = _nvml()
    gpus: dict[str, Any] = {}
    handles = {}
    for d in devices:
        pci = norm_pci(d["pci"])
        h = handle_for_pci(nv, d["pci"]) if nv else None
        g: dict[str, Any] = {"subject": d["subject"], "numa": _numa(pci), "nvlinks_active": None}
        if h is not None:
            handles[d["subject"]] = h
            g["nvlinks_active"] = _active_links(nv, h)
        g["nic"] = nearest_nic(pci, params.get("sysfs", SYSFS))
        gpus[pci] = g
    pairs: dict[str, Any] = {}
    subjects = sorted(handles, key=gpu_order)
    for i, a in enumerate(subjects):
        for b in subjects[i + 1:]:
            ha, hb = handles[a], handles[b]
            level = _try(nv.nvmlDeviceGetTopologyCommonAncestor, ha, hb)
            nvl = _try(nv.nvmlDeviceGetP2PStatus, ha, hb, nv.NVML_P2P_CAPS_INDEX_NVLINK)
            pairs[f"{a}|{b}"] = {
                "link": "nvlink" if nvl == 0 else "pcie",  # NVML_P2P_STATUS_OK == 0
                "level": LEVELS.get(level, str(level)) if level is not None else None,
            }
    return {"gpus": gpus, "pairs": pairs, "nvml": nv is not None}


def _active_links(nv, h) -> int | None:
    active, supported = 0, False
    for link in range(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18)):
        try:
            state = nv.nvmlDeviceGetNvLinkState(h, link)
        except Exception:
            continue  # a link index past the GPU's count, or NOT_SUPPORTED
        supported = True
        active += 1 if state else 0
    return active if supported else None


def _numa(pci: str, root: str = SYSFS) -> int | None:
    try:
        with open(os.path.join(root, "bus", "pci", "devices", pci, "numa_node"), encoding="ascii") as f:
            v = int(f.read().strip())
        return v if v >= 0 else None
    except (OSError, ValueError):
        return None


def nearest_nic(gpu_pci: str, root: str = SYSFS) -> dict[str, Any] | None:
    """The RDMA device sharing the longest PCIe path with the GPU (its PCIe switch, ideally)."""
    gpath = _pci_path(gpu_pci, root)
    ib = os.path.join(root, "class", "infiniband")
    if not gpath or not os.path.isdir(ib):
        return None
    best = None
    for name in sorted(os.listdir(ib)):
        npath = os.path.realpath(os.path.join(ib, name, "device"))
        parts_n = npath.split(os.sep)
        common = 0
        for x, y in zip(gpath.split(os.sep), parts_n):
            if x != y:
                break
            common += 1
        cand = {"name": name, "pci": parts_n[-1], "shared_depth": common}
        if best is None or common > best["shared_depth"]:
            best = cand
    return best


def _pci_path(pci: str, root: str) -> str | None:
    p = os.path.join(root, "bus", "pci", "devices", pci)
    return os.path.realpath(p) if os.path.exists(p) else None


# ------------------------------------------------------------------------------- parent side


def baseline_section(data: dict[str, Any]) -> dict[str, Any]:
    """What `gpuhc baseline capture` stores under ``topology``: the same shape, keyed by PCI."""
    by_subject = {g["subject"]: pci for pci, g in (data.get("gpus") or {}).items()}
    pairs = {}
    for key, p in (data.get("pairs") or {}).items():
        a, b = key.split("|")
        pairs["|".join(sorted((by_subject.get(a, a), by_subject.get(b, b))))] = dict(p)
    gpus = {pci: {k: v for k, v in g.items() if k != "subject"} for pci, g in (data.get("gpus") or {}).items()}
    return {"gpus": gpus, "pairs": pairs}


def judge(data: dict[str, Any], thr: dict[str, Any], baseline: dict[str, Any] | None = None) -> list[Result]:
    gpus = data.get("gpus") or {}
    if not gpus:
        return [Result(CHECK, Status.NA, "no GPU visible to read a topology from")]
    now = baseline_section(data)
    subject = {pci: g["subject"] for pci, g in gpus.items()}
    base = (baseline or {}).get("topology") if isinstance(baseline, dict) else None
    out = _against_baseline(now, base, subject) if base else _against_profile(now, thr, subject)
    if not [r for r in out if r.status is not Status.PASS]:
        links = [g.get("nvlinks_active") for g in now["gpus"].values()]
        kinds = sorted({p["link"] for p in now["pairs"].values()})
        text = f"{len(gpus)} GPUs"
        if any(x is not None for x in links):
            text += f", NVLinks active per GPU: {'/'.join(str(x) for x in sorted(set(l for l in links if l is not None)))}"
        if kinds:
            text += f", pairs over {' and '.join(kinds)}"
        numas = sorted({g.get('numa') for g in now["gpus"].values() if g.get("numa") is not None})
        if numas:
            text += f", NUMA nodes {','.join(map(str, numas))}"
        text += " (matches the baseline)" if base else ""
        out = [Result(CHECK, Status.PASS, text, "node", now)]
    return out


def _against_profile(now: dict, thr: dict, subject: dict) -> list[Result]:
    out = []
    want = thr.get("nvlinks_per_gpu")
    for pci, g in now["gpus"].items():
        have = g.get("nvlinks_active")
        if want and have is not None and have < want:
            out.append(Result(CHECK, Status.FAIL, f"{subject[pci]}: {have} of {want} NVLinks active", subject[pci],
                              have, want, Action.DRAIN_TICKET))
    if thr.get("all_pairs_nvlink"):
        for key, p in now["pairs"].items():
            if p["link"] != "nvlink":
                a, b = (subject.get(x, x) for x in key.split("|"))
                out.append(Result(CHECK, Status.FAIL, f"{a} and {b} reach each other over PCIe ({p.get('level')}), "
                                  "not NVLink", f"{a}|{b}", p, "nvlink", Action.DRAIN_TICKET))
    return out


def _against_baseline(now: dict, base: dict, subject: dict) -> list[Result]:
    out = []
    bg = base.get("gpus") or {}
    for pci, b in bg.items():
        pci_n = norm_pci(pci)
        g = now["gpus"].get(pci_n)
        if g is None:
            out.append(Result(CHECK, Status.FAIL, f"GPU {pci_n} of the baseline is missing", pci_n, None, pci_n,
                              Action.DRAIN_TICKET))
            continue
        s = subject[pci_n]
        if b.get("nvlinks_active") is not None and (g.get("nvlinks_active") or 0) < b["nvlinks_active"]:
            out.append(Result(CHECK, Status.FAIL, f"{s}: {g.get('nvlinks_active')} NVLinks active, baseline "
                              f"{b['nvlinks_active']}", s, g.get("nvlinks_active"), b["nvlinks_active"],
                              Action.DRAIN_TICKET))
        if b.get("numa") is not None and g.get("numa") != b["numa"]:
            out.append(Result(CHECK, Status.WARN, f"{s}: NUMA node {g.get('numa')}, baseline {b['numa']}", s,
                              g.get("numa"), b["numa"]))
        bn, gn = (b.get("nic") or {}).get("name"), (g.get("nic") or {}).get("name")
        if bn and gn != bn:
            out.append(Result(CHECK, Status.WARN, f"{s}: nearest NIC {gn}, baseline {bn}", s, gn, bn))
    for key, b in (base.get("pairs") or {}).items():
        key_n = "|".join(sorted(norm_pci(x) for x in key.split("|")))
        p = now["pairs"].get(key_n)
        if p is None:
            continue  # a missing GPU was reported above
        if b.get("link") == "nvlink" and p["link"] != "nvlink":
            a, c = (subject.get(x, x) for x in key_n.split("|"))
            out.append(Result(CHECK, Status.FAIL, f"{a} and {c} lost their NVLink path (now {p['link']}, "
                              f"{p.get('level')})", f"{a}|{c}", p, b, Action.DRAIN_TICKET))
    for pci in now["gpus"]:
        if pci not in {norm_pci(x) for x in bg}:
            out.append(Result(CHECK, Status.WARN, f"{subject[pci]} ({pci}) is not in the baseline", subject[pci]))
    return out
