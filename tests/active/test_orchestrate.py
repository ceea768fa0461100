"""run_active end to end with a fake worker (the hardware boundary): what the parent does with
every kind of worker answer — healthy data, wrong numbers, failures, hangs, crashes, no GPU.

These run in CI without a GPU; the same orchestration runs on real GPUs in tests/active/test_gpu.py.
"""

from __future__ import annotations

import json
import sys
import time

import pytest

from gpuhc.active import INSTALL_HINT, run_active
from gpuhc.active.context import ActiveContext
from gpuhc.model.result import Action, Status

FAKE_WORKER = '"""A stand-in for ``python -m gpuhc.active.worker``: the fake GPU at the hardware boundary.\n\nIt speaks the worker\'s JSON-lines protocol and answers from a scenario (JSON, first argument):\n``{"hello": {...}, "tasks": {"burnin": {"data": {...}} | {"fail": {"kind": .., "message": ..}}\n| {"hang": seconds} | {"die": true}}, "log": "path"}``. Each task line received is appended to\n``log`` so tests can see what the parent asked for.\n"""\n\nimport json\nimport os\nimport sys\nimport time\n\nscenario = json.loads(sys.argv[1])\nhello = {"ev": "hello", "pid": os.getpid(), "cupy": True, "nccl": True, "devices": [], "nvml_count": 0}\nhello.update(scenario.get("hello") or {})\nprint(json.dumps(hello), flush=True)\nprint("a library printing noise on stdout is ignored", flush=True)\nfor line in sys.stdin:\n    req = json.loads(line)\n    name = req.get("task")\n    if name == "quit":\n        break\n    if scenario.get("log"):\n        with open(scenario["log"], "a") as f:\n            f.write(json.dumps(req) + "\\n")\n    spec = (scenario.get("tasks") or {}).get(name, {"data": {}})\n    print(json.dumps({"ev": "start", "task": name}), flush=True)\n    if "hang" in spec:\n        time.sleep(spec["hang"])\n    if spec.get("die"):\n        sys.stderr.write("Segmentation fault (simulated)\\n")\n        os._exit(139)\n    if "fail" in spec:\n        ev = {"ev": "fail", "task": name, "pool_used": 0, **spec["fail"]}\n        print(json.dumps(ev), flush=True)\n        if ev.get("restart"):\n            break\n        continue\n    print(json.dumps({"ev": "done", "task": name, "data": spec.get("data", {}), "pool_used": 0}), flush=True)\n'

TWO_GPUS = [
    {"cuda": 0, "index": 0, "pci": "0000:1b:00.0", "name": "NVIDIA H100 80GB HBM3", "sm_count": 132,
     "subject": "gpu0", "procs": []},
    {"cuda": 1, "index": 1, "pci": "0000:43:00.0", "name": "NVIDIA H100 80GB HBM3", "sm_count": 132,
     "subject": "gpu1", "procs": []},
]

from tests.helpers.active_results import (  # noqa: E402  (tests/ is on sys.path, see conftest.py)
    healthy_burnin,
    healthy_hbm,
    healthy_hostlink,
    healthy_memtest,
    healthy_nccl,
    healthy_p2p,
    healthy_topology,
)

EPILOG_CHECKS = {"topology", "burn-in", "gpu-speed", "hbm", "memtest", "host-link", "p2p", "nccl-local"}


def _healthy_tasks() -> dict:
    return {"topology": {"data": healthy_topology()}, "burnin": {"data": healthy_burnin()},
            "hbm": {"data": healthy_hbm()}, "memtest": {"data": healthy_memtest()},
            "hostlink": {"data": healthy_hostlink()}, "p2p": {"data": healthy_p2p()},
            "nccl": {"data": healthy_nccl()}}


@pytest.fixture
def fake(tmp_path):
    """Build an ActiveContext whose worker is the fake GPU, answering from a scenario."""
    script = tmp_path / "fake_worker.py"
    script.write_text(FAKE_WORKER)
    log = tmp_path / "requests.jsonl"

    def make(tasks=None, hello=None, **ctx) -> ActiveContext:
        scenario = {"hello": {"devices": TWO_GPUS, "nvml_count": 2} if hello is None else hello,
                    "tasks": _healthy_tasks() if tasks is None else tasks, "log": str(log)}
        ctx.setdefault("profile_name", "h100-sxm")
        ctx.setdefault("budget_s", 60.0)
        return ActiveContext(worker_argv=[sys.executable, str(script), json.dumps(scenario)], **ctx)

    make.requests = lambda: [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
    return make


def _status(results) -> dict:
    return {(r.check, r.subject): r.status for r in results}


def test_healthy_node_passes_every_epilog_check(fake):
    res = run_active("epilog", fake())
    assert {r.check for r in res} == EPILOG_CHECKS
    assert all(r.status is Status.PASS for r in res), [r for r in res if r.status is not Status.PASS]
    assert len([r for r in res if r.check == "burn-in"]) == 2


def test_the_worker_is_asked_for_the_stage_workload_in_order(fake):
    ctx = fake(config={"epilog": {"burnin_s": 3.0, "nccl_mib": 512}})
    run_active("epilog", ctx)
    reqs = fake.requests()
    assert [r["task"] for r in reqs] == ["topology", "burnin", "hbm", "memtest", "hostlink", "p2p", "nccl"]
    by = {r["task"]: r for r in reqs}
    assert by["burnin"]["params"]["seconds"] == 3.0 and by["burnin"]["params"]["dtypes"] == ["bf16", "tf32"]
    assert by["nccl"]["params"]["mib"] == 512
    assert by["burnin"]["devices"] == [0, 1]


def test_injected_wrong_checksum_fails_the_node(fake):
    tasks = _healthy_tasks()
    tasks["burnin"]["data"]["dtypes"]["bf16"]["gpus"]["gpu1"]["hash_changes"] = 5
    res = run_active("epilog", fake(tasks=tasks))
    failing = [r for r in res if r.status is Status.FAIL]
    assert [(r.check, r.subject, r.action) for r in failing] == [("burn-in", "gpu1", Action.DRAIN_TICKET)]


def test_a_gpu_wrong_only_in_fp64_fails_the_burn_in_and_its_pass_rates_never_reach_gpu_speed(fake):
    # The correctness pass (fp16, fp32, fp64 by default) is asked for with the timed precisions;
    # gpu1's fp64 product differs from its sibling's and its fp32 rate is a tenth of gpu0's: the
    # burn-in fails both GPUs (two siblings, no majority) naming fp64, gpu-speed passes both.
    tasks = _healthy_tasks()
    checked = tasks["burnin"]["data"]["checked"]
    checked["fp64"]["gpus"]["gpu1"]["hash"] = "fp64-54409853867a0000"
    checked["fp32"]["gpus"]["gpu1"]["tflops"] = 5.0
    res = run_active("epilog", fake(tasks=tasks, checks={"gpu-speed": {"thresholds": {"tflops": {"fp32": 50.0}}}}))
    (req,) = [q for q in fake.requests() if q["task"] == "burnin"]
    assert req["params"]["check_dtypes"] == ["fp16", "fp32", "fp64"] and req["params"]["check_s"] == 0.25
    burn = {r.subject: r for r in res if r.check == "burn-in"}
    assert {s: r.status for s, r in burn.items()} == {"gpu0": Status.FAIL, "gpu1": Status.FAIL}
    assert "fp64 result differs bitwise from gpu0" in burn["gpu1"].message
    assert burn["gpu1"].action is Action.DRAIN_TICKET
    speed = [r for r in res if r.check == "gpu-speed"]
    assert [r.status for r in speed] == [Status.PASS, Status.PASS], speed
    assert all(set(r.value) == {"bf16", "tf32", "nvml"} and "fp32" not in r.message for r in speed)


def test_injected_wrong_allreduce_sum_fails_the_node(fake):
    tasks = _healthy_tasks()
    tasks["nccl"]["data"]["gpus"]["gpu0"] = {"bad": 1, "first_bad": 0}
    res = run_active("epilog", fake(tasks=tasks))
    (r,) = [r for r in res if r.status is Status.FAIL]
    assert r.check == "nccl-local" and "wrong sums" in r.message


def test_hung_task_is_killed_reported_by_check_id_and_the_rest_still_runs(fake):
    tasks = _healthy_tasks()
    tasks["burnin"] = {"hang": 60}
    ctx = fake(tasks=tasks, checks={"burn-in": {"timeout_s": 1.0}})
    t0 = time.monotonic()
    res = run_active("epilog", ctx)
    assert time.monotonic() - t0 < 30  # the 60 s hang was cut short
    st = {r.check: r for r in res if r.subject == "node"}
    for check in ("burn-in", "gpu-speed"):
        assert st[check].status is Status.ERROR and st[check].message == "burnin task timed out after 1s"
    assert all(r.status is Status.PASS for r in res if r.check not in ("burn-in", "gpu-speed"))
    assert "nccl" in [r["task"] for r in fake.requests()]  # a fresh worker ran the remaining tasks


def test_end_to_end_a_stalled_p2p_is_the_finding_and_a_stalled_burn_in_is_not(fake, monkeypatch):
    from gpuhc.active import stall

    monkeypatch.setattr(stall, "MIN_S", 1.0)  # a short test: the healthy estimate of 2 GPUs is ~0.35 s
    tasks = _healthy_tasks()
    tasks["p2p"] = {"hang": 60}
    res = run_active("epilog", fake(tasks=tasks, checks={"p2p": {"timeout_s": 1.5}}))
    (r,) = [r for r in res if r.check == "p2p"]
    assert r.status is Status.FAIL and r.evidence == "gpu-link-stall", r.message
    assert all(x.status is Status.PASS for x in res if x.check != "p2p"), [(x.check, x.message) for x in res]
    # the same hang while no compute task completed (the burn-in hung, the others failed): nothing
    # says the GPUs work
    tasks["burnin"] = {"hang": 60}
    for t in ("hbm", "memtest"):
        tasks[t] = {"fail": {"kind": "cuda", "message": "an illegal memory access was encountered"}}
    res = run_active("epilog", fake(tasks=tasks, checks={c: {"timeout_s": 1.5} for c in ("burn-in", "p2p")}))
    (r,) = [r for r in res if r.check == "p2p"]
    assert r.status is Status.ERROR and r.message.startswith("p2p task timed out")


def test_crashed_worker_is_reported_with_its_last_words(fake):
    tasks = _healthy_tasks()
    tasks["hbm"] = {"die": True}
    res = run_active("epilog", fake(tasks=tasks))
    (r,) = [r for r in res if r.check == "hbm"]
    assert r.status is Status.ERROR and "exit 139" in r.message and "Segmentation fault" in r.message
    assert [r.status for r in res if r.check == "nccl-local"] == [Status.PASS]


def test_ecc_error_in_the_worker_fails_with_a_reset(fake):
    tasks = _healthy_tasks()
    tasks["memtest"] = {"fail": {"kind": "ecc", "message": "cudaErrorECCUncorrectable", "restart": True}}
    res = run_active("epilog", fake(tasks=tasks))
    (r,) = [r for r in res if r.check == "memtest"]
    assert r.status is Status.FAIL and r.action is Action.RESET_GPU
    assert [r.status for r in res if r.check == "host-link"] == [Status.PASS, Status.PASS]


def test_out_of_memory_is_an_error_not_a_verdict(fake):
    tasks = _healthy_tasks()
    tasks["memtest"] = {"fail": {"kind": "oom", "message": "Out of memory allocating 68,719,476,736 bytes"}}
    (r,) = [r for r in run_active("epilog", fake(tasks=tasks)) if r.check == "memtest"]
    assert r.status is Status.ERROR and "out of GPU memory" in r.message


def test_no_gpu_means_not_applicable(fake):
    res = run_active("epilog", fake(hello={"devices": [], "nvml_count": 0}))
    assert {r.check for r in res} == EPILOG_CHECKS
    assert all(r.status is Status.NA and r.message == "no NVIDIA GPU on this node" for r in res)


def test_gpus_without_cupy_run_the_topology_and_ask_for_the_gpu_extra(fake):
    devices = [dict(d, cuda=None) for d in TWO_GPUS]
    res = run_active("epilog", fake(hello={"devices": devices, "nvml_count": 2, "cupy": False,
                                           "cupy_error": "ModuleNotFoundError: No module named 'cupy'"}))
    by = {r.check: r for r in res}
    assert by["topology"].status is Status.PASS
    for check in EPILOG_CHECKS - {"topology"}:
        assert by[check].status is Status.ERROR and INSTALL_HINT in by[check].message
        assert "No module named 'cupy'" in by[check].message


def test_cuda_blind_to_gpus_nvml_sees_is_an_error(fake):
    res = run_active("epilog", fake(hello={"devices": [], "nvml_count": 8,
                                           "cuda_error": "cudaErrorSystemNotReady: system not yet initialized"}))
    assert all(r.status is Status.ERROR and "NVML sees 8 GPUs but CUDA sees none" in r.message for r in res)


def test_busy_gpu_is_the_occupancy_finding_and_the_others_are_tested(fake):
    # Issue 14: in the epilog a GPU another process holds drains (never an error that cannot).
    busy = [dict(TWO_GPUS[0]), dict(TWO_GPUS[1], procs=[{"pid": 4242, "name": "python", "used": 3 << 30}])]
    tasks = {k: {"data": v["data"]} for k, v in _healthy_tasks().items()}
    res = run_active("epilog", fake(hello={"devices": busy, "nvml_count": 2}, tasks=tasks))
    (r,) = [r for r in res if r.check == "occupancy"]
    assert r.status is Status.FAIL and r.subject == "gpu1" and r.action.drains and r.value == [4242]
    assert r.message == "gpu1 busy with pid 4242 (python, 3.0 GiB): active checks skipped on it"
    assert not [r for r in res if r.check == "active"]
    reqs = {q["task"]: q for q in fake.requests()}
    assert reqs["burnin"]["devices"] == [0] and reqs["topology"]["devices"] == [0, 1]


def test_busy_gpu_of_unknown_owner_stays_an_error(fake):
    # A Slurm job whose GPUs are unknown: the process may be another job's, so no drain.
    busy = [dict(TWO_GPUS[0]), dict(TWO_GPUS[1], procs=[{"pid": 4242, "name": "python", "used": 3 << 30}])]
    tasks = {k: {"data": v["data"]} for k, v in _healthy_tasks().items()}
    res = run_active("epilog", fake(hello={"devices": busy, "nvml_count": 2}, tasks=tasks, busy_is_finding=False))
    (r,) = [r for r in res if r.check == "active"]
    assert r.status is Status.ERROR and r.subject == "gpu1"
    assert not [r for r in res if r.check == "occupancy"]


def test_job_gpus_restrict_the_devices(fake):
    run_active("epilog", fake(gpus=[1]))
    assert {tuple(q["devices"]) for q in fake.requests() if q["task"] != "topology"} == {(1,)}


def test_a_small_budget_skips_what_does_not_fit(fake):
    res = run_active("epilog", fake(budget_s=4.0))
    skipped = [r for r in res if r.status is Status.ERROR]
    assert skipped and all("not run:" in r.message and "of the stage budget left" in r.message for r in skipped)
    assert "burnin" not in [q["task"] for q in fake.requests()]


def test_worker_that_cannot_start_is_an_error_for_each_check(tmp_path):
    script = tmp_path / "broken.py"
    script.write_text("import sys\nsys.stderr.write('ImportError: libcuda.so.1 not found\\n')\nsys.exit(3)\n")
    res = run_active("epilog", ActiveContext(worker_argv=[sys.executable, str(script)], budget_s=20))
    assert {r.check for r in res} == EPILOG_CHECKS
    assert all(r.status is Status.ERROR and "GPU worker exited at start: ImportError: libcuda.so.1" in r.message
               for r in res)


def test_bad_active_config_is_an_error_result_not_an_exception(fake):
    (r,) = run_active("epilog", fake(config={"epilog": {"checks": ["burn-in", "gpu-sped"]}}))
    assert r.status is Status.ERROR and "unknown active check 'gpu-sped'" in r.message
    (r,) = run_active("epilog", fake(config={"dtypes": ["bf8"]}))
    assert "unknown dtype 'bf8'" in r.message


def test_disabled_checks_and_stages(fake):
    assert run_active("epilog", fake(config={"enabled": False})) == []
    res = run_active("epilog", fake(checks={"p2p": {"enabled": False}, "memtest": {"enabled": False}}))
    assert {r.check for r in res} == EPILOG_CHECKS - {"p2p", "memtest"}
    (r,) = run_active("prolog", fake())
    assert r.status is Status.ERROR and "not 'prolog'" in r.message


def test_site_threshold_overrides_reach_the_judges(fake):
    res = run_active("epilog", fake(checks={"hbm": {"thresholds": {"gbps": 5000.0}}}))
    hbm = [r for r in res if r.check == "hbm"]
    assert all(r.status is Status.FAIL and "of the expected 5000" in r.message for r in hbm)


def test_bootstrap_runs_dcgm_when_installed(fake, tmp_path, monkeypatch):
    dcgmi = tmp_path / "dcgmi"
    dcgmi.write_text("#!/bin/sh\necho '{\"DCGM Diagnostic\": {\"test_categories\": [{\"category\": \"Hardware\", "
                     "\"tests\": [{\"name\": \"Memory\", \"results\": [{\"status\": \"Pass\", \"entity_id\": 0}]}]}]}}'\n")
    dcgmi.chmod(0o755)
    cfg = {"bootstrap": {"burnin_s": 1.0}, "dcgm_path": str(dcgmi)}
    res = run_active("bootstrap", fake(config=cfg, budget_s=600.0))
    (r,) = [r for r in res if r.check == "dcgm"]
    assert r.status is Status.PASS and r.message == "dcgmi diag -r 2: 1 pass"
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    monkeypatch.setattr("gpuhc.active.dcgm.SEARCH", ())
    (r,) = [r for r in run_active("bootstrap", fake(config={"bootstrap": {"burnin_s": 1.0}}, budget_s=600.0)) if r.check == "dcgm"]
    assert r.status is Status.NA


def test_topology_for_the_baseline_file(fake, tmp_path):
    from gpuhc.active.orchestrate import read_topology
    from gpuhc.errors import GpuhcError

    ctx = fake()
    topo = read_topology(30.0, worker_argv=ctx.worker_argv)
    assert topo["pairs"] == {"0000:1b:00.0|0000:3b:00.0": {"link": "nvlink", "level": "SYS"}}
    assert topo["gpus"]["0000:1b:00.0"]["nvlinks_active"] == 18
    broken = fake(tasks={"topology": {"fail": {"kind": "internal", "message": "NVML: Unknown Error"}}})
    with pytest.raises(GpuhcError, match="could not read the GPU topology: NVML: Unknown Error"):
        read_topology(30.0, worker_argv=broken.worker_argv)
