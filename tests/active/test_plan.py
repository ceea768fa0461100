"""The active checks' configuration and plumbing that needs no GPU: the `active` config section,
the stage plans, threshold layering, the worker's protocol and error classification, and the
NVML sample summary."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from gpuhc.active import ACTIVE_CHECK_IDS, plan, settings, thresholds
from gpuhc.active.gpu import classify
from gpuhc.active.nvml_probe import summarize
from gpuhc.errors import ConfigError
from gpuhc.text.schema import Key, defaults
from tests.helpers.paths import REPO


def _keys(section: dict, prefix: str = ""):
    for name, spec in section.items():
        if isinstance(spec, dict):
            yield from _keys(spec, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", spec


def test_every_setting_default_satisfies_its_own_key():
    for name, spec in _keys(settings.SCHEMA):
        assert isinstance(spec, Key)
        assert spec.check(spec.default) is None, name


def test_stage_check_lists_name_known_checks():
    d = defaults(settings.SCHEMA)
    for stage in ("epilog", "bootstrap"):
        assert set(d[stage]["checks"]) <= set(ACTIVE_CHECK_IDS)
    assert set(settings.ALL_CHECKS) == set(ACTIVE_CHECK_IDS)


def test_epilog_plan_is_short_and_ordered():
    p = plan.build("epilog", {})
    assert [t.name for t in p.tasks] == ["topology", "burnin", "hbm", "memtest", "hostlink", "p2p", "nccl"]
    assert p.dcgm_level == 0
    burn = p.tasks[1]
    assert burn.checks == ["burn-in", "gpu-speed"] and burn.params["seconds"] == 4.0
    # the whole epilog workload is estimated well inside the 30 s epilog budget on 8 GPUs
    assert sum(t.estimate_s(8) for t in p.tasks) < 25


def test_bootstrap_plan_runs_dcgm_and_the_long_burn_in():
    p = plan.build("bootstrap", {})
    assert p.dcgm_level == 2 and "dcgm" in p.checks
    assert p.tasks[1].params["seconds"] == 60.0 and p.tasks[3].params["fraction"] == 0.85


def test_p2p_alone_still_reads_the_topology():
    p = plan.build("epilog", {"epilog": {"checks": ["p2p"]}})
    assert [(t.name, t.checks) for t in p.tasks] == [("topology", ["p2p"]), ("p2p", ["p2p"])]


def test_disabled_checks_drop_out_of_the_plan():
    p = plan.build("epilog", {}, enabled=lambda c: c not in ("burn-in", "gpu-speed"))
    assert "burnin" not in [t.name for t in p.tasks]
    assert plan.build("bootstrap", {"bootstrap": {"dcgm_level": 0}}).dcgm_level == 0


@pytest.mark.parametrize("config,key", [
    ({"epilog": {"checks": ["burnin"]}}, "active.epilog.checks"),
    ({"dtypes": ["int8"]}, "active.dtypes"),
    ({"dtypes": []}, "active.dtypes"),
])
def test_bad_plan_config_names_the_key(config, key):
    with pytest.raises(ConfigError) as e:
        plan.build("epilog", config)
    assert e.value.key == key


def test_thresholds_layer_defaults_profile_and_site():
    t = thresholds.thresholds_for("h200-sxm", {"hbm": {"min_fraction": 0.5}, "gpu-speed": {"tflops": {"tf32": 1.0}}})
    assert t["hbm"]["gbps"] == 4200 and t["hbm"]["min_fraction"] == 0.5 and t["hbm"]["warn_fraction"] == 0.93
    assert t["gpu-speed"]["tflops"] == {"bf16": 700, "tf32": 1.0}  # per-dtype tables merge key by key
    assert thresholds.thresholds_for("no-such-gpu")["hbm"]["gbps"] is None


def test_every_gpu_profile_gives_every_active_check_valid_thresholds():
    from gpuhc.active.registry import CHECK
    from gpuhc.config.profiles import profile_names

    assert {"a100-sxm", "generic", "h100-sxm", "h200-sxm"} <= set(profile_names())
    for name in profile_names():
        t = thresholds.thresholds_for(name)
        assert set(t) == set(thresholds.DEFAULTS)
        for cid, values in t.items():
            validate = CHECK[cid].validate
            assert validate is None or validate(values) == [], (name, cid)


@pytest.mark.parametrize("exc,kind", [
    (type("OutOfMemoryError", (Exception,), {})("Out of memory allocating 1,024 bytes"), "oom"),
    (type("CUDARuntimeError", (Exception,), {})("cudaErrorECCUncorrectable: uncorrectable ECC error"), "ecc"),
    (type("CUDARuntimeError", (Exception,), {})("cudaErrorLaunchFailure: unspecified launch failure"), "cuda"),
    (type("NcclError", (Exception,), {})("NCCL_ERROR_SYSTEM_ERROR"), "nccl"),
    (KeyError("n"), "internal"),
])
def test_worker_error_classification(exc, kind):
    assert classify(exc)[0] == kind


def test_nvml_samples_reduce_to_reason_fractions():
    s = summarize([
        {"sm_mhz": 1980, "temp_c": 50, "power_w": 300.0, "reasons": 0x1},
        {"sm_mhz": 1500, "temp_c": 70, "power_w": 700.0, "reasons": 0x4 | 0x40},
        {"sm_mhz": 1400, "temp_c": None, "power_w": 699.0, "reasons": 0x4},
        {"sm_mhz": None, "temp_c": 71, "power_w": None, "reasons": None},
    ])
    assert s["n"] == 4 and s["sm_mhz_min"] == 1400 and s["sm_mhz_median"] == 1500 and s["temp_c_max"] == 71
    assert s["reasons"] == {"gpu_idle": 0.333, "sw_power_cap": 0.667, "hw_thermal_slowdown": 0.333}
    assert summarize([])["n"] == 0


def test_real_worker_speaks_the_protocol_without_a_gpu():
    """The real worker on this machine: says hello (whatever it finds), runs an unknown task as
    a clean failure, and exits on quit. No GPU is needed for any of it."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    reqs = [{"task": "no-such-task", "params": {}, "devices": []}, {"task": "quit"}]
    proc = subprocess.run([sys.executable, "-m", "gpuhc.active.worker"], input="\n".join(map(json.dumps, reqs)) + "\n",
                          capture_output=True, text=True, timeout=60, env=env, check=False)
    events = [json.loads(x) for x in proc.stdout.splitlines()]
    assert proc.returncode == 0, proc.stderr
    assert events[0]["ev"] == "hello" and isinstance(events[0]["devices"], list)
    assert [e["ev"] for e in events[1:]] == ["start", "fail"]
    assert events[2]["kind"] == "internal" and "unknown task 'no-such-task'" in events[2]["message"]


def test_worker_dies_with_its_parent(tmp_path):
    """An orphaned worker must not keep a node's GPUs busy: when the process that started it is
    killed, the kernel kills the worker too (PR_SET_PDEATHSIG)."""
    import signal
    import time

    pidfile = tmp_path / "worker.pid"
    root = str(REPO)
    parent_code = (
        "import sys, time\n"
        "from gpuhc.active.supervise import Worker, worker_env\n"
        f"w = Worker([sys.executable, '-m', 'gpuhc.active.worker'], worker_env())\n"
        "w.event(time.monotonic() + 60)\n"
        f"open({str(pidfile)!r}, 'w').write(str(w.proc.pid))\n"
        "time.sleep(120)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", parent_code], env=dict(os.environ, PYTHONPATH=root))
    try:
        deadline = time.monotonic() + 60
        while not (pidfile.exists() and pidfile.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        worker = int(pidfile.read_text())
        os.kill(worker, 0)  # alive while its parent is
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        gone = False
        for _ in range(200):
            if _dead(worker):
                gone = True
                break
            time.sleep(0.05)
        assert gone, "the worker outlived its parent"
    finally:
        parent.kill()


def _dead(pid: int) -> bool:
    """Gone, or a zombie nobody has reaped yet (a container's init may never reap it)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            return any(line.startswith("State:") and "Z" in line.split()[1] for line in f)
    except FileNotFoundError:
        return True
