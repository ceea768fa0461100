"""GPU peer-to-peer: can every GPU reach every other directly, how fast, and without damage.

For each ordered pair the worker asks CUDA whether peer access is possible, enables it, copies
a buffer with ``cudaMemcpyPeerAsync`` (the source GPU's copy engine pushes over NVLink or
PCIe), times the copies with CUDA events and verifies the received data word by word. Pairs
run one at a time so each number is that link's own.

Judged against the topology (:mod:`gpuhc.active.topology`): an NVLink pair is held to the
NVLink expectation, a PCIe pair to the PCIe one, and each pair to the median of pairs of its
own kind. NVLink pairs that cannot reach each other fail (drain + reboot: usually a fabric or
driver state that a reboot clears); PCIe pairs without P2P only warn (ACS or an IOMMU often
forbid it by design). Corrupted data over a link, or a slow link, fails with drain + hardware
ticket. Each pair's result carries its own action.
"""

from __future__ import annotations

from typing import Any

from gpuhc.active.rates import Finding, judge_rates, gpu_order
from gpuhc.model.result import Action, Result, Status

CHECK = "p2p"
RANDOM_PATTERN = 4  # kernels.PATTERNS.index("random")


def measure(params: dict, devices: list[dict]) -> dict[str, Any]:
    import numpy as np

    from gpuhc.active import gpu

    cp = gpu.cupy()
    if len(devices) < 2:
        return {"pairs": {}, "gpus": len(devices)}
    nbytes = int(params["mib"]) << 20
    words = nbytes // 8
    repeats = int(params.get("repeats", 5))
    seed = int(params.get("seed", 1))
    bufs = {}
    for d in devices:
        with cp.cuda.Device(d["cuda"]):
            gpu.module()
            src = cp.empty(words, dtype=cp.uint64)
            gpu.launch("mt_write", words, (src, gpu.u64(words), np.int32(RANDOM_PATTERN), gpu.u64(seed + d["cuda"])))
            bufs[d["cuda"]] = {"src": src, "dst": cp.empty(words, dtype=cp.uint64),
                               "stream": gpu.stream()}
            cp.cuda.Device().synchronize()
    pairs: dict[str, Any] = {}
    for a in devices:
        for b in devices:
            if a is b:
                continue
            i, j = a["cuda"], b["cuda"]
            can = bool(cp.cuda.runtime.deviceCanAccessPeer(i, j))
            if can:
                _enable(cp, i, j)
                _enable(cp, j, i)
            s = bufs[i]["stream"]
            timer = gpu.DeviceTimer(s, i)
            with cp.cuda.Device(i):
                cp.cuda.runtime.memcpyPeerAsync(bufs[j]["dst"].data.ptr, j, bufs[i]["src"].data.ptr, i, nbytes, s.ptr)
                for _ in range(repeats):
                    ev = timer.start()
                    cp.cuda.runtime.memcpyPeerAsync(bufs[j]["dst"].data.ptr, j, bufs[i]["src"].data.ptr, i, nbytes,
                                                    s.ptr)
                    timer.stop(ev)
            secs = timer.seconds()
            with cp.cuda.Device(j):
                stats = cp.asarray(np.array([0, 2**64 - 1, 0, 0, 0, 0], dtype=np.uint64))
                dst = bufs[j]["dst"]
                gpu.launch("mt_verify", words, (dst, gpu.u64(words), np.int32(RANDOM_PATTERN), gpu.u64(seed + i), stats))
                st = stats.get()
            pairs[f"{a['subject']}->{b['subject']}"] = {
                "can_access": can,
                "gbps": round(gpu.median([nbytes / t / 1e9 for t in secs if t > 0]), 1),
                "bad_words": int(st[0]),
            }
    return {"pairs": pairs, "gpus": len(devices), "bytes": nbytes}


def _enable(cp, dev: int, peer: int) -> None:
    with cp.cuda.Device(dev):
        try:
            cp.cuda.runtime.deviceEnablePeerAccess(peer)
        except cp.cuda.runtime.CUDARuntimeError as e:
            if "PeerAccessAlreadyEnabled" not in str(e):
                raise


def link_of(pair: str, topo: dict[str, Any] | None) -> str | None:
    """'nvlink' or 'pcie' for "gpuA->gpuB" from the topology task's data, None when unknown."""
    if not topo:
        return None
    a, b = pair.split("->")
    key = "|".join(sorted((a, b), key=gpu_order))
    p = (topo.get("pairs") or {}).get(key)
    return p.get("link") if p else None


def judge(data: dict[str, Any], topo: dict[str, Any] | None, thr: dict[str, Any]) -> list[Result]:
    """One result per pair that is not healthy, each with the action its own fault calls for:
    corrupted data or a slow link -> drain + hardware ticket; an NVLink pair without peer access
    -> drain + reboot. A node with one corrupting pair does not turn the others into tickets."""
    pairs = data.get("pairs") or {}
    if data.get("gpus", 0) < 2 or not pairs:
        return [Result(CHECK, Status.NA, "one GPU: no peer-to-peer pairs to test")]
    findings: dict[str, Finding] = {}
    by_kind: dict[str, dict[str, float]] = {}
    for name, p in pairs.items():
        kind = link_of(name, topo) or "unknown"
        f = findings.setdefault(name, Finding())
        if p.get("bad_words"):
            f.add(Status.FAIL, f"{p['bad_words']} words arrived corrupted over {kind}", Action.DRAIN_TICKET)
        if not p.get("can_access"):
            if kind == "nvlink":
                f.add(Status.FAIL, "no peer access between GPUs joined by NVLink", Action.DRAIN_REBOOT)
            else:
                f.add(Status.WARN, f"no peer access over {kind} (ACS/IOMMU?); copies go through the host")
            continue
        by_kind.setdefault(kind, {})[name] = float(p.get("gbps") or 0.0)
    for kind, rates in by_kind.items():
        expected = thr.get(f"{kind}_gbps") if kind in ("nvlink", "pcie") else None
        judge_rates(rates, expected, thr, f"{kind} copy", "GB/s", findings, action=Action.DRAIN_TICKET)
    out = [Result(CHECK, f.status, f"{n}: " + "; ".join(f.texts), n, pairs[n],
                  {k: thr.get(k) for k in ("nvlink_gbps", "pcie_gbps", "min_fraction", "straggler_fraction")},
                  f.action if f.status is Status.FAIL else Action.NONE)
           for n, f in sorted(findings.items()) if f.status is not Status.PASS]
    if not out:
        summary = ", ".join(f"{len(r)} {k} pairs {min(r.values()):.0f}-{max(r.values()):.0f} GB/s"
                            for k, r in sorted(by_kind.items()))
        out.append(Result(CHECK, Status.PASS, f"{len(pairs)} GPU pairs reach each other, data intact: {summary}",
                          "node", {k: sorted(r.values()) for k, r in by_kind.items()}))
    return out
