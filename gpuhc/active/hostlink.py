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
from gpuhc.model.result import Action, Result

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
            stream = gpu.stream()
            rates = {}
            for name, kind, dst, src in (("h2d", H2D, dev.data.ptr, host.ptr), ("d2h", D2H, host.ptr, dev.data.ptr)):
                timer = gpu.DeviceTimer(stream, d["cuda"])
                for _ in range(2):  # warm-up: first DMA into fresh pages is slow on some hosts
                    cp.cuda.runtime.memcpyAsync(dst, src, nbytes, kind, stream.ptr)
                for _ in range(repeats):
                    ev = timer.start()
                    cp.cuda.runtime.memcpyAsync(dst, src, nbytes, kind, stream.ptr)
                    timer.stop(ev)
                got = [nbytes / t / 1e9 for t in timer.seconds() if t > 0]
                rates[name] = round(gpu.median(got), 2)
                rates[name + "_best"] = round(max(got), 2) if got else 0.0
            link = pcie_link(d["pci"])
            del dev
        out["gpus"][d["subject"]] = {"h2d_gbps": rates["h2d"], "d2h_gbps": rates["d2h"], "h2d_best_gbps":
                                     rates["h2d_best"], "d2h_best_gbps": rates["d2h_best"], "pcie": link}
    del host
    return out


def judge(data: dict[str, Any], thr: dict[str, Any]) -> list[Result]:
    """Judged on the best of the repeats: a degraded link can never beat its width and
    generation, while a busy host only ever makes single copies slower (seen once on an H200
    host: one GPU's median host-to-GPU copy at half speed right after a 118 GiB memory test)."""
    gpus = data.get("gpus") or {}

    def best(g: dict, way: str) -> float:
        return float(g.get(f"{way}_best_gbps") or g.get(f"{way}_gbps") or 0.0)

    findings = judge_rates({s: best(g, "h2d") for s, g in gpus.items()}, thr.get("h2d_gbps"), thr,
                           "host-to-GPU", "GB/s")
    judge_rates({s: best(g, "d2h") for s, g in gpus.items()}, thr.get("d2h_gbps"), thr, "GPU-to-host", "GB/s",
                findings)
    pass_text = {}
    for s, g in gpus.items():
        link = g.get("pcie") or {}
        lt = f" (PCIe gen{link.get('gen')} x{link.get('width')})" if link.get("gen") and link.get("width") else ""
        pass_text[s] = f"host-to-GPU {g.get('h2d_gbps', 0):.1f} GB/s, GPU-to-host {g.get('d2h_gbps', 0):.1f} GB/s{lt}"
        f = findings.get(s)
        if f is not None and f.texts and lt:
            f.texts[-1] += lt
    return rate_results(CHECK, findings, gpus, pass_text, thr, Action.DRAIN_TICKET)
