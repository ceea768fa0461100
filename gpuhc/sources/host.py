"""The node around the GPUs, read live: CPUs online, memory size, EDAC counters, the PCI devices
a job needs and the bridges above them, site-named mounts, local scratch, processes stuck in
uninterruptible sleep, and the GPU services (Fabric Manager, nvidia-persistenced, DCGM's host
engine). Judged by gpuhc/checks/host.py, services.py, pcie_aer.py and machine_check.py.

Only what the run's checks ask for is read (:func:`settings_for`): the prolog pays for none of
the /proc walk. Nothing here raises; a part that cannot be read is None (not read) or says why.

Why mounts are probed in a child: ``statvfs`` on a hung NFS mount sleeps uninterruptibly, and a
thread of ours stuck there would keep the health check from ever exiting. So each mount is asked
by ``stat -f`` (found only in root-owned system directories, an argv list) in its own process,
all at once; one that has not answered by the deadline is reported as not answering and left
behind unwaited (killed; the kernel reaps it when it wakes). Whether a path is a mount point at
all comes from /proc/self/mountinfo, which never touches the file system.
"""

from __future__ import annotations

import os
import stat
import time
from typing import Any

from gpuhc.text.logtext import escape
from gpuhc.model.host import HostReading
from gpuhc.model.pci import norm_pci
from gpuhc.sources.host_probes import finish_probes, retried, socket_answers, start_probes

STAT_SEARCH = ("/usr/bin/stat", "/bin/stat")
DCGMI_SEARCH = ("/usr/bin/dcgmi", "/usr/local/bin/dcgmi", "/usr/sbin/dcgmi")
PERSISTENCED_SOCKET = "/var/run/nvidia-persistenced/socket"
# Process names (/proc/<pid>/stat's comm, at most 15 characters) of each service's daemon
# (the kernel cuts comm at 15 characters: "nvidia-persistenced" is "nvidia-persiste")
DAEMONS = {"fabricmanager": "nv-fabricmanage", "persistenced": "nvidia-persiste", "dcgm": "nv-hostengine"}
# Where each daemon writes its pid (the packages' defaults): read first, so that a node pays two
# small reads per needed service instead of a walk of /proc
PIDFILES = {"fabricmanager": "var/run/nvidia-fabricmanager/nv-fabricmanager.pid",
            "persistenced": "var/run/nvidia-persistenced/nvidia-persistenced.pid",
            "dcgm": "var/run/nvhostengine.pid"}
# systemd units whose enablement says a site expects the service ("auto")
UNITS = {"fabricmanager": ("nvidia-fabricmanager.service",), "persistenced": ("nvidia-persistenced.service",),
         "dcgm": ("nvidia-dcgm.service", "dcgm.service")}
UNIT_DIRS = ("etc/systemd/system/multi-user.target.wants", "etc/systemd/system/graphical.target.wants")
_NVIDIA, _MELLANOX = 0x10DE, 0x15B3
_MAX_PROCS = 65536
# The wait channels of each class of stuck process (gpuhc/sources/host_stuck.py), by threshold
WCHAN_KEYS = {"gpu-driver": "dstate_gpu_wchan", "file-system": "dstate_fs_wchan", "fuse": "dstate_fuse_wchan"}
_PCI_LEN = len("0000:00:00.0")


def settings_for(thresholds: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """What to read, from the thresholds of the selected checks (check id -> thresholds)."""
    out: dict[str, Any] = {}
    host = thresholds.get("host")
    if host is not None:
        out.update(cpus=bool(host.get("cpus", True)), memory=bool(host.get("memory", True)),
                   mounts=list(host.get("mounts") or []), mount_timeout_s=float(host.get("mount_timeout_s") or 5.0),
                   scratch=host.get("scratch") or None, dstate=bool(host.get("dstate_warn_s") or host.get("dstate_fail_s")),
                   dstate_wchan={cls: list(host.get(key) or []) for cls, key in WCHAN_KEYS.items()})
    if "machine-check" in thresholds:
        out["edac"] = True
    if "pcie-aer" in thresholds or "services" in thresholds:
        out["pci_watch"] = True
    services = thresholds.get("services")
    if services is not None:
        out["services"] = {name: services.get(name, "auto") for name in DAEMONS}
        out["probe_timeout_s"] = float(services.get("probe_timeout_s") or 3.0)
        out["probe_budget_s"] = float(services.get("probe_budget_s") or 7.0)
    return out


class HostLive:
    """Read the node (``root`` stands for "/": a test points it at a directory)."""

    def __init__(self, settings: dict[str, Any] | None, root: str = "/", owner: int = 0):
        self.s = settings if settings is not None else {"cpus": True, "memory": True, "edac": True, "pci_watch": True,
                                                         "mounts": [], "services": {n: "auto" for n in DAEMONS}}
        self.root, self.owner = root, owner
        self.stat_search, self.dcgmi_search = STAT_SEARCH, DCGMI_SEARCH  # where the probes' tools may be

    def _p(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    def read(self) -> HostReading:
        s = self.s
        r = HostReading()
        probes = start_probes(self._stat_argv(), list(s.get("mounts") or []) + ([s["scratch"]] if s.get("scratch") else []))
        if s.get("cpus"):
            r.cpus_online = count_cpus(_read(self._p("sys/devices/system/cpu/online")))
        if s.get("memory"):
            r.mem_total_kib = mem_total(_read(self._p("proc/meminfo")))
        if s.get("edac"):
            r.edac = self.edac()
        if s.get("pci_watch"):
            r.pci_watch = self.pci_watch()
        # Every run the check is due, never gated on /proc/stat's procs_blocked (it leaves out
        # the killable sleeps of NFS, FUSE and the GPU driver: gpuhc/sources/host_stuck.py)
        procs = self.procs() if s.get("dstate") else None  # the services look for their own first
        if s.get("dstate") and procs is not None:
            from gpuhc.sources.host_stuck import stuck_candidates

            r.dstate = stuck_candidates(self._p("proc"), procs, dict(s.get("dstate_wchan") or {}))
        if s.get("services"):
            r.services = self.services(s["services"], procs, r.pci_watch, float(s.get("probe_timeout_s", 3.0)),
                                       float(s.get("probe_budget_s", 7.0)))
        results = finish_probes(probes, float(s.get("mount_timeout_s", 5.0)))
        if s.get("mounts"):
            mounted = self.mount_points()
            r.mounts = {}
            for path in s["mounts"]:
                res = results.get(path) or {"ok": False, "error": "not probed"}
                if mounted is not None and os.path.normpath(path) not in mounted:
                    res = {"ok": False, "seconds": 0.0, "error": "not mounted"}
                r.mounts[path] = {k: res.get(k) for k in ("ok", "seconds", "error")}
                if mounted and os.path.normpath(path) in mounted:  # a FUSE mount's failure drains no stuck process
                    r.mounts[path]["fstype"] = mounted[os.path.normpath(path)]
        if s.get("scratch"):
            res = results.get(s["scratch"]) or {}
            r.scratch = {"path": s["scratch"], **({"free_bytes": res["free"], "total_bytes": res["total"]}
                                                  if res.get("ok") else {"error": res.get("error") or "not probed"})}
        return r

    # -------------------------------------------------------------- parts

    def edac(self) -> dict[str, dict[str, int]] | None:
        base = self._p("sys/devices/system/edac/mc")
        try:
            names = sorted(n for n in os.listdir(base) if n.startswith("mc") and n[2:].isdigit())
        except OSError:
            return None  # no EDAC driver for this memory controller: unknown, not zero
        out = {}
        for n in names:
            ce, ue = (_int(_read(os.path.join(base, n, f))) for f in ("ce_count", "ue_count"))
            if ce is not None or ue is not None:
                out[n] = {k: v for k, v in (("ce", ce), ("ue", ue)) if v is not None}
        return out

    def pci_watch(self) -> dict[str, dict[str, Any]] | None:
        """GPUs, NVSwitches and NICs by PCI id, each with the bridges above it (nearest first)."""
        base = self._p("sys/bus/pci/devices")
        try:
            names = sorted(os.listdir(base))
        except OSError:
            return None
        out: dict[str, dict[str, Any]] = {}
        for name in names:
            d = os.path.join(base, name)
            vendor = _hex(_read(os.path.join(d, "vendor")))
            if vendor not in (_NVIDIA, _MELLANOX):
                continue  # the other ~200 devices cost one read each
            role = _role(vendor, _hex(_read(os.path.join(d, "class"))))
            if role is None:
                continue
            path = os.path.realpath(d).split(os.sep)
            ups = [norm_pci(p) for p in path[:-1] if len(p) == _PCI_LEN and p[4] == ":" and p[7] == ":"]
            out[norm_pci(name)] = {"role": role, "upstream": list(reversed(ups))}
        return out

    def procs(self) -> list[dict[str, Any]] | None:
        """Every process's pid, comm and state, from one pass over /proc/<pid>/stat (raw reads:
        a GPU node runs a thousand processes, and this is on the health check's path)."""
        base = self._p("proc")
        try:
            pids = [n for n in os.listdir(base) if n.isdigit()][:_MAX_PROCS]
        except OSError:
            return None
        out = []
        for pid in pids:
            try:
                fd = os.open(f"{base}/{pid}/stat", os.O_RDONLY)
            except OSError:
                continue  # gone meanwhile
            try:
                text = os.read(fd, 1024).decode("ascii", "replace")
            except OSError:
                continue
            finally:
                os.close(fd)
            end = text.rfind(")")
            rest = text[end + 2:].split(None, 20)
            if end < 0 or not rest:
                continue
            out.append({"pid": int(pid), "comm": escape(text[text.find("(") + 1:end])[:15], "state": rest[0],
                        "start": _int(rest[19]) if len(rest) > 19 else None})
        return out

    def services(self, want: dict[str, Any], procs: list[dict[str, Any]] | None, watch: dict | None,
                 timeout_s: float, budget_s: float | None = None) -> dict[str, dict[str, Any]]:
        # every probe and its retries share one deadline, well inside the check's own timeout
        deadline = time.monotonic() + (budget_s if budget_s is not None else 2 * timeout_s)
        nvswitch = any(v.get("role") == "nvswitch" for v in (watch or {}).values())
        out = {}
        for name, mode in want.items():
            if mode is False or mode == "off":
                continue
            expected = mode is True or mode == "on" or self._enabled(name) or (name == "fabricmanager" and nvswitch)
            if not expected:  # a service nobody needs here costs nothing
                out[name] = {"expected": False, "running": None, "answering": None, "error": None}
                continue
            if procs is None and not self._pidfile_runs(name):
                procs = self.procs() or []  # no pid file (another packaging): look at every process once
            running = self._pidfile_runs(name) or any(
                p["comm"] == DAEMONS[name] and self._owned(p["pid"], name) for p in procs or [])
            info: dict[str, Any] = {"expected": True, "running": running, "answering": None, "error": None}
            if info["running"] and name == "persistenced":
                socket_path = self._p(PERSISTENCED_SOCKET.lstrip("/"))
                info.update(retried(lambda t: socket_answers(socket_path, t), timeout_s, deadline))
            elif info["running"] and name == "dcgm":
                info.update(retried(self._dcgm_answers, timeout_s, deadline))
            out[name] = info
        return out

    def _pidfile_runs(self, name: str) -> bool:
        """The daemon's pid file names a live process of that name, run by root (``owner``)."""
        pid = _int(_read(self._p(PIDFILES[name]), 32))
        return pid is not None and self._owned(pid, name, by_name=True)

    def _owned(self, pid: int, name: str, by_name: bool = False) -> bool:
        """A daemon counts only when it is the service's: any user may name a process
        nv-fabricmanager (or run the installed program), and that must not stand in for it.
        Who the process is comes from gpuhc/node/holders.py, read once: its real uid (not the
        owner of /proc/<pid>, the effective uid: root for a set-uid program a user runs through
        a link of the daemon's name) is root's (``owner``) or the account root made the daemon's
        run directory for (``nvidia-persistenced --user``), and its program lies in directories
        only root can change. ``by_name``: its name is checked here too (a pid file's pid)."""
        from gpuhc.files.fsutil import UnsafePath, check_dir_chain
        from gpuhc.node.holders import identity

        who = identity(self._p("proc"), pid)
        if by_name and who.name != DAEMONS[name]:
            return False
        if who.uid is None or who.uid not in (self.owner, self._run_dir_owner(name)) or who.exe is None:
            return False
        try:  # " (deleted)": the package was upgraded under the running daemon
            check_dir_chain(os.path.dirname(who.exe.removesuffix(" (deleted)")), f"the {name} daemon's program")
        except (OSError, UnsafePath):
            return False
        return True

    def _run_dir_owner(self, name: str) -> int | None:
        """The owner of the daemon's pid file directory, where only root can have made it (a
        directory of ``owner``'s others cannot write); None otherwise."""
        run_dir = os.path.dirname(self._p(PIDFILES[name]))
        try:
            parent = os.stat(os.path.dirname(run_dir))
            made = os.stat(run_dir)
        except OSError:
            return None
        if parent.st_uid != self.owner or parent.st_mode & 0o022 or not stat.S_ISDIR(made.st_mode):
            return None
        return made.st_uid

    def _enabled(self, name: str) -> bool:
        return any(os.path.exists(self._p(d, u)) for d in UNIT_DIRS for u in UNITS[name])

    def _dcgm_answers(self, timeout_s: float) -> tuple[bool | None, str | None]:
        from gpuhc.sources.imex import _run, find_ctl  # the one way gpuhc runs a node's tool

        dcgmi = find_ctl(self.dcgmi_search, self.owner)
        if dcgmi is None:
            return None, "dcgmi not installed in a root-owned system directory"
        _text, error = _run([dcgmi, "discovery", "-l"], timeout_s)
        return error is None, None if error is None else f"dcgmi discovery -l: {error}"

    def _stat_argv(self) -> str | None:
        from gpuhc.sources.imex import find_ctl

        return find_ctl(self.stat_search, self.owner)

    def mount_points(self) -> dict[str, str | None] | None:
        """Mount point -> file system type (after mountinfo's `` - `` separator), from
        /proc/self/mountinfo, which never touches the file systems themselves."""
        text = _read(self._p("proc/self/mountinfo"), 4 << 20)
        if text is None:
            return None
        out: dict[str, str | None] = {}
        for line in text.splitlines():
            parts = line.split()
            if len(parts) > 4:
                tail = parts[parts.index("-", 5) + 1:] if "-" in parts[5:] else []
                out[parts[4].replace("\\040", " ")] = escape(tail[0], 64) if tail else None
        return out


# ------------------------------------------------------------------ small readers


def _role(vendor: int | None, cls: int | None) -> str | None:
    if vendor == _NVIDIA and cls is not None:
        if cls >> 16 == 0x03:
            return "gpu"
        if cls >> 8 == 0x0680:
            return "nvswitch"
    if vendor == _MELLANOX and cls is not None and cls >> 16 == 0x02:
        return "nic"  # network (0x0200) and InfiniBand (0x0207) controllers
    return None


def count_cpus(text: str | None) -> int | None:
    """``0-63,128-191`` -> 128; garbage -> None."""
    if not text or not text.strip():
        return None
    n = 0
    for part in text.strip().split(","):
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            return None
        n += (int(hi) - int(lo) + 1) if hi else 1
    return n


def mem_total(text: str | None) -> int | None:
    for line in (text or "").splitlines():
        if line.startswith("MemTotal:"):
            return _int(line.split()[1]) if len(line.split()) > 1 else None
    return None


def _read(path: str, limit: int = 4096) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("ascii", "replace")
    except (OSError, ValueError):
        return None


def _int(text: str | None) -> int | None:
    t = (text or "").strip()
    return int(t) if t.isdigit() else None


def _hex(text: str | None) -> int | None:
    try:
        return int((text or "").strip(), 16)
    except ValueError:
        return None


# ------------------------------------------------------------------ the scenario's `host` section

_FIELDS = {"cpus_online": int, "mem_total_kib": int, "edac": dict, "pci_watch": dict, "mounts": dict,
           "scratch": dict, "dstate": list, "services": dict}


def check_host(value: Any, path: tuple, err) -> None:
    """The scenario's ``host`` section: :class:`~gpuhc.model.host.HostReading`'s fields, each null or
    of its type (the check reading it judges the inside)."""
    if not isinstance(value, dict):
        raise err(path, "host must be a mapping of HostReading fields")
    for key, v in value.items():
        want = _FIELDS.get(key)
        if want is None:
            raise err(path + (key,), f"unknown host field {key!r} (known: {', '.join(_FIELDS)})")
        if v is not None and (not isinstance(v, want) or isinstance(v, bool)):
            raise err(path + (key,), f"host {key} must be {want.__name__} or null")
