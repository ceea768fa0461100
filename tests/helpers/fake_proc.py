"""A /proc tree in a directory, for the stuck-process reader (gpuhc/sources/host_stuck.py): the
files the kernel writes for a process, in the kernel's formats (proc(5)), at the boundary the
reader reads. A process's state, wait channel and progress counters change as a test's runs go."""

from __future__ import annotations

import os
from pathlib import Path


class FakeProc:
    def __init__(self, root: Path, blocked: int = 0):
        self.root = root  # stands for "/": the tree is root/proc
        self.proc = root / "proc"
        self.proc.mkdir(parents=True, exist_ok=True)
        # what /proc/stat counts: TASK_UNINTERRUPTIBLE block-I/O waits only, never a killable sleep
        (self.proc / "stat").write_text(f"cpu  1 2 3 4\nprocs_running 1\nprocs_blocked {blocked}\n")

    def process(self, pid: int, comm: str, state: str = "S", wchan: str = "0", cpu: int = 100, switches: int = 50,
                start: int = 12345, fds: tuple[str, ...] = ()) -> None:
        d = self.proc / str(pid)
        (d / "task" / str(pid)).mkdir(parents=True, exist_ok=True)
        (d / "fd").mkdir(exist_ok=True)
        for n, target in enumerate(fds, start=3):
            link = d / "fd" / str(n)
            if not link.is_symlink():
                os.symlink(target, link)
        self.set(pid, comm, state, wchan, cpu, switches, start)

    def set(self, pid: int, comm: str, state: str, wchan: str, cpu: int, switches: int, start: int = 12345) -> None:
        """The process as the kernel shows it now: the whole process's stat, its main thread's,
        its wait channel and its status (context switches split as the kernel prints them)."""
        d = self.proc / str(pid)
        utime, stime = cpu - cpu // 4, cpu // 4
        stat = (f"{pid} ({comm}) {state} 1 {pid} {pid} 0 -1 4194560 1200 0 3 0 {utime} {stime} 0 0 20 0 "
                f"1 0 {start} 1000000 250 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0\n")
        (d / "stat").write_text(stat)
        (d / "task" / str(pid) / "stat").write_text(stat)
        (d / "wchan").write_text(wchan)
        vol = switches - switches // 10
        (d / "status").write_text(
            f"Name:\t{comm}\nUmask:\t0022\nState:\t{state} ({'disk sleep' if state == 'D' else 'sleeping'})\n"
            f"Tgid:\t{pid}\nPid:\t{pid}\nPPid:\t1\nUid:\t1000\t1000\t1000\t1000\nGid:\t1000\t1000\t1000\t1000\n"
            f"Threads:\t1\nvoluntary_ctxt_switches:\t{vol}\nnonvoluntary_ctxt_switches:\t{switches - vol}\n")
