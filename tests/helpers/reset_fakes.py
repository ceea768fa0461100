"""The hardware boundary of the GPU reset procedure, faked for its tests: a ``/proc`` tree
(processes with ``/dev/nvidia*`` open, their cgroups, the driver's per-GPU information file),
``systemctl`` and ``nvidia-smi`` as executables that record every argv, in order, into one file,
and NVML read through gpuhc's real NVML source and occupancy reader over
tests/helpers/fake_pynvml.py.

One JSON file is the node's state that the fakes share: which units run, which processes each
unit owns, the GPUs' persistence, UUIDs and fabric state. The fakes behave as the real tools do
where the procedure depends on it: stopping a unit ends its processes (their /proc entries go);
``nvidia-smi -r`` refuses a GPU still held open, with the driver's message (quoted from
NVIDIA/NVSentinel#1690); a reset sends the GPUs' fabric registration back to "in progress"
until Fabric Manager starts again.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from tests.helpers.fake_pynvml import FakeGpu, FakeNvml

from gpuhc.sources.nvml import NvmlLive

PCI = "0000:{:02x}:00.0"

_TOOL = r'''#!{python}
import json, os, shutil, sys
root = {root!r}
state_path = os.path.join(root, "state.json")
st = json.load(open(state_path))
argv = [os.path.basename(sys.argv[0])] + sys.argv[1:]
with open(os.path.join(root, "calls.log"), "a") as f:
    f.write(" ".join(argv) + "\n")
key = " ".join(argv[1:])
# kill_at [k, "before" | "after"]: SIGKILL to the gpuhc run (this tool's parent) at its k-th
# command, before or after the command took effect, as slurmd's kill at the hook's timeout.
kill = st.get("kill_at")
nth = len(open(os.path.join(root, "calls.log")).read().splitlines())
if kill and kill[0] == nth and kill[1] == "before":
    os.kill(os.getppid(), 9)
    sys.exit(1)
if key in st.get("fail", []):
    print("fake failure of " + key, file=sys.stderr)
    sys.exit(1)

def save():
    json.dump(st, open(state_path, "w"))

def procs_of(unit):
    return [p for p, u in st["procs"].items() if u["unit"] == unit + ".service"]

if key in st.get("fail_once", []):  # a unit whose first start loses a race, as systemd's can
    st["fail_once"].remove(key)
    save()
    print("fake failure (once) of " + key, file=sys.stderr)
    sys.exit(1)
if key in st.get("hang", []):
    # Never returns: deaf to SIGTERM, and a helper in a session of its own keeps the output pipe
    # open, so killing this process group ends neither the wait for the exit nor for the pipe,
    # as with an nvidia-smi stuck in the driver (uninterruptible sleep) that SIGKILL cannot reap.
    import signal, subprocess, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    helper = subprocess.Popen(["sleep", "120"], start_new_session=True)
    with open(os.path.join(root, "left-behind.pids"), "a") as f:
        f.write("%d\n" % helper.pid)
    time.sleep(120)

if argv[0] == "systemctl":
    if argv[1] == "show":
        units = argv[argv.index("--") + 1:]
        out = []
        for u in units:
            if u in st["units"]:
                out.append(f"Id={{u}}.service\nLoadState=loaded\nActiveState={{st['units'][u]}}")
            else:
                out.append(f"Id={{u}}.service\nLoadState=not-found\nActiveState=inactive")
        print("\n\n".join(out))
    elif argv[1] == "stop":
        st["units"][argv[2]] = "inactive"
        for p in procs_of(argv[2]):
            shutil.rmtree(os.path.join(root, "proc", p), ignore_errors=True)
        if argv[2] == "nvidia-fabricmanager":
            st["fm"] = False
        save()
    elif argv[1] == "start":
        st["units"][argv[2]] = "active"
        if argv[2] == "nvidia-fabricmanager" and not st.get("fabric_stuck"):
            st["fm"] = True
            for g in st["gpus"].values():
                if g["fabric"] is not None:
                    g["fabric"] = 3
        save()
elif argv[0] == "nvidia-smi":
    if "-pm" in argv:
        i = argv[argv.index("-i") + 1]
        st["gpus"][i]["pm"] = int(argv[argv.index("-pm") + 1])
        save()
        # persistence off: nvidia-persistenced closes that GPU's device (NVIDIA/NVSentinel#1692)
        dev = "/dev/nvidia%d" % st["gpus"][i]["minor"]
        for p in procs_of("nvidia-persistenced"):
            fd = os.path.join(root, "proc", p, "fd")
            for x in (os.listdir(fd) if os.path.isdir(fd) else []):
                if os.readlink(os.path.join(fd, x)) == dev and st["gpus"][i]["pm"] == 0:
                    os.unlink(os.path.join(fd, x))
        print("All done.")
    elif "-r" in argv:
        wanted = argv[argv.index("-i") + 1].split(",")
        held = []
        for i in wanted:
            dev = "/dev/nvidia%d" % st["gpus"][i]["minor"]
            for p in st["procs"]:
                if st.get("fm_facilitates") and st["procs"][p]["unit"] == "nvidia-fabricmanager.service":
                    continue  # Ampere NVSwitch: Fabric Manager takes part in the reset (nvidia-smi(1))
                fd = os.path.join(root, "proc", p, "fd")
                if os.path.isdir(fd) and any(os.readlink(os.path.join(fd, x)) == dev for x in os.listdir(fd)):
                    held.append(i)
        if held:
            print("The following GPUs could not be reset:")
            for i in held:
                print("  GPU %s: In use by another client" % st["gpus"][i]["pci"])
            sys.exit(255)
        for i in wanted:
            g = st["gpus"][i]
            g["resets"] = g.get("resets", 0) + 1
            if g["fabric"] is not None:
                g["fabric"] = 3 if st.get("fm") and not st.get("fabric_stuck") else 2
            g["uuid"] = st.get("uuid_after_reset", {{}}).get(i, g["uuid"])
        save()
        for i in wanted:
            print("GPU %s was successfully reset." % st["gpus"][i]["pci"])
if kill and kill[0] == nth and kill[1] == "after":
    os.kill(os.getppid(), 9)
'''


def killed_at(node: "FakeNode", k: int, when: str, run) -> int:
    """``run()`` (a reset over ``node``) in a child process that the fake tools kill -9 at their
    ``k``-th command, ``when`` "before" or "after" it took effect; the child's wait status."""
    node.change(kill_at=[k, when])
    pid = os.fork()
    if pid == 0:  # the gpuhc run: ends by the kill, or by itself when it has fewer commands
        try:
            run()
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    node.change(kill_at=None)
    return status


class FakeNode:
    """A node of ``n`` GPUs, named ``model``, whose units are ``units`` (name -> running) and
    whose processes are ``procs`` (pid -> (comm, unit or None, devices held[, maps CUDA: default True]))."""

    def __init__(self, root: Path, n: int = 4, model: str = "NVIDIA H100 80GB HBM3", nvlinks: int = 18,
                 fabric: int | None = 3, units: dict[str, bool] | None = None,
                 procs: dict[int, tuple] | None = None, nvswitch: bool = True,
                 minors: list[int] | None = None):
        self.root = root
        self.model, self.nvlinks = model, nvlinks
        (root / "proc").mkdir(parents=True)
        (root / "dev").mkdir()
        if nvswitch:
            (root / "dev" / "nvidia-nvswitch0").write_text("")
        minors = minors or list(range(n))
        units = units if units is not None else {"nvidia-persistenced": True, "nvidia-fabricmanager": True,
                                                  "nvidia-dcgm": True}
        st = {"units": {u: "active" if on else "inactive" for u, on in units.items()},
              "fm": bool(units.get("nvidia-fabricmanager")), "procs": {}, "fail": [],
              "gpus": {str(i): {"uuid": f"GPU-{i:08x}-0000-0000-0000-000000000000", "pci": PCI.format(0x18 + i),
                                "minor": minors[i], "pm": 1, "fabric": fabric} for i in range(n)}}
        for i in range(n):
            d = root / "proc" / "driver" / "nvidia" / "gpus" / PCI.format(0x18 + i)
            d.mkdir(parents=True)
            # the driver's own layout (open-gpu-kernel-modules, nv-procfs.c); only the minor is read
            d.joinpath("information").write_text(
                f"Model: \t\t {model}\nIRQ:   \t\t 0\nGPU UUID: \t {st['gpus'][str(i)]['uuid']}\n"
                f"Video BIOS: \t 96.00.99.00.01\nBus Type: \t PCIe\nDMA Size: \t 52 bits\n"
                f"DMA Mask: \t 0xfffffffffffff\nBus Location: \t {PCI.format(0x18 + i)}\nDevice Minor: \t {minors[i]}\n"
                f"GPU Firmware: \t 580.95.05\nGPU Excluded:\t No\n")
        for pid, (comm, unit, devices, *cuda) in (procs or {}).items():
            self.add_proc(st, pid, comm, unit, devices, cuda=cuda[0] if cuda else True)
        self.save(st)
        for tool in ("systemctl", "nvidia-smi"):
            p = root / tool
            p.write_text(_TOOL.format(python=sys.executable, root=str(root)))
            p.chmod(0o755)

    def add_proc(self, st: dict, pid: int, comm: str, unit: str | None, devices: list[str], cuda: bool = True) -> None:
        """``cuda``: the process holds a CUDA context (maps its GPU's file and nvidia-uvm); else it is an
        NVML client (maps nvidiactl alone). Both map libcuda.so, as a pynvml loop does with driver 580."""
        d = self.root / "proc" / str(pid)
        (d / "fd").mkdir(parents=True)
        (d / "comm").write_text(comm + "\n")
        files = ["/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.95.05", "/usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05",
                 "/dev/nvidiactl"] + ([next((f for f in devices if f[11:].isdigit()), "/dev/nvidia0"), "/dev/nvidia-uvm"]
                                      if cuda else [])
        (d / "maps").write_text("".join(f"7f1c2a{i:02x}0000-7f1c2a{i:02x}8000 r-xp 00000000 08:01 {4242 + i} {f}\n"
                                        for i, f in enumerate(files)))
        (d / "cgroup").write_text(f"0::/system.slice/{unit}.service\n" if unit else "0::/user.slice/user-1000.slice\n")
        for n, dev in enumerate(devices + ["/dev/null", "socket:[12345]"]):
            os.symlink(dev, d / "fd" / str(n))
        # NVML lists a CUDA program on the GPU its context is on: the device file it maps
        st["procs"][str(pid)] = {"comm": comm, "unit": f"{unit}.service" if unit else None,
                                 "context": files[3] if cuda else None}

    def state(self) -> dict:
        return json.loads((self.root / "state.json").read_text())

    def save(self, st: dict) -> None:
        (self.root / "state.json").write_text(json.dumps(st))

    def change(self, **kw) -> None:
        st = self.state()
        st.update(kw)
        self.save(st)

    def calls(self) -> list[str]:
        p = self.root / "calls.log"
        return p.read_text().splitlines() if p.exists() else []

    nvml_hangs = False  # True: every read blocks, as NVML on a GPU throwing errors can (NVIDIA/DCGM#313)

    def _gpus(self, st: dict) -> list[FakeGpu]:
        """The fake library's GPUs. Its process lists: each CUDA program on the GPU its context is
        on while /proc has it, then ``nvml_only`` (GPU index -> pids /proc does not show, as a
        process in another PID namespace); ``nvml_fail`` (GPU index -> NVML error code) makes
        that GPU's compute list fail."""
        gpus = []
        for i, g in sorted(st["gpus"].items(), key=lambda kv: int(kv[0])):
            dev = "/dev/nvidia%d" % g["minor"]
            pids = [int(p) for p, u in st["procs"].items()
                    if u.get("context") == dev and (self.root / "proc" / p).is_dir()]
            fail = st.get("nvml_fail", {}).get(i)
            fake = FakeGpu(name=self.model, uuid=g["uuid"], pci=g["pci"], persistence=g["pm"],
                           fabric=None if g["fabric"] is None else (g["fabric"], 0),
                           compute_procs=[(p, None) for p in pids + st.get("nvml_only", {}).get(i, [])],
                           fail={"nvmlDeviceGetComputeRunningProcesses": fail} if fail is not None else {})
            fake.fields["NVML_FI_DEV_NVLINK_LINK_COUNT"] = self.nvlinks
            gpus.append(fake)
        return gpus

    def read_nvml(self):
        """The GPUs as gpuhc's real NVML source reads them, over the fake library."""
        if self.nvml_hangs:
            import threading

            threading.Event().wait(120)  # never set: the caller must leave this thread behind
        return NvmlLive(clock_samples=1, module=FakeNvml(self._gpus(self.state()))).read()

    def read_procs(self):
        """NVML's process lists as gpuhc's real occupancy reader reads them, over the fake library."""
        from gpuhc.sources.gpu_procs import OccupancyLive

        return OccupancyLive(module=FakeNvml(self._gpus(self.state())), proc_root=str(self.root / "proc")).read()

    def end_left_behind(self) -> None:
        """Kill the helpers a hanging fake tool left behind (a test's clean-up)."""
        import signal

        p = self.root / "left-behind.pids"
        for pid in (p.read_text().split() if p.exists() else []):
            try:
                os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass

    def section(self, **reset) -> dict:
        """``slurm.remediation`` as the config gives it, pointed at this node's fakes."""
        from gpuhc.slurm.settings import RESET_SERVICES

        r = {"services": list(RESET_SERVICES), "systemctl": str(self.root / "systemctl"),
             "nvidia_smi": str(self.root / "nvidia-smi"), "proc_root": str(self.root / "proc"),
             "dev_root": str(self.root / "dev"), "command_timeout_s": 10.0, "fabric_timeout_s": 5.0, **reset}
        return {"reset_command": [str(self.root / "nvidia-smi"), "-r", "-i", "{gpu}"], "reset_timeout_s": 10.0,
                "reset": r}


def fake_proc(root: Path, scenario: Path) -> Path:
    """A /proc with the driver's per-GPU information files of the scenario's GPUs (the reset
    procedure finds each GPU's /dev/nvidia<minor> there) and no process holding a GPU."""
    from gpuhc.sources.scenario import load_scenario

    for g in load_scenario(str(scenario), 0).nvml_source().read().gpus:
        d = root / "driver" / "nvidia" / "gpus" / g.pci_bus_id
        d.mkdir(parents=True, exist_ok=True)
        (d / "information").write_text(f"Model: \t\t {g.name}\nBus Location: \t {g.pci_bus_id}\n"
                                       f"Device Minor: \t {g.index}\n")
    return root
