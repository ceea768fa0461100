"""cuBLAS's type codes per precision and the GEMM inputs in each, declared once for the burn-in
(gpuhc/active/burnin.py) and the canary (gpuhc/canary/cupy_backend.py). Worker side: the input
helper takes CuPy and the kernel module from its caller, nothing heavy is imported here.

The codes are the values of CUDA's ``cudaDataType_t`` (library_types.h) and cuBLAS's
``cublasComputeType_t`` (cublas_api.h), passed to ``cublasGemmEx`` as plain integers.
"""

from __future__ import annotations

CUDA_R_32F, CUDA_R_64F, CUDA_R_16F, CUDA_R_16BF = 0, 1, 2, 14
COMPUTE_32F, COMPUTE_64F, COMPUTE_32F_FAST_TF32 = 68, 70, 77

# precision -> (cudaDataType of the inputs, bytes per input element, cublasComputeType_t).
# bf16/fp16 accumulate in fp32 on the tensor cores; tf32 is fp32 data on the tensor cores; fp32
# with strict fp32 compute runs the plain FMA units; fp64 runs DMMA where the GPU has it (A100,
# H100, H200, B200), its FP64 units elsewhere.
TYPES = {
    "bf16": (CUDA_R_16BF, 2, COMPUTE_32F),
    "fp16": (CUDA_R_16F, 2, COMPUTE_32F),
    "tf32": (CUDA_R_32F, 4, COMPUTE_32F_FAST_TF32),
    "fp32": (CUDA_R_32F, 4, COMPUTE_32F),
    "fp64": (CUDA_R_64F, 8, COMPUTE_64F),
}


def scalar_dtype(precision: str):
    """numpy type of alpha and beta: cuBLAS reads host scalars in the compute type's width."""
    import numpy as np

    return np.float64 if precision == "fp64" else np.float32


def from_f32(cp, gpu, f32, precision: str, stream):
    """The input matrix in ``precision`` from the generator's float32 values (24-bit, exact in
    every type but the 16-bit ones, which round to nearest even); 16-bit types come back as
    uint16 words, which is all cublasGemmEx and the hash read."""
    if precision == "bf16":
        out = cp.empty(f32.size, dtype=cp.uint16)
        gpu.launch("f32_to_bf16", f32.size, (f32, out, gpu.u64(f32.size)), stream)
        return out
    with stream:
        if precision == "fp16":
            return f32.astype(cp.float16).view(cp.uint16)
        if precision == "fp64":
            return f32.astype(cp.float64)
    return f32
