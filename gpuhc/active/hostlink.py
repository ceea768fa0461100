"""Host link: pinned host<->GPU copy bandwidth per GPU, each direction.

A GPU whose PCIe link trained at x8 or at a lower generation, or sits behind a misbehaving
switch, still passes every NVML health counter while every host transfer runs at half speed;
only moving data shows it. GPUs are measured one at a time so that each number is the link's,
not the host memory's shared bandwidth. The link generation and width are read right after
the transfers (an idle link may drop its generation to save power), for the message.
"""

from __future__ import annotations

from typing import Any

from gpuhc.active.rates import judge_rates, rate_results
from gpuhc.model import Action, Result

CHECK = "host-link"
H2D, D2H = 1, 2  # cudaMemcpyKind


def measure(params: dict, devices: list[dict]) -> dict[str, Any]:
    from gpuhc.active import gpu
    from gpuhc.active.nvml_probe import pcie_link

    cp = gpu.cupy()
    nbytes = int(params["mib"]) << 20
    repeats = int(params.get("repeats", 5))
    host = cp.cuda.alloc_pinned_memory(nbytes)
    out: dict[str, Any] = {"bytes": nbytes, "repeats": repeats, "gpus": {}}
    for d in devices:
        with cp.cuda.Device(d["cuda"]):
            dev = cp.empty(nbytes, dtype=cp.uint8)
            stream = cp.cuda.Stream(non_blocking=True)
            rates = {}
            for name, kind, dst, src in (("h2d", H2D, dev.data.ptr, host.ptr), ("d2h", D2H, host.ptr, dev.data.ptr)):
                timer = gpu.DeviceTimer(stream, d["cuda"])
                cp.cuda.runtime.memcpyAsync(dst, src, nbytes, kind, stream.ptr)  # warm-up
                for _ in range(repeats):
                    ev = timer.start()
                    cp.cuda.runtime.memcpyAsync(dst, src, nbytes, kind, stream.ptr)
                    timer.stop(ev)
                rates[name] = round(gpu.median([nbytes / t / 1e9 for t in timer.seconds() if t > 0]), 2)
            link = pcie_link(d["pci"])
            del dev
        out["gpus"][d["subject"]] = {"h2d_gbps": rates["h2d"], "d2h_gbps": rates["d2h"], "pcie": link}
    del host
    return out


def judge(data: dict[str, Any], thr: dict[str, Any]) -> list[Result]:
    gpus = data.get("gpus") or {}
    findings = judge_rates({s: float(g.get("h2d_gbps") or 0) for s, g in gpus.items()}, thr.get("h2d_gbps"), thr,
                           "host-to-GPU", "GB/s")
    judge_rates({s: float(g.get("d2h_gbps") or 0) for s, g in gpus.items()}, thr.get("d2h_gbps"), thr,
                "GPU-to-host", "GB/s", findings)
    pass_text = {}
    for s, g in gpus.items():
        link = g.get("pcie") or {}
        lt = f" (PCIe gen{link.get('gen')} x{link.get('width')})" if link.get("gen") and link.get("width") else ""
        pass_text[s] = f"host-to-GPU {g.get('h2d_gbps', 0):.1f} GB/s, GPU-to-host {g.get('d2h_gbps', 0):.1f} GB/s{lt}"
        f = findings.get(s)
        if f is not None and f.texts and lt:
            f.texts[-1] += lt
    return rate_results(CHECK, findings, gpus, pass_text, thr, Action.DRAIN_TICKET)
