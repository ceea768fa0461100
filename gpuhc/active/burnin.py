"""Burn-in: sustained matrix products on every GPU at once, checked for correctness.

A GPU that computes wrong numbers without raising an error is the worst kind of broken: jobs
finish and their results are garbage. Three independent checks catch it:

1. *Stability*: the same product is computed hundreds of times under sustained load and hashed
   every few iterations (position-weighted 64-bit sum of the output bits, on the GPU). On one
   GPU, cuBLAS is bitwise reproducible for a fixed shape, so every hash must be equal; a
   change means an error that appeared under heat or power load.
2. *Siblings*: identical GPUs (same model and SM count) running the same cuBLAS on the same
   seeded inputs produce bit-identical results (measured on two H200s, docs/verification-active.md),
   so a GPU whose hash differs from the majority is wrong.
3. *Reference*: a sampled 16x16 block of the product is recomputed on the host in float64 from
   the GPU's own inputs; the relative error must stay within what the precision allows.

The inputs come from a counter-based generator (element i = f(seed, i)) run on each GPU, so no
GPU depends on another's data. The GEMM is cuBLAS ``cublasGemmEx`` with explicit data and
compute types (gpuhc/active/gemm_types.py): bf16/fp16 inputs with fp32 accumulation, tf32 (fp32
data, tf32 tensor cores), strict fp32 (the plain FMA units) and fp64 (DMMA or the FP64 units).

Two passes. The *timed* precisions (``active.dtypes``) share the stage's ``burnin_s`` and their
TFLOP/s is the gpu-speed measurement. The *correctness pass* (``active.check_dtypes``, fp16,
fp32 and fp64 by default) follows with ``check_s`` seconds each on smaller matrices
(``check_n``): the units the timed precisions leave idle (the FMA and FP64 pipes) get the same
three checks, so a GPU that corrupts only fp32 or fp64 cannot pass between jobs. Its rates are
reported under ``checked`` and judged by nobody: a speed line for them would need an expectation
per model and a longer run, and the NVML sampler has already stopped.

Timing and load: the iterations are queued in chunks of ~0.1 s per GPU between CUDA events, and
the host keeps the next chunk queued before it waits for the previous one, so no GPU idles
between chunks: the load is as continuous as a plain framework loop, and the reported TFLOP/s
(iterations x 2n^3 / summed chunk times) is the sustained throughput, at the power cap where
the GPU has one. Per chunk the host adds two events and one wait; per hashed iteration one
memory-speed pass over the product (~0.3 % of the GEMM time at the default ``hash_every`` 8).
"""

from __future__ import annotations

import random
import time
from collections import Counter
from typing import Any

from gpuhc.active.gemm_types import TYPES, from_f32, scalar_dtype
from gpuhc.active.rates import gpu_order
from gpuhc.active.registry import correctness_pass
from gpuhc.model.result import Action, Result, Status

CHECK = "burn-in"

SAMPLE = 16  # rows and columns of the float64 reference block
CHUNK_S = 0.1  # seconds of GEMMs queued per GPU between events; the run overshoots by at most one


# ------------------------------------------------------------------------------- worker side


class Gemm:
    """C = A @ B (row-major, n x n) on the current device, inputs generated from ``seed``."""

    def __init__(self, n: int, dtype: str, seed: int, stream):
        import numpy as np

        from gpuhc.active import gpu

        cp = gpu.cupy()
        self.n, self.dtype, self.stream = n, dtype, stream
        self.cuda_type, _, self.compute = TYPES[dtype]
        with stream:
            self.A = self._make(cp, gpu, seed)
            self.B = self._make(cp, gpu, seed + 1)
            if dtype in ("bf16", "fp16"):
                self.C = cp.full(n * n, 0xFFFF, dtype=cp.uint16)  # poison: NaN in either format
            else:
                self.C = cp.full(n * n, np.nan, dtype=cp.float64 if dtype == "fp64" else cp.float32)
        self.handle = cp.cuda.device.get_cublas_handle()
        self.alpha = np.array(1.0, dtype=scalar_dtype(dtype))  # host scalars in the compute type's width
        self.beta = np.array(0.0, dtype=scalar_dtype(dtype))

    def _make(self, cp, gpu, seed: int):
        n2 = self.n * self.n
        f32 = cp.empty(n2, dtype=cp.float32)
        gpu.launch("fill_uniform_f32", n2, (f32, gpu.u64(n2), gpu.u64(seed)), self.stream)
        return from_f32(cp, gpu, f32, self.dtype, self.stream)

    def bind(self) -> None:
        """Point the device's cuBLAS handle at this stream and mode. Once per chunk is enough:
        nothing else uses the handle between the GEMMs of a chunk (the hash is a raw kernel)."""
        from cupy_backends.cuda.libs import cublas

        cublas.setStream(self.handle, self.stream.ptr)
        cublas.setPointerMode(self.handle, 0)  # CUBLAS_POINTER_MODE_HOST
        cublas.setMathMode(self.handle, 0)  # CUBLAS_DEFAULT_MATH: fp32 stays fp32 unless asked

    def run(self, bind: bool = True) -> None:
        from cupy_backends.cuda.libs import cublas

        n = self.n
        if bind:
            self.bind()
        # Row-major C = A B is column-major C^T = B^T A^T: pass B first, no transposes.
        cublas.gemmEx(
            self.handle, 0, 0, n, n, n,
            self.alpha.ctypes.data, self.B.data.ptr, self.cuda_type, n,
            self.A.data.ptr, self.cuda_type, n,
            self.beta.ctypes.data, self.C.data.ptr, self.cuda_type, n,
            self.compute, -1,  # CUBLAS_GEMM_DEFAULT
        )

    def flops(self) -> float:
        return 2.0 * self.n ** 3

    def hash_into(self, slot) -> None:
        from gpuhc.active import gpu

        words = self.C.view(gpu.cupy().uint32)
        gpu.launch("hash_words", words.size, (words, gpu.u64(words.size), slot), self.stream)

    def reference_error(self, seed: int) -> tuple[float, int]:
        """(relative error of a sampled block vs float64, non-finite values in it)."""
        import numpy as np

        rng = random.Random(seed)
        rows = sorted(rng.sample(range(self.n), min(SAMPLE, self.n)))
        cols = sorted(rng.sample(range(self.n), min(SAMPLE, self.n)))
        a = _to_f64(self.A.reshape(self.n, self.n)[rows].get(), self.dtype)
        b = _to_f64(self.B.reshape(self.n, self.n)[:, cols].get(), self.dtype)
        c = _to_f64(self.C.reshape(self.n, self.n)[rows][:, cols].get(), self.dtype)
        ref = a @ b
        bad = int((~np.isfinite(c)).sum())
        if bad:
            return float("inf"), bad
        return float(np.linalg.norm(c - ref) / max(np.linalg.norm(ref), 1e-30)), 0


def _to_f64(x, dtype: str):
    import numpy as np

    if dtype == "bf16":
        return (x.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if dtype == "fp16":
        return x.view(np.float16).astype(np.float64)
    return x.astype(np.float64)


def measure(params: dict, devices: list[dict]) -> dict[str, Any]:
    from gpuhc.active.nvml_probe import Sampler

    sampler = Sampler({d["subject"]: d["pci"] for d in devices}).start()
    out: dict[str, Any] = {"n": params["n"], "dtypes": {}}
    try:
        per = float(params["seconds"]) / len(params["dtypes"])
        for dt in params["dtypes"]:
            out["dtypes"][dt] = _run_dtype(params, dt, per, devices)
    finally:
        out["nvml"] = sampler.stop()  # the clocks under the timed load only
    checks = correctness_pass(params)
    if checks:
        small = dict(params, n=int(params.get("check_n") or params["n"]))
        out["check_n"] = small["n"]
        out["checked"] = {dt: _run_dtype(small, dt, float(params["check_s"]), devices) for dt in checks}
    return out


def _run_dtype(params: dict, dt: str, seconds: float, devices: list[dict]) -> dict[str, Any]:
    from gpuhc.active import gpu

    cp = gpu.cupy()
    n, seed, every = int(params["n"]), int(params["seed"]), int(params["hash_every"])
    phases = {"start": time.monotonic()}
    runs = []
    for d in devices:
        with cp.cuda.Device(d["cuda"]):
            gpu.module()  # compile the kernels before anything is timed
            stream = gpu.stream()
            runs.append({"dev": d, "stream": stream, "gemm": Gemm(n, dt, seed, stream),
                         "timer": gpu.DeviceTimer(stream, d["cuda"])})
    for r in runs:
        r["stream"].synchronize()
    phases["setup"] = time.monotonic()
    # warm up (cuBLAS picks its kernel), then time a few iterations to size the chunks
    calib = []
    for r in runs:
        with cp.cuda.Device(r["dev"]["cuda"]):
            r["gemm"].run()
            t = gpu.DeviceTimer(r["stream"], r["dev"]["cuda"])
            ev = t.start()
            for _ in range(3):
                r["gemm"].run()
            t.stop(ev)
            calib.append(t)
    t_iter = max(max(t.seconds()[0] / 3 for t in calib), 1e-6)
    chunk = max(1, int(CHUNK_S / t_iter))
    # one slot per hashed iteration; the run may overshoot by a chunk, and the GPUs slow down
    # under sustained load (fewer iterations than calibrated), so this is an upper bound
    slots = int((seconds + 2 * CHUNK_S) / t_iter / every) + 64
    for r in runs:
        with cp.cuda.Device(r["dev"]["cuda"]), r["stream"]:
            r["hashes"] = cp.zeros(slots, dtype=cp.uint64)
    phases["calibrate"] = time.monotonic()
    it = used = 0
    t_end = time.monotonic() + seconds
    while True:
        for r in runs:
            with cp.cuda.Device(r["dev"]["cuda"]):
                g = r["gemm"]
                g.bind()
                ev = r["timer"].start()
                for j in range(chunk):
                    g.run(bind=False)
                    if (it + j) % every == 0 and (it + j) // every < slots:
                        k = (it + j) // every
                        g.hash_into(r["hashes"][k:k + 1])
                r["timer"].stop(ev)
        it += chunk
        # Wait for the *previous* chunk only: the one just queued keeps every GPU busy while the
        # host checks the clock and queues the next (waiting for the stream would idle the GPUs
        # once per chunk). At most two chunks are ever queued per GPU.
        for r in runs:
            pairs = r["timer"].pairs
            if len(pairs) >= 2:
                pairs[-2][1].synchronize()
        if time.monotonic() >= t_end:
            break
    for r in runs:
        r["stream"].synchronize()
    phases["loop"] = time.monotonic()
    used = min(slots, (it + every - 1) // every)
    result: dict[str, Any] = {"iters": it, "seconds_target": seconds, "gpus": {}}
    for r in runs:
        with cp.cuda.Device(r["dev"]["cuda"]):
            g = r["gemm"]
            times = r["timer"].seconds()
            hashes = [int(h) for h in r["hashes"][:used].get()]
            changed = [i * every for i, h in enumerate(hashes) if h != hashes[0]]
            rel, nonfinite = g.reference_error(seed)
            busy = sum(times)
            per_chunk = sorted(chunk * g.flops() / t / 1e12 for t in times if t > 0)
            result["gpus"][r["dev"]["subject"]] = {
                "tflops": round(it * g.flops() / busy / 1e12, 2) if busy else 0.0,
                "tflops_chunk_min": round(per_chunk[0], 2) if per_chunk else 0.0,
                "seconds": round(busy, 3),
                "hash": f"{hashes[0]:016x}" if hashes else None,
                "hashes": len(hashes),
                "hash_changes": len(changed),
                "first_change_iter": changed[0] if changed else None,
                "ref_rel_err": rel if rel != float("inf") else None,
                "ref_nonfinite": nonfinite,
                "name": r["dev"].get("name"),
                "sm_count": r["dev"].get("sm_count"),
            }
    phases["check"] = time.monotonic()
    del runs
    gpu.release()
    marks = list(phases.items())
    result["phases_s"] = {name: round(t - marks[i][1], 3) for i, (name, t) in enumerate(marks[1:])}
    return result


# ------------------------------------------------------------------------------- parent side


def judge(data: dict[str, Any], thr: dict[str, Any]) -> list[Result]:
    """One result per GPU: FAIL (drain + hardware ticket) on any sign of wrong arithmetic, in a
    timed precision or one of the correctness pass (the same three checks for both)."""
    tol = thr.get("rel_tol") or {}
    problems: dict[str, list[str]] = {}
    summary: dict[str, list[str]] = {}
    checked: dict[str, list[str]] = {}
    values: dict[str, dict[str, Any]] = {}
    passes = [("timed", dt, dd) for dt, dd in (data.get("dtypes") or {}).items()]
    passes += [("check", dt, dd) for dt, dd in (data.get("checked") or {}).items()]
    for kind, dt, dd in passes:
        gpus = dd.get("gpus") or {}
        for subj, g in gpus.items():
            p = problems.setdefault(subj, [])
            values.setdefault(subj, {})[dt] = {"tflops": g.get("tflops"), "rel_err": g.get("ref_rel_err"),
                                               "hash": g.get("hash"), "pass": kind}
            if g.get("hash_changes"):
                p.append(f"{dt} result changed in {g['hash_changes']} of {g.get('hashes')} checked iterations "
                         f"(first at iteration {g.get('first_change_iter')})")
            limit = float(tol.get(dt, 1e-2))
            if g.get("ref_nonfinite"):
                p.append(f"{dt} result has {g['ref_nonfinite']} NaN/Inf values in the sampled block")
            elif g.get("ref_rel_err") is None or g["ref_rel_err"] > limit:
                p.append(f"{dt} result off the float64 reference by {_fmt(g.get('ref_rel_err'))} (limit {limit:g})")
            if kind == "timed":
                summary.setdefault(subj, []).append(f"{dt} {g.get('tflops', 0):.0f} TFLOP/s")
            else:
                checked.setdefault(subj, []).append(dt)
        if thr.get("bitwise", True):
            for subj, text in _sibling_mismatches(dt, gpus).items():
                problems.setdefault(subj, []).append(text)
    out = []
    for subj in sorted(problems, key=gpu_order):
        if problems[subj]:
            out.append(Result(CHECK, Status.FAIL, f"{subj}: computes wrong numbers: " + "; ".join(problems[subj]),
                              subj, values.get(subj), {"rel_tol": tol}, Action.DRAIN_TICKET))
        else:
            errs = [v["rel_err"] for v in values[subj].values() if v.get("rel_err") is not None]
            done = summary.get(subj, []) + ([", ".join(checked[subj]) + " checked"] if subj in checked else [])
            out.append(Result(CHECK, Status.PASS,
                              f"{subj}: {', '.join(done)}; bitwise stable, float64 reference rel err "
                              f"<= {_fmt(max(errs) if errs else None)}", subj, values.get(subj)))
    return out


def _sibling_mismatches(dt: str, gpus: dict[str, dict]) -> dict[str, str]:
    """Compare hashes among identical GPUs; the minority is wrong, a tie condemns both sides."""
    groups: dict[tuple, list[str]] = {}
    for subj, g in gpus.items():
        if g.get("hash") is not None:
            groups.setdefault((g.get("name"), g.get("sm_count")), []).append(subj)
    found: dict[str, str] = {}
    for members in groups.values():
        if len(members) < 2:
            continue
        counts = Counter(gpus[s]["hash"] for s in members)
        if len(counts) == 1:
            continue
        top, top_n = counts.most_common(1)[0]
        if top_n * 2 > len(members):
            for s in members:
                if gpus[s]["hash"] != top:
                    found[s] = f"{dt} result differs bitwise from {top_n} identical sibling GPUs"
        else:
            for s in members:
                others = [o for o in members if gpus[o]["hash"] != gpus[s]["hash"]]
                found[s] = (f"{dt} result differs bitwise from {', '.join(sorted(others, key=gpu_order))} "
                            "(no majority: cannot tell which GPU is wrong)")
    return found


def _fmt(v) -> str:
    return "n/a" if v is None else f"{v:.2g}"

