"""The canary's products, their inputs, and how a result becomes a digest: declared once, for the
GPU (:mod:`gpuhc.canary.cupy_backend`) and the host (the exact reference, the test backend).

Inputs: element i of a matrix is ``splitmix64(seed ^ i * K)`` turned into a float32 in [-1, 1)
with 24 random bits (the same generator as the burn-in's ``fill_uniform_f32`` kernel, so the GPU
fills its own inputs without a host copy). An *exact* case scales that to an integer in [-4, 4]:
every product is at most 16 and every partial sum below 2^24, so fp32 accumulation never rounds,
in any order, on any GPU; the answer is then the CPU's float64 product, bit for bit. A *random*
case keeps the 24 bits (rounded once to bf16/fp16 by round-to-nearest-even), so every rounding
path works, and its answer is what identical GPUs with identical software agree on.

The digest is the burn-in's position-weighted 64-bit sum over the output's 32-bit words
(kernels.py ``hash_words``): a single flipped bit in word i changes it by ``±2^b·(2i+1)``, never 0
mod 2^64, so every one-bit error changes the digest.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gpuhc.canary.settings import CASE_PATTERN

EXACT_RANGE = 4  # exact cases draw integers in [-4, 4]
K_MIX = 0xD1B54A32D192ED03
# layouts of the output element: (bits, exponent bits, mantissa bits)
LAYOUT = {4: (32, 8, 23), 8: (64, 11, 52)}


@dataclass(frozen=True)
class Case:
    precision: str
    kind: str  # exact | random
    n: int

    @property
    def name(self) -> str:
        return f"{self.precision}-{self.kind}-{self.n}"

    @property
    def out_bytes(self) -> int:
        """Bytes per output element: fp64 products are float64, all others float32 (the
        accumulator's precision: bf16/fp16 products are written without a last rounding)."""
        return 8 if self.precision == "fp64" else 4

    @property
    def flops(self) -> float:
        return 2.0 * self.n ** 3

    @property
    def shape(self) -> str:
        return f"{self.n}x{self.n}x{self.n}"


def parse(name: str) -> Case:
    m = re.fullmatch(CASE_PATTERN, name)
    if m is None:
        raise ValueError(f"not a canary case: {name!r} (want <bf16|fp16|tf32|fp32|fp64>-<exact|random>-<n>)")
    return Case(m.group(1), m.group(2), int(m.group(3)))


# ------------------------------------------------------------------------- host-side inputs


def uniform_f32(count: int, seed: int):
    """The generator of kernels.py ``fill_uniform_f32``, in numpy (uint64 arithmetic wraps)."""
    import numpy as np

    i = np.arange(count, dtype=np.uint64)
    with np.errstate(over="ignore"):
        x = np.uint64(seed & 0xFFFFFFFFFFFFFFFF) ^ (i * np.uint64(K_MIX))
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    top = (x >> np.uint64(40)).astype(np.int64) - (1 << 23)
    return top.astype(np.float32) * np.float32(1.0 / (1 << 23))


def input_seeds(seed: int) -> tuple[int, int]:
    """The seeds of A and B: different streams of one generator."""
    return seed * 2 + 1, seed * 2 + 2


def exact_values(u):
    """An exact case's integers from the uniform draw: rint(u * 4), the same float ops on both sides."""
    import numpy as np

    return np.rint(u * np.float32(EXACT_RANGE)).astype(np.float32)


def exact_product(case: Case, seed: int):
    """The exact case's answer on the CPU: integer inputs, a float64 product (exact below 2^53),
    in the output's type (exact: every value is an integer below 2^24)."""
    import numpy as np

    sa, sb = input_seeds(seed)
    n = case.n
    a = exact_values(uniform_f32(n * n, sa)).astype(np.float64).reshape(n, n)
    b = exact_values(uniform_f32(n * n, sb)).astype(np.float64).reshape(n, n)
    c = a @ b
    return c if case.out_bytes == 8 else c.astype(np.float32)


# ------------------------------------------------------------------------- digests and bits


def digest_words(words) -> int:
    """kernels.py ``hash_words`` over a uint32 array, on the host."""
    import numpy as np

    w = np.ascontiguousarray(words).view(np.uint32).ravel().astype(np.uint64)
    i = np.arange(w.size, dtype=np.uint64)
    with np.errstate(over="ignore"):
        terms = (w + np.uint64(0x9E3779B9)) * (np.uint64(2) * i + np.uint64(1))
        return int(np.add.reduce(terms, dtype=np.uint64))


def hexdigest(value: int) -> str:
    return f"{value & 0xFFFFFFFFFFFFFFFF:016x}"


def bit_field(bit: int, out_bytes: int) -> str:
    width, exp, man = LAYOUT[out_bytes]
    if bit == width - 1:
        return "sign"
    return "exponent" if bit >= man else "mantissa"


def differing(bad, good, case: Case, limit: int = 8) -> dict[str, Any]:
    """The elements where ``bad`` and ``good`` (host arrays of the output) differ: how many, and
    for the first ``limit`` their row, column, the bits that flipped and both values."""
    import numpy as np

    utype = np.uint64 if case.out_bytes == 8 else np.uint32
    b = np.ascontiguousarray(bad).view(utype).ravel()
    g = np.ascontiguousarray(good).view(utype).ravel()
    if b.size != g.size:
        return {"count": None, "elements": [], "why": "outputs of different sizes"}
    idx = np.flatnonzero(b != g)
    out = []
    for k in idx[:limit].tolist():
        x = int(b[k] ^ g[k])
        bits = [i for i in range(case.out_bytes * 8) if x >> i & 1]
        out.append({"row": k // case.n, "col": k % case.n, "bits": bits,
                    "fields": sorted({bit_field(i, case.out_bytes) for i in bits}),
                    "got": f"{int(b[k]):0{case.out_bytes * 2}x}", "want": f"{int(g[k]):0{case.out_bytes * 2}x}"})
    return {"count": int(idx.size), "elements": out}


def describe_bits(diff: dict[str, Any] | None) -> str:
    """One line: ``C[17,4031] bit 22 (mantissa)`` and how many more."""
    if not diff or not diff.get("elements"):
        return (diff or {}).get("why") or "bits not captured"
    parts = []
    for e in diff["elements"][:3]:
        bits = ",".join(str(b) for b in e["bits"][:6])
        parts.append(f"C[{e['row']},{e['col']}] bit{'s' if len(e['bits']) > 1 else ''} {bits} ({'/'.join(e['fields'])})")
    more = (diff.get("count") or 0) - len(parts)
    return "; ".join(parts) + (f" and {more} more element{'s' if more > 1 else ''}" if more > 0 else "")
