"""GPU memory test: write patterns over a slice of free HBM, read them back, count wrong words.

Patterns (see kernels.py ``expect``): address-as-data and its inverse catch address-line faults
(two addresses landing on one cell), walking ones/zeros exercise every bit position, a seeded
random pattern catches data-dependent faults and a checkerboard catches coupling between
neighbouring cells. Each pattern is written over the whole slice and then verified in a second
pass, so a cell must hold its value while the rest of the slice is written.

ECC corrects single-bit errors silently, so a word that reads back wrong here got past ECC (or
ECC is off): that is a hardware fault, reported with the byte range and the flipped bits, and
fails with drain + hardware ticket. An uncorrectable ECC error raised to the worker is reported
by the parent as a failed task of kind ``ecc`` (drain + GPU reset).
"""

from __future__ import annotations

from typing import Any

from gpuhc.active.kernels import PATTERNS
from gpuhc.active.rates import gpu_order
from gpuhc.model.result import Action, Result, Status

CHECK = "memtest"
MIN_BYTES = 64 << 20
ALIGN = 2 << 20


def measure(params: dict, devices: list[dict]) -> dict[str, Any]:
    import numpy as np

    from gpuhc.active import gpu

    cp = gpu.cupy()
    seed = int(params.get("seed", 1))
    names = [p for p in params.get("patterns") or PATTERNS if p in PATTERNS]
    runs = []
    for d in devices:
        with cp.cuda.Device(d["cuda"]):
            gpu.module()
            free, total = cp.cuda.runtime.memGetInfo()
            want = min(int(free * float(params["fraction"])), int(float(params["max_gib"]) * (1 << 30)))
            buf, nbytes = _alloc(cp, max(MIN_BYTES, want // ALIGN * ALIGN))
            init = np.array([0, 2**64 - 1, 0, 0, 0, 0], dtype=np.uint64)
            stats = cp.asarray(np.tile(init, (len(names), 1)))
            stream = gpu.stream()
            runs.append({"dev": d, "buf": buf, "bytes": nbytes, "free": int(free), "stats": stats,
                         "stream": stream, "timer": gpu.DeviceTimer(stream, d["cuda"])})
    starts = [r["timer"].start() for r in runs]
    for k, name in enumerate(names):
        pat = np.int32(PATTERNS.index(name))
        pseed = gpu.u64(seed + 7919 * k)
        for r in runs:
            with cp.cuda.Device(r["dev"]["cuda"]):
                n = r["buf"].size
                gpu.launch("mt_write", n, (r["buf"], gpu.u64(n), pat, pseed), r["stream"])
                gpu.launch("mt_verify", n, (r["buf"], gpu.u64(n), pat, pseed, r["stats"][k]), r["stream"])
    out: dict[str, Any] = {"patterns": names, "gpus": {}}
    for r, ev in zip(runs, starts):
        with cp.cuda.Device(r["dev"]["cuda"]):
            r["timer"].stop(ev)
            secs = r["timer"].seconds()[0]
            stats = r["stats"].get()
            base = int(r["buf"].data.ptr)
        bad = {}
        for k, name in enumerate(names):
            count, first, last, bits, want, got = (int(x) for x in stats[k])
            if count:
                bad[name] = {"words": count, "first_offset": first * 8, "last_offset": last * 8 + 7,
                             "flipped_bits": f"{bits:016x}", "expected": f"{want:016x}", "actual": f"{got:016x}"}
        out["gpus"][r["dev"]["subject"]] = {
            "bytes": r["bytes"], "free_bytes": r["free"], "base": f"0x{base:x}", "seconds": round(secs, 3),
            "gbps": round(2 * len(names) * r["bytes"] / secs / 1e9, 1) if secs > 0 else None,
            "bad_words": sum(b["words"] for b in bad.values()), "bad": bad,
        }
    return out


def _alloc(cp, nbytes: int):
    """Allocate, backing off when the driver's idea of "free" was optimistic."""
    for _ in range(4):
        try:
            return cp.empty(nbytes // 8, dtype=cp.uint64), nbytes
        except cp.cuda.memory.OutOfMemoryError:
            cp.get_default_memory_pool().free_all_blocks()
            nbytes = max(MIN_BYTES, (nbytes * 3 // 4) // ALIGN * ALIGN)
    return cp.empty(nbytes // 8, dtype=cp.uint64), nbytes


def judge(data: dict[str, Any], thr: dict[str, Any]) -> list[Result]:
    allowed = int(thr.get("max_bad_words", 0))
    out = []
    for subj in sorted(data.get("gpus") or {}, key=gpu_order):
        g = data["gpus"][subj]
        gib = g.get("bytes", 0) / (1 << 30)
        if g.get("bad_words", 0) > allowed:
            parts = []
            for name, b in g["bad"].items():
                parts.append(f"{name}: {b['words']} words between +0x{b['first_offset']:x} and "
                             f"+0x{b['last_offset']:x}, flipped bits 0x{b['flipped_bits']}")
            out.append(Result(CHECK, Status.FAIL,
                              f"{subj}: {g['bad_words']} wrong words in {gib:.1f} GiB from {g.get('base')} ("
                              + "; ".join(parts) + ")", subj, g, {"max_bad_words": allowed}, Action.DRAIN_TICKET))
        else:
            out.append(Result(CHECK, Status.PASS,
                              f"{subj}: {gib:.1f} GiB x {len(data.get('patterns') or [])} patterns read back "
                              f"correctly ({g.get('gbps') or 0:.0f} GB/s)", subj, g))
    return out
