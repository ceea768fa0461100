"""On a GPU machine: does `gpuhc watch` stand in the way of a GPU reset, and is an NVML-only
monitor named? (issue 45; docs/repair.md "What blocks a reset"). For docs/verification.md.

What it does, in order:
  1. starts `gpuhc watch` (every 2 s, a private state directory) and an NVML-only monitor (a
     python loop calling pynvml, as nvtop or an exporter does: no CUDA), and waits until both
     hold /dev/nvidia* open (read from /proc/<pid>/fd);
  2. runs `gpuhc quarantine reset --plan --json --gpus 0` (plan only: the CLI refuses anything
     else) and reads whether the watcher blocks the plan, whether it is given the `yield` step,
     and whether the monitor's BLOCKED line names it as a monitor;
  3. drives the watcher's side of the yield handshake the way the ladder's reset would ask
     (gpuhc/slurm/repair/nvml_yield.py: the request, its acknowledgement), with no reset: the
     watcher must close its /dev/nvidia* files, acknowledge, and open them again once the
     request is taken back; the times are printed;
  4. compares persistence, compute mode and MIG mode before and after (must be equal).

Never resets a GPU and never changes persistence, clocks, power, compute mode or MIG: the plan
only reads (`systemctl show`, /proc, NVML), the handshake only makes gpuhc's own watcher shut
NVML down and start it again. Needs no Slurm (the plan then says Slurm could not be asked: one
more BLOCKED line, expected). About 20 s; one GPU is enough. Run from the repository root:

    python3 bench/watch_yield_probe.py --out /tmp/watch-yield

Prints one JSON summary (also written to <out>/summary.json); exit 0 when the watcher does not
block the plan, yields and resumes, and `nvidia-smi -l 1` (started beside the pynvml loop) is
named as a monitor, and so is the pynvml loop (an NVML client: no CUDA context mapped); 1
otherwise. The CUDA libraries the loop maps are reported beside it (with driver 580 it maps
libcuda.so without a context, which is why the plan looks at the mapped devices).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

MONITOR = r'''
import time, pynvml
pynvml.nvmlInit()
n = pynvml.nvmlDeviceGetCount()
while True:  # what nvtop, an exporter or `nvidia-smi -l` does: NVML only, no CUDA context
    for i in range(n):
        pynvml.nvmlDeviceGetUtilizationRates(pynvml.nvmlDeviceGetHandleByIndex(i))
    time.sleep(0.5)
'''


def nvidia_fds(pid: int) -> list[str]:
    out = []
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("/dev/nvidia"):
                out.append(target)
    except OSError:
        pass
    return sorted(set(out))


def wait_for(cond, limit_s: float, step_s: float = 0.05) -> float | None:
    """Seconds until ``cond()`` held, or None after ``limit_s``."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit_s:
        if cond():
            return round(time.monotonic() - t0, 3)
        time.sleep(step_s)
    return None


def settings() -> str:
    r = subprocess.run(["nvidia-smi", "--query-gpu=index,persistence_mode,compute_mode,mig.mode.current",
                        "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
    return r.stdout.strip()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or "/tmp/gpuhc-watch-yield")
    ap.add_argument("--interval", type=float, default=2.0, help="gpuhc watch's round interval (s)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    from gpuhc.slurm.repair import nvml_yield

    work = tempfile.mkdtemp(prefix="gpuhc-yield-")  # 0700, ours: the state directory's rules hold
    state, cfg, log = os.path.join(work, "state"), os.path.join(work, "gpuhc.yaml"), os.path.join(args.out, "decisions.log")
    with open(cfg, "w") as f:
        f.write(f"slurm:\n  syslog: false\n  timeout_s: 3\n  log_file: {log}\n")
    env = {**os.environ, "PYTHONPATH": REPO, "PYTHONUNBUFFERED": "1"}
    gpuhc = [sys.executable, "-m", "gpuhc"]
    before = settings()
    started: list[subprocess.Popen] = []
    summary: dict = {"settings_before": before}
    try:
        watch = subprocess.Popen([*gpuhc, "watch", "--interval", str(args.interval), "--config", cfg, "--state-dir",
                                  state, "--node", "probe"], env=env, cwd=REPO,
                                 stdout=open(os.path.join(args.out, "watch.out"), "w"), stderr=subprocess.STDOUT)
        started.append(watch)
        monitor = subprocess.Popen([sys.executable, "-c", MONITOR], env=env, cwd=REPO,
                                   stdout=open(os.path.join(args.out, "monitor.out"), "w"), stderr=subprocess.STDOUT)
        started.append(monitor)
        # The monitor sites run most: `nvidia-smi -l`, a known name the plan must call a monitor.
        smi = subprocess.Popen(["nvidia-smi", "-l", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        started.append(smi)
        registered = os.path.join(nvml_yield.directory(state), f"watch-{watch.pid}.json")
        summary["watch_holds_after_s"] = wait_for(lambda: nvidia_fds(watch.pid) and os.path.exists(registered), 30)
        summary["monitor_holds_after_s"] = wait_for(lambda: bool(nvidia_fds(monitor.pid)), 30)
        summary["smi_holds_after_s"] = wait_for(lambda: bool(nvidia_fds(smi.pid)), 30)
        summary["watch_fds"], summary["monitor_fds"] = nvidia_fds(watch.pid), nvidia_fds(monitor.pid)
        # does the pynvml loop hold a CUDA context (the plan calls a holder without one an NVML client)
        from gpuhc.node.holders import cuda_context

        summary["monitor_cuda_context"] = cuda_context("/proc", monitor.pid)
        with open(f"/proc/{monitor.pid}/maps", "rb") as f:
            summary["monitor_cuda_libs"] = sorted({ln.rsplit(b"/", 1)[-1].decode(errors="replace")
                                                   for ln in f.read(8 << 20).splitlines() if b"cuda" in ln.lower()})

        plan_argv = [*gpuhc, "quarantine", "reset", "--plan", "--json", "--gpus", "0", "--config", cfg,
                     "--state-dir", state]
        assert "--plan" in plan_argv  # plan only: the CLI refuses a reset without it, and so does this script
        p = subprocess.run(plan_argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
        with open(os.path.join(args.out, "plan.json"), "w") as f:
            f.write(p.stdout + p.stderr)
        plan = json.loads(p.stdout) if p.stdout.strip().startswith("{") else {}
        blockers = plan.get("blockers", [])
        summary["plan_rc"] = p.returncode
        summary["plan_blockers"] = blockers
        summary["plan_blocked_by_watch"] = any(f"pid {watch.pid} " in b for b in blockers)
        summary["plan_yield_step"] = [s for s in plan.get("steps", []) if s.get("kind") == "yield"]
        named = [b for b in blockers if f"pid {monitor.pid} " in b]
        summary["monitor_line"] = named[0] if named else None
        summary["monitor_named"] = bool(named) and ("monitor" in named[0])
        named = [b for b in blockers if f"pid {smi.pid} " in b]
        summary["smi_line"] = named[0] if named else None
        summary["smi_named"] = bool(named) and ("nvidia-smi" in named[0] and "loop" in named[0])

        # The reset's request, with no reset: the watcher lets go, says so, and takes NVML back.
        t0 = time.monotonic()
        req = nvml_yield.ask(state, time.time() + 30)
        summary["yield_ack_s"] = wait_for(lambda: watch.pid in nvml_yield.acked(state, req, {watch.pid}), 15)
        summary["watch_fds_while_yielded"] = nvidia_fds(watch.pid)
        time.sleep(1.0)
        summary["watch_fds_1s_later"] = nvidia_fds(watch.pid)
        nvml_yield.release(state)
        summary["yielded_for_s"] = round(time.monotonic() - t0, 3)
        summary["watch_holds_again_after_s"] = wait_for(lambda: bool(nvidia_fds(watch.pid)), 4 * args.interval + 5)
        summary["watch_alive"] = watch.poll() is None
    finally:
        for proc in started:  # only what this script started, by its own handle
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    summary["settings_after"] = settings()
    summary["settings_unchanged"] = summary["settings_after"] == before
    ok = (not summary.get("plan_blocked_by_watch", True) and bool(summary.get("plan_yield_step"))
          and summary.get("smi_named") and summary.get("monitor_named") and summary.get("yield_ack_s") is not None
          and not summary.get("watch_fds_while_yielded") and summary.get("watch_holds_again_after_s") is not None
          and summary["settings_unchanged"])
    summary["ok"] = bool(ok)
    text = json.dumps(summary, indent=2)
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        f.write(text + "\n")
    print(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
