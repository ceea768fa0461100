"""Device check of the GPU reset procedure's read-only half (docs/verification.md): holder
discovery, persistence, minors, topology scope and fabric state, as the plan sees them, and the
same facts read by pynvml directly to cross-check. Never resets, never changes a setting."""

from __future__ import annotations

import json
import sys
import time

from gpuhc.slurm.repair.reset_plan import make_plan
from gpuhc.slurm.repair.reset_probe import ProbeSettings, probe
from gpuhc.slurm.settings import RESET_SERVICES
from gpuhc.sources.nvml import NvmlLive


def pynvml_view() -> list[dict]:
    import pynvml as nv

    nv.nvmlInit()
    try:
        out = []
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            d = {"index": i, "minor": nv.nvmlDeviceGetMinorNumber(h), "arch": nv.nvmlDeviceGetArchitecture(h),
                 "persistence": nv.nvmlDeviceGetPersistenceMode(h)}
            remote = []
            for link in range(18):
                try:
                    if nv.nvmlDeviceGetNvLinkState(h, link):
                        remote.append(nv.nvmlDeviceGetNvLinkRemoteDeviceType(h, link))
                except nv.NVMLError as e:
                    remote.append(str(e))
                    break
            d["nvlink_remote_types"] = remote  # 0 GPU, 1 IBMNPU, 2 SWITCH
            out.append(d)
        return out
    finally:
        nv.nvmlShutdown()


def main() -> None:
    s = ProbeSettings(RESET_SERVICES, "systemctl", "/proc", "/dev", 10.0)
    t0 = time.monotonic()
    reading = NvmlLive(clock_samples=1).read()
    t1 = time.monotonic()
    facts = probe(reading, s, time.monotonic() + 20)
    t2 = time.monotonic()
    cmd = ["nvidia-smi", "-r", "-i", "{gpu}"]
    plans = {str(t): make_plan(facts, t, list(RESET_SERVICES), cmd, "systemctl", "nvidia-smi").to_dict()
             for t in ((int(sys.argv[1]),), tuple(g.index for g in facts.gpus))}
    print(json.dumps({"nvml_read_s": round(t1 - t0, 3), "probe_s": round(t2 - t1, 3),
                      "gpus": [g.__dict__ for g in facts.gpus],
                      "holders": [h.__dict__ for h in facts.holders], "services": facts.services,
                      "nvswitch": facts.nvswitch, "problems": facts.problems, "plans": plans,
                      "pynvml": pynvml_view()}, indent=1, default=str))


if __name__ == "__main__":
    main()
