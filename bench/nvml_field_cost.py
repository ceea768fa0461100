#!/usr/bin/env python3
"""What each NVLink field costs the driver: one batched nvmlDeviceGetFieldValues call per field,
for every link of one GPU, median of N rounds (docs/verification.md, run 14). Read only.

    python3 bench/nvml_field_cost.py [--gpu 0] [--rounds 9]
"""

import argparse
import json
import statistics
import time

import pynvml as nv

from gpuhc.sources.nvml_fields import LINK_FIELDS


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args()
    nv.nvmlInit()
    h = nv.nvmlDeviceGetHandleByIndex(args.gpu)
    links = nv.nvmlDeviceGetFieldValues(h, [nv.NVML_FI_DEV_NVLINK_LINK_COUNT])[0].value.uiVal
    out = {"gpu": nv.nvmlDeviceGetName(h), "links": links, "ms_per_call_all_links": {}}
    if not links:  # a GPU without NVLink (a single PCIe card): nothing to time
        print(json.dumps(out))
        return
    for name, field in LINK_FIELDS:
        fid = getattr(nv, field, None)
        if fid is None:
            continue
        req = [(fid, link) for link in range(links)]
        times = []
        for _ in range(args.rounds):
            t = time.perf_counter()
            nv.nvmlDeviceGetFieldValues(h, req)
            times.append((time.perf_counter() - t) * 1000)
        out["ms_per_call_all_links"][name] = round(statistics.median(times), 3)
    all_req = [(getattr(nv, f), link) for _, f in LINK_FIELDS if hasattr(nv, f) for link in range(links)]
    times = []
    for _ in range(args.rounds):
        t = time.perf_counter()
        nv.nvmlDeviceGetFieldValues(h, all_req)
        times.append((time.perf_counter() - t) * 1000)
    out["all_fields_one_call_ms"] = round(statistics.median(times), 3)
    print(json.dumps(out))
    nv.nvmlShutdown()


if __name__ == "__main__":
    main()
