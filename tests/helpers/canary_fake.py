"""The canary's fake GPU: the hardware boundary behind the same methods as
gpuhc/canary/cupy_backend.py, computing the same products on the CPU with numpy, and a way to
make one GPU corrupt its output the way a sick one does.

Run as a worker (``python canary_fake.py '<spec json>'``) it speaks the canary worker's protocol
through gpuhc.canary.worker.serve, so the parent side is the real one. Spec::

    {"gpus": 2, "name": "NVIDIA H100 80GB HBM3", "sm_count": 132, "driver": 12080,
     "names": {"gpu1": "other model"},                       # per-GPU model, optional
     "sick": {"gpu1": {"case": "bf16-random-64", "word": 5, "bit": 3, "mode": "sticky"}},
     "nodes": {"n2": {...}}}                                 # per-node overrides (SLURMD_NODENAME)

``bad_memory``: ``{"gpu1": {"words": 3, "pattern": "walking-ones"}}``, wrong words in the pattern pass.
``delay_s``: seconds every run of a case takes (a long canary, or a kernel that hangs).
``mode``: ``sticky`` (every run of the case), ``once`` (the first run only: an intermittent
fault), ``model`` (every run, on every GPU: a whole model wrong). ``cli`` runs ``gpuhc`` with this
fake as the canary's worker, for the real-Slurm tests' canary jobs.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclass
class FakeHandle:
    device: dict
    case: Any
    repeats: int
    C: Any = None
    digests: list = field(default_factory=list)
    runs: int = 0


class FakeBackend:
    name = "fake"

    def __init__(self, spec: dict):
        self.spec = spec

    def software(self) -> dict:
        return {"driver": self.spec.get("driver", 12080), "cublas": self.spec.get("cublas", 120804), "cupy": "fake"}

    def prepare(self, device: dict, case, seed: int, repeats: int) -> FakeHandle:
        import numpy as np

        from gpuhc.canary import cases

        h = FakeHandle(device, case, repeats)
        sa, sb = cases.input_seeds(seed)
        a, b = (self._input(cases, case, s).reshape(case.n, case.n) for s in (sa, sb))
        h.C = a @ b if case.precision == "fp64" else (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float32)
        return h

    @staticmethod
    def _input(cases, case, seed):
        import numpy as np

        u = cases.uniform_f32(case.n * case.n, seed)
        if case.kind == "exact":
            u = cases.exact_values(u)
        if case.precision == "bf16":  # round to nearest even on the top 16 bits, as f32_to_bf16
            b = u.view(np.uint32).astype(np.uint64)
            b = (b + 0x7FFF + ((b >> 16) & 1)) >> 16 << 16
            u = b.astype(np.uint32).view(np.float32)
        elif case.precision == "fp16":
            u = u.astype(np.float16).astype(np.float32)
        return u.astype(np.float64) if case.precision == "fp64" else u

    def _sick(self, h: FakeHandle) -> dict | None:
        s = self.spec.get("sick", {}).get(h.device["subject"])
        if s and s.get("mode") == "model":
            return s if s["case"] == h.case.name else None
        if not s or s["case"] != h.case.name:
            return None
        return s if s.get("mode", "sticky") == "sticky" or h.runs == 0 else None

    def start(self, h: FakeHandle, inject: dict | None = None) -> None:
        import time

        import numpy as np

        time.sleep(float(self.spec.get("delay_s", 0)))  # a long run (preemption tests) or a hung kernel

        from gpuhc.canary import cases

        sick = self._sick(h)
        h.digests = []
        for it in range(h.repeats):
            out = h.C.copy()
            w = out.view(np.uint32).ravel()
            if sick is not None and it >= sick.get("from_iteration", 0):
                w[int(sick["word"])] ^= np.uint32(1 << int(sick["bit"]))
            if inject is not None and inject["iteration"] == it:
                w[int(inject["word"])] ^= np.uint32(1 << int(inject["bit"]))
            h.digests.append(cases.digest_words(out))
            h.last = out
        h.runs += 1

    def finish(self, h: FakeHandle) -> tuple[list[int], float]:
        return list(h.digests), 0.001 * h.repeats

    def output(self, h: FakeHandle):
        return h.last

    def free(self, h: FakeHandle) -> None:
        h.C = None

    def memtest(self, params: dict, devices: list[dict]) -> dict:
        """The pattern pass in the memtest check's data shape; ``bad_memory`` makes words wrong."""
        from gpuhc.active.kernels import PATTERNS

        names = [p for p in params.get("patterns") or PATTERNS if p in PATTERNS]
        nbytes = int(min(80 << 30, float(params["max_gib"]) * (1 << 30)) * float(params["fraction"])) // 8 * 8
        out = {"patterns": names, "gpus": {}}
        for d in devices:
            bad = {}
            b = self.spec.get("bad_memory", {}).get(d["subject"])
            if b:
                bad[b.get("pattern", "walking-ones")] = {"words": b.get("words", 1), "first_offset": 4096,
                                                         "last_offset": 4103, "flipped_bits": "0000000000000100",
                                                         "expected": "0000000000000100", "actual": "0000000000000000"}
            out["gpus"][d["subject"]] = {"bytes": nbytes, "free_bytes": nbytes * 2, "base": "0x7f0000000000",
                                         "seconds": 0.01, "gbps": 2000.0,
                                         "bad_words": sum(x["words"] for x in bad.values()), "bad": bad}
        return out


def node_spec(spec: dict) -> dict:
    node = os.environ.get("SLURMD_NODENAME", "")
    return {**spec, **(spec.get("nodes", {}).get(node) or {})}


def hello(spec: dict) -> dict:
    names = spec.get("names", {})
    devices = [{"index": i, "cuda": i, "subject": f"gpu{i}", "name": names.get(f"gpu{i}", spec.get("name", "NVIDIA H100 80GB HBM3")),
                "sm_count": spec.get("sm_count", 132), "uuid": f"GPU-fake-{os.environ.get('SLURMD_NODENAME', 'x')}-{i}",
                "procs": spec.get("procs", {}).get(f"gpu{i}", [])} for i in range(int(spec.get("gpus", 2)))]
    return {"ev": "hello", "pid": os.getpid(), "cupy": True, "devices": devices, "nvml_count": len(devices)}


def worker_argv(spec: dict | str) -> list[str]:
    """The parent's argv for this fake (``gpuhc.canary.node.WORKER_ARGV``); a str is a spec file."""
    arg = spec if isinstance(spec, str) else json.dumps(spec)
    return [sys.executable, os.path.abspath(__file__), arg]


def _load(arg: str) -> dict:
    if arg.startswith("{"):
        return json.loads(arg)
    with open(arg, encoding="utf-8") as f:
        return json.load(f)


def cli() -> None:
    """``gpuhc`` with this fake as the canary's GPU: ``canary_fake.py --cli <spec file> canary run ...``."""
    spec_file = sys.argv[2]
    sys.argv = ["gpuhc"] + sys.argv[3:]
    from gpuhc.canary import node

    node.WORKER_ARGV = worker_argv(spec_file)
    from gpuhc.cli import main

    main()


if __name__ == "__main__":
    sys.path.insert(0, REPO)
    if sys.argv[1] == "--cli":
        cli()
    else:
        spec = node_spec(_load(sys.argv[1]))
        from gpuhc.canary.worker import serve

        sys.exit(serve(lambda: FakeBackend(spec), lambda: hello(spec)))
