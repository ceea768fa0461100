"""CUDA C sources of the few kernels the active checks compile with CuPy's RawModule.

Kept as plain strings in one place so that they can be compiled (and syntax-checked) without
a GPU by NVRTC alone, and so that the patterns the memory test writes are defined once: the
``expect()`` function below is the single definition of "what this word must hold", used by
the writer and the verifier alike.

Why hand-written kernels rather than CuPy array expressions: the memory test must touch every
byte of a buffer of tens of GiB without allocating a second buffer of the same size (an
expression like ``buf != expected`` would), and the result hash must run after every few
matrix products without a temporary as large as the product.
"""

from __future__ import annotations

SOURCE = r"""
typedef unsigned long long u64;
typedef unsigned int u32;
typedef unsigned short u16;

__device__ __forceinline__ u64 splitmix64(u64 x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// Deterministic inputs: element i of a matrix is a function of (seed, i) alone, so every GPU
// computes on bit-identical data without a host-to-device copy per GPU.
extern "C" __global__ void fill_uniform_f32(float* out, u64 n, u64 seed) {
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        u64 h = splitmix64(seed ^ (i * 0xD1B54A32D192ED03ull));
        // 24 random bits -> [-1, 1): exactly representable in float32
        out[i] = (float)((long long)(h >> 40) - (1ll << 23)) * (1.0f / (float)(1 << 23));
    }
}

// float32 -> bfloat16 with round-to-nearest-even (inputs here are finite).
extern "C" __global__ void f32_to_bf16(const float* in, u16* out, u64 n) {
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        u32 b = __float_as_uint(in[i]);
        b += 0x7FFFu + ((b >> 16) & 1u);
        out[i] = (u16)(b >> 16);
    }
}

// Position-weighted 64-bit sum of 32-bit words: any flipped bit or swapped pair of words changes
// it. Addition mod 2^64 does not care about order, so the value is the same however the threads
// split the work; reduced per warp, then per block, so one atomic per block (not per warp) hits
// the single output word: same-address atomics serialise in L2 and were a third of the hash's
// cost. Needs blockDim.x a multiple of 32 (gpu.BLOCK is 256).
extern "C" __global__ void hash_words(const u32* w, u64 n, u64* out) {
    __shared__ u64 part[32];
    u64 acc = 0;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        acc += ((u64)w[i] + 0x9E3779B9ull) * (2ull * i + 1ull);
    }
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_down_sync(0xFFFFFFFFu, acc, off);
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    if (lane == 0) part[warp] = acc;
    __syncthreads();
    if (warp == 0) {
        acc = lane < (blockDim.x >> 5) ? part[lane] : 0ull;
        for (int off = 16; off > 0; off >>= 1) acc += __shfl_down_sync(0xFFFFFFFFu, acc, off);
        if (lane == 0) atomicAdd(out, acc);
    }
}

// Memory test patterns. pattern: 0 address, 1 inverted address, 2 walking ones,
// 3 walking zeros, 4 seeded random, 5 checkerboard (alternating 0xAA.. / 0x55..).
__device__ __forceinline__ u64 expect(u64 i, int pattern, u64 seed) {
    switch (pattern) {
        case 0: return i ^ seed;
        case 1: return ~(i ^ seed);
        case 2: return 1ull << ((i + seed) & 63ull);
        case 3: return ~(1ull << ((i + seed) & 63ull));
        case 4: return splitmix64(i ^ seed);
        default: return ((i + seed) & 1ull) ? 0xAAAAAAAAAAAAAAAAull : 0x5555555555555555ull;
    }
}

extern "C" __global__ void mt_write(u64* buf, u64 n, int pattern, u64 seed) {
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        buf[i] = expect(i, pattern, seed);
    }
}

// stats: [0] wrong words, [1] first wrong index, [2] last wrong index, [3] OR of flipped bits,
// [4] expected and [5] actual value of the first wrong word seen (racy: any one wrong word).
extern "C" __global__ void mt_verify(const u64* buf, u64 n, int pattern, u64 seed, u64* stats) {
    u64 bad = 0, first = ~0ull, last = 0, bits = 0;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        u64 want = expect(i, pattern, seed);
        u64 got = buf[i];
        if (got != want) {
            bad++;
            bits |= got ^ want;
            if (i < first) first = i;
            if (i > last) last = i;
            if (atomicCAS(&stats[4], 0ull, want) == 0ull) stats[5] = got;
        }
    }
    if (bad) {
        atomicAdd(&stats[0], bad);
        atomicMin(&stats[1], first);
        atomicMax(&stats[2], last);
        atomicOr(&stats[3], bits);
    }
}

// All-reduce check: rank r holds x[i] = (i % 251) + r, so the sum over R ranks is
// R * (i % 251) + R(R-1)/2, an integer below 2^24 and therefore exact in float32.
extern "C" __global__ void fill_rank(float* x, u64 n, float r) {
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        x[i] = (float)(i % 251ull) + r;
    }
}

extern "C" __global__ void check_sum(const float* x, u64 n, float ranks, float rsum, u64* stats) {
    u64 bad = 0, first = ~0ull;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        float want = ranks * (float)(i % 251ull) + rsum;
        if (x[i] != want) { bad++; if (i < first) first = i; }
    }
    if (bad) { atomicAdd(&stats[0], bad); atomicMin(&stats[1], first); }
}

// Tests only: occupy the GPU for a bounded number of clock cycles, to prove that the parent
// kills a worker whose kernel does not return in time (bounded so that it ends regardless).
extern "C" __global__ void spin(long long cycles, int* sink) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) { }
    if (threadIdx.x == 0 && blockIdx.x == 0) *sink = 1;
}
"""

NAMES = (
    "fill_uniform_f32",
    "f32_to_bf16",
    "hash_words",
    "mt_write",
    "mt_verify",
    "fill_rank",
    "check_sum",
    "spin",
)

# Memory test pattern names, in the order of the switch above.
PATTERNS = ("address", "inverse-address", "walking-ones", "walking-zeros", "random", "checkerboard")
