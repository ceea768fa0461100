"""Worker answers of healthy GPUs for the active checks' judges (tests/active/test_active_judges.py) and
the orchestrator's fake worker (tests/active/test_orchestrate.py), at the rates real GPUs gave."""

from __future__ import annotations



# Sustained per-GPU numbers measured on healthy GPUs (docs/verification.md runs 7 and 8).
H100_RUN8 = {"bf16": 686.0, "tf32": 357.0, "hbm": 3006.0, "h2d": 55.0, "d2h": 55.1}


def healthy_topology(n: int = 2) -> dict:
    gpus = {f"0000:{0x1b + 0x20 * i:02x}:00.0": {"subject": f"gpu{i}", "numa": i // 4, "nvlinks_active": 18,
                                                   "nic": {"name": f"mlx5_{i}", "pci": "x", "shared_depth": 6}}
            for i in range(n)}
    pairs = {f"gpu{i}|gpu{j}": {"link": "nvlink", "level": "SYS"} for i in range(n) for j in range(i + 1, n)}
    return {"gpus": gpus, "pairs": pairs, "nvml": True}


# The burn-in's float64 reference error on a healthy GPU: bf16 and tf32 measured on two H200s
# (docs/verification-active.md, run 4, the same to every digit on both, and on an H100 since);
# fp16, fp32 and fp64 of the correctness pass (n 4096, the default seed) measured on an H100
# (docs/verification.md, "The burn-in in every precision ... on an H100"), equal in both runs
REF_REL_ERR = {"bf16": 1.6282636e-3, "tf32": 2.8447136e-4, "fp16": 2.2185794e-4, "fp32": 1.0996667e-6, "fp64": 0.0}


def healthy_burnin(n: int = 2, dtypes=("bf16", "tf32"), checks=("fp16", "fp32", "fp64")) -> dict:
    """The worker's burn-in answer in the shape gpuhc/active/burnin.py reports: the timed
    ``dtypes`` at 8192, then the correctness pass's ``checks`` at 4096, 0.25 s each (the defaults)."""
    # the pass's precisions at 4096 on an H100 (docs/verification.md, "The burn-in in every
    # precision ... on an H100"): fp16 658.6, strict fp32 51.5, fp64 60.4 TFLOP/s
    rate = {"bf16": H100_RUN8["bf16"], "tf32": H100_RUN8["tf32"], "fp16": 658.6, "fp32": 51.5, "fp64": 60.4}
    out = {"n": 8192, "dtypes": {}, "nvml": {}}
    for dt in dtypes:
        out["dtypes"][dt] = _burnin_gpus(n, dt, rate[dt], 1400, 175)
    checks = [dt for dt in checks if dt not in dtypes]
    if checks:
        out["check_n"] = 4096
        # iterations of a 4096^3 product in 0.25 s at the rate, hashed every 8th
        out["checked"] = {dt: _burnin_gpus(n, dt, rate[dt], int(0.25 * rate[dt] * 1e12 / (2 * 4096 ** 3)),
                                           None) for dt in checks}
    for i in range(n):
        out["nvml"][f"gpu{i}"] = {"n": 40, "sm_mhz_median": 1530, "temp_c_max": 57, "power_w_max": 700.0,
                                  "reasons": {"sw_power_cap": 0.91}}
    return out


def _burnin_gpus(n: int, dt: str, rate: float, iters: int, hashes: int | None) -> dict:
    return {"iters": iters, "gpus": {
        f"gpu{i}": {"tflops": rate, "tflops_chunk_min": rate * 0.98, "hash": f"{dt}-54409853867abc79",
                    "hashes": hashes or (iters + 7) // 8, "hash_changes": 0, "first_change_iter": None,
                    "ref_rel_err": REF_REL_ERR[dt], "ref_nonfinite": 0, "name": "NVIDIA H100 80GB HBM3",
                    "sm_count": 132}
        for i in range(n)}}


def healthy_hbm(n: int = 2) -> dict:
    return {"bytes": 1 << 30, "repeats": 20,
            "gpus": {f"gpu{i}": {"gbps": H100_RUN8["hbm"], "gbps_min": 2990.0, "copy_ok": True}
                     for i in range(n)}}


def healthy_memtest(n: int = 2) -> dict:
    return {"patterns": ["address", "random"], "gpus": {
        f"gpu{i}": {"bytes": 4 << 30, "free_bytes": 79 << 30, "base": "0x7f0000000000", "seconds": 0.02,
                    "gbps": 2700.0, "bad_words": 0, "bad": {}} for i in range(n)}}


def healthy_hostlink(n: int = 2) -> dict:
    return {"bytes": 256 << 20, "repeats": 5, "gpus": {
        f"gpu{i}": {"h2d_gbps": H100_RUN8["h2d"], "d2h_gbps": H100_RUN8["d2h"], "h2d_best_gbps": 55.3,
                    "d2h_best_gbps": 55.3,
                    "pcie": {"gen": 5, "width": 16, "gen_max": 5, "width_max": 16}} for i in range(n)}}


def healthy_p2p(n: int = 2) -> dict:
    pairs = {f"gpu{i}->gpu{j}": {"can_access": True, "gbps": 393.0, "bad_words": 0}  # NV18, 2x/4x H200
             for i in range(n) for j in range(n) if i != j}
    return {"pairs": pairs, "gpus": n, "bytes": 256 << 20}


def healthy_nccl(n: int = 2) -> dict:
    # 1 GiB over 2 GPUs: busbw 331 GB/s (2x H200, run 5); algbw = busbw * n / (2(n-1))
    return {"ranks": n, "bytes": 1 << 30, "iters": 20, "time_us": 3244.0, "algbw_gbps": 331.0, "busbw_gbps": 331.0,
            "gpus": {f"gpu{i}": {"bad": 0, "first_bad": None} for i in range(n)}, "nccl_version": 22809}


