"""The canary's GPU side on CuPy: fill the inputs on the GPU, run one fixed cuBLAS GEMM many
times, hash every output on the GPU (worker process only; nothing here imports at load).

The GEMM is ``cublasGemmEx`` with explicit types, the default algorithm and the default math
mode, on a handle no one else uses during the loop: cuBLAS returns bit-identical results for the
same shapes, types, GPU architecture and SM count, and library version (its documentation,
"Results reproducibility"), so the digest is a known answer per GPU model and software. bf16 and
fp16 inputs write an fp32 product (fp32 accumulate, no last rounding); tf32 runs fp32 data on
the tensor cores; fp32 with strict fp32 compute runs the SIMT kernels on the plain cores; fp64
runs DMMA where the GPU has it. Every iteration's output is hashed into its own slot and the
host waits only once per case, so the GPU stays busy (docs/canary.md, "Cost").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuhc.active.gemm_types import CUDA_R_32F, CUDA_R_64F, from_f32, scalar_dtype
from gpuhc.active.gemm_types import TYPES as GEMM
from gpuhc.canary.cases import Case, input_seeds

# precision -> (input type, output type, compute type): the input and compute types are the
# burn-in's (gpuhc/active/gemm_types.py); the canary writes every product in fp32 or fp64, so a
# bf16/fp16 product keeps its fp32 accumulator's bits
TYPES = {p: (data, CUDA_R_64F if p == "fp64" else CUDA_R_32F, compute) for p, (data, _, compute) in GEMM.items()}


@dataclass
class Handle:
    device: dict
    case: Case
    stream: Any
    A: Any
    B: Any
    C: Any
    slots: Any
    timer: Any
    alpha: Any
    beta: Any
    repeats: int = 0


class CupyBackend:
    name = "cupy"

    def software(self) -> dict[str, Any]:
        from cupy_backends.cuda.libs import cublas

        from gpuhc.active import gpu

        cp = gpu.cupy()
        try:
            version = cublas.getVersion(cp.cuda.device.get_cublas_handle())
        except Exception:  # an older CuPy without the call: its own version pins the cuBLAS it ships with
            version = None
        return {"driver": cp.cuda.runtime.driverGetVersion(), "runtime": cp.cuda.runtime.runtimeGetVersion(),
                "cublas": version if version is not None else f"of cupy {cp.__version__}", "cupy": cp.__version__}

    def prepare(self, device: dict, case: Case, seed: int, repeats: int) -> Handle:
        import numpy as np

        from gpuhc.active import gpu

        cp = gpu.cupy()
        with cp.cuda.Device(device["cuda"]):
            gpu.module()
            stream = gpu.stream()
            sa, sb = input_seeds(seed)
            with stream:
                A, B = self._input(cp, gpu, case, sa, stream), self._input(cp, gpu, case, sb, stream)
                out = cp.float64 if case.out_bytes == 8 else cp.float32
                C = cp.full(case.n * case.n, np.nan, dtype=out)  # poison: a GEMM that wrote nothing is wrong
                slots = cp.zeros(repeats, dtype=cp.uint64)
            scalar = scalar_dtype(case.precision)
            stream.synchronize()
            return Handle(device, case, stream, A, B, C, slots, gpu.DeviceTimer(stream, device["cuda"]),
                          np.array(1.0, dtype=scalar), np.array(0.0, dtype=scalar), repeats)

    @staticmethod
    def _input(cp, gpu, case: Case, seed: int, stream):
        n2 = case.n * case.n
        f32 = cp.empty(n2, dtype=cp.float32)
        gpu.launch("fill_uniform_f32", n2, (f32, gpu.u64(n2), gpu.u64(seed)), stream)
        if case.kind == "exact":
            f32 = cp.rint(f32 * cp.float32(4.0))  # cases.exact_values: the same two float ops
        return from_f32(cp, gpu, f32, case.precision, stream)

    def start(self, h: Handle, inject: dict | None = None) -> None:
        """Queue ``repeats`` GEMMs, each output hashed into its slot; ``inject`` (tests and the
        verification script only) flips one bit of one output before it is hashed."""
        from cupy_backends.cuda.libs import cublas

        from gpuhc.active import gpu

        cp = gpu.cupy()
        n = h.case.n
        in_t, out_t, compute = TYPES[h.case.precision]
        with cp.cuda.Device(h.device["cuda"]):
            handle = cp.cuda.device.get_cublas_handle()
            cublas.setStream(handle, h.stream.ptr)
            cublas.setPointerMode(handle, 0)  # host scalars
            cublas.setMathMode(handle, 0)  # CUBLAS_DEFAULT_MATH: fp32 stays fp32 unless the compute type says tf32
            words = h.C.view(cp.uint32)
            h.stream.synchronize()
            h.slots.fill(0)
            ev = h.timer.start()
            for it in range(h.repeats):
                # row-major C = A B is column-major C^T = B^T A^T: B first, no transposes
                cublas.gemmEx(handle, 0, 0, n, n, n, h.alpha.ctypes.data, h.B.data.ptr, in_t, n,
                              h.A.data.ptr, in_t, n, h.beta.ctypes.data, h.C.data.ptr, out_t, n, compute, -1)
                if inject is not None and inject.get("iteration") == it:
                    w = int(inject["word"])
                    with h.stream:
                        words[w:w + 1] ^= cp.uint32(1 << int(inject["bit"]))
                gpu.launch("hash_words", words.size, (words, gpu.u64(words.size), h.slots[it:it + 1]), h.stream)
            h.timer.stop(ev)

    def finish(self, h: Handle) -> tuple[list[int], float]:
        """Wait for the queued loop: (each iteration's digest, seconds the GPU spent on it)."""
        from gpuhc.active import gpu

        cp = gpu.cupy()
        with cp.cuda.Device(h.device["cuda"]):
            secs = h.timer.seconds()[-1]
            return [int(x) for x in h.slots.get()], secs

    def output(self, h: Handle):
        from gpuhc.active import gpu

        cp = gpu.cupy()
        with cp.cuda.Device(h.device["cuda"]):
            h.stream.synchronize()
            return h.C.get().reshape(h.case.n, h.case.n)

    def free(self, h: Handle) -> None:
        h.A = h.B = h.C = h.slots = None

    def memtest(self, params: dict, devices: list[dict]) -> dict[str, Any]:
        """The pattern pass over a share of free HBM: the memtest check's own GPU half
        (gpuhc/active/memtest.py), so its patterns and its report are the same."""
        from gpuhc.active import gpu, memtest

        gpu.release()  # the products' cached blocks back to the driver: "free" is then really free
        return memtest.measure(params, devices)
