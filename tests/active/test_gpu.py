"""Active checks on real GPUs (marker ``gpu``): skipped only when this machine has no NVIDIA GPU.

What these prove that the CPU tests cannot: the worker's CuPy code runs and measures on real
hardware, healthy GPUs pass every active check of the epilog and of the (shortened) bootstrap
stage, the parent kills a worker whose kernel outlives its deadline, a task that fails holding GPU
memory still gives it back, and the result hash kernel computes exactly what the host does.

No CUDA in this process: every GPU task runs in the worker, as in production. A CUDA context
here would show up as another process on GPU 0, which the suite rightly skips as busy.
"""

from __future__ import annotations

import os
import time

import pytest


def _gpu_count() -> int:
    try:
        import pynvml

        pynvml.nvmlInit()
        return int(pynvml.nvmlDeviceGetCount())
    except Exception:
        return 0


NGPU = _gpu_count()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(NGPU == 0, reason="no NVIDIA GPU on this machine")]


def _visible() -> int:
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    return NGPU if cvd is None else len([x for x in cvd.split(",") if x.strip()])


def _profile() -> str:
    import pynvml

    from gpuhc.config.profiles import select_profile

    name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))
    return select_profile(name.decode() if isinstance(name, bytes) else name).name


def test_epilog_suite_passes_on_healthy_gpus():
    from gpuhc.active import run_active
    from gpuhc.active.context import ActiveContext
    from gpuhc.model.result import Status

    t0 = time.monotonic()
    res = run_active("epilog", ActiveContext(profile_name=_profile(), budget_s=30.0))
    print(f"epilog suite on {_visible()} GPUs: {time.monotonic() - t0:.1f}s of a 30s budget")
    for r in res:
        print(r.status.value, r.check, r.subject, r.message)
    bad = [r for r in res if r.status in (Status.FAIL, Status.ERROR)]
    assert not bad, bad
    checks = {r.check for r in res}
    assert {"topology", "burn-in", "gpu-speed", "hbm", "memtest", "host-link", "p2p", "nccl-local"} <= checks
    per_gpu = [r for r in res if r.check == "burn-in"]
    assert len(per_gpu) == _visible()


# The bootstrap stage cut down to fit a test run (its defaults take minutes): every check still
# runs, on every GPU, over the same code paths. DCGM level 1 (the short one) when dcgmi exists.
BOOTSTRAP_SHORT = {"bootstrap": {"burnin_s": 6.0, "memtest_fraction": 0.1, "dcgm_level": 1}}


def test_bootstrap_suite_passes_on_healthy_gpus():
    from gpuhc.active import dcgm, run_active
    from gpuhc.active.context import ActiveContext
    from gpuhc.active.settings import ALL_CHECKS
    from gpuhc.model.result import Status

    t0 = time.monotonic()
    res = run_active("bootstrap", ActiveContext(profile_name=_profile(), config=BOOTSTRAP_SHORT, budget_s=300.0))
    print(f"bootstrap suite (shortened) on {_visible()} GPUs: {time.monotonic() - t0:.1f}s")
    for r in res:
        print(r.status.value, r.check, r.subject, r.message)
    assert {r.check for r in res} == set(ALL_CHECKS), sorted({r.check for r in res})
    may_be_na = set()
    if _visible() < 2:
        may_be_na |= {"p2p", "nccl-local"}  # no pair with one GPU (a 1-rank all-reduce still passes)
    if dcgm.find_dcgmi(None) is None:
        may_be_na.add("dcgm")
    bad = [r for r in res if not (r.status is Status.PASS or (r.status is Status.NA and r.check in may_be_na))]
    assert not bad, bad
    assert len([r for r in res if r.check == "burn-in"]) == _visible()
    assert len([r for r in res if r.check == "memtest"]) == _visible()


def test_result_hash_kernel_matches_the_host():
    """The burn-in's hash (reduced per warp, then per block) equals numpy's on every GPU."""
    from gpuhc.active.plan import Task

    sess = _session([Task("_hash_check", {"words": (1 << 22) + 77, "seed": 3}, ["burn-in"])], timeout_s=60.0)
    o = sess.outcomes["_hash_check"]
    assert o.status == "done", o
    print("hash", o.data)
    assert o.data["gpus"] and all(h == o.data["host"] for h in o.data["gpus"].values()), o.data


def _session(tasks, timeout_s: float):
    from gpuhc.active.supervise import Worker, default_argv, run_tasks, worker_env

    return run_tasks(tasks, lambda: Worker(default_argv(), worker_env()), time.monotonic() + 120, 60,
                     lambda h: ([d["cuda"] for d in h["devices"]], [d["cuda"] for d in h["devices"]]),
                     lambda t, n: timeout_s)


def test_hung_kernel_is_killed_at_its_deadline_and_the_gpu_stays_usable():
    from gpuhc.active.plan import Task

    spin = Task("_spin", {"seconds": 25}, ["burn-in"])
    after = Task("hbm", {"mib": 64, "repeats": 3, "seed": 1}, ["hbm"])
    t0 = time.monotonic()
    sess = _session([spin, after], timeout_s=3.0)
    took = time.monotonic() - t0
    out = sess.outcomes
    assert out["_spin"].status == "timeout", out["_spin"]
    assert "timed out after 3s" in out["_spin"].message
    # the replacement worker ran the next task on the same GPUs
    assert out["hbm"].status == "done", out["hbm"]
    assert all(g["copy_ok"] for g in out["hbm"].data["gpus"].values())
    assert took < 25, "the parent waited for the spinning kernel instead of killing it"


def test_failed_task_gives_its_gpu_memory_back():
    from gpuhc.active.plan import Task

    sess = _session([Task("_fail_after_alloc", {"mib": 512}, ["memtest"]),
                     Task("hbm", {"mib": 64, "repeats": 3, "seed": 1}, ["hbm"])], timeout_s=60.0)
    failed = sess.outcomes["_fail_after_alloc"]
    assert failed.status == "fail" and "injected failure" in failed.message
    assert failed.pool_used == 0  # the pool holds nothing after the failed task
    assert sess.outcomes["hbm"].status == "done" and sess.outcomes["hbm"].pool_used == 0


def test_burn_in_product_is_bitwise_stable_and_identical_across_gpus():
    """One GPU: every hashed iteration equal. Several identical GPUs: all hashes equal too."""
    from gpuhc.active.plan import Task

    sess = _session([Task("burnin", {"n": 4096, "dtypes": ["bf16", "tf32"], "seconds": 2.0, "seed": 5,
                                     "hash_every": 4, "check_dtypes": ["fp16", "fp32", "fp64", "tf32"],
                                     "check_s": 0.25, "check_n": 2048}, ["burn-in"])], timeout_s=60.0)
    o = sess.outcomes["burnin"]
    assert o.status == "done", o
    # the correctness pass: the untimed precisions only, at its own size, within its tolerance
    assert list(o.data["checked"]) == ["fp16", "fp32", "fp64"] and o.data["check_n"] == 2048
    from gpuhc.active import burnin
    from gpuhc.active.registry import CHECK

    assert all(r.status.name == "PASS" for r in burnin.judge(o.data, CHECK["burn-in"].defaults))
    for dt, dd in [*o.data["dtypes"].items(), *o.data["checked"].items()]:
        hashes = {s: g["hash"] for s, g in dd["gpus"].items()}
        print(dt, hashes, "phases", dd.get("phases_s"), "iters", dd.get("iters"))
        assert len(set(hashes.values())) == 1, (dt, hashes)
        assert all(g["hash_changes"] == 0 for g in dd["gpus"].values())
