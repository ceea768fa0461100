"""The GPU reset's undo, written ahead (docs/repair.md, "A reset killed half-way").

Before each change the reset makes to the node (persistence mode off, a service stopped), what
puts it back is written here; it is removed once that ran. slurmd kills the health check at its
timeout, and a ``kill -9`` leaves nothing in memory: without this, the next run took "DCGM
stopped, persistence 0" for the node's normal state and resumed it so. Every gpuhc
hook entry and the boot-time retest :func:`replay` what is pending before anything else, and a
node with an undo still pending is not resumed (gpuhc/slurm/policy/drain.py, ``undo_pending``).

- The document is the state directory's kind (:mod:`gpuhc.files.jsonstore`: a lock, a whole-file
  replace, a bounded read, root's directory alone), its own file so that a reset's writes
  never wait on a health check's state transaction.
- An entry names what to do, not how: ``start`` of a unit or ``persistence-on`` of a GPU index,
  checked against the config's unit pattern; the argv is built from today's config at replay,
  so nothing read from disk is run as it stands.
- An entry carries the pid and start time of the run that wrote it: a replay leaves alone the
  entries of a reset still running in another process (the health check's turn lock normally
  rules that out; a run killed is no longer there).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable

from gpuhc.files.jsonstore import LockedJson
from gpuhc.model.deadline import Deadline

FILE, LOCK = "reset-undo.json", "reset-undo.lock"
START, PERSISTENCE_ON = "start", "persistence-on"
_UNIT = re.compile(r"[A-Za-z0-9][A-Za-z0-9@._:-]{0,127}")  # slurm.remediation.reset.services' pattern
_GPU = re.compile(r"[0-9]{1,4}")
PROC = "/proc"  # the runs' own processes (reset.proc_root is where GPU holders are looked for)


class Journal(LockedJson):
    def __init__(self, state_dir: str):
        super().__init__(state_dir, FILE, LOCK, what="reset undo journal", max_bytes=1 << 20, max_depth=6)

    def add(self, kind: str, target: str) -> None:
        """Write ahead: ``kind`` of ``target`` undoes the change about to be made. Raises
        (:class:`~gpuhc.errors.GpuhcError`, OSError) when it cannot be written: then the change
        must not be made."""
        from gpuhc.slurm.repair.nvml_yield import start_time

        if not _valid(kind, target):
            raise ValueError(f"not an undo gpuhc writes: {kind} {target!r}")
        with self.transaction() as doc:
            entries = _entries(doc)
            entries.append({"kind": kind, "target": target, "since": time.time(), "pid": os.getpid(),
                            "start": start_time(PROC, os.getpid())})
            doc["entries"] = entries

    def done(self, kind: str, target: str) -> None:
        """The undo ran: its newest entry goes."""
        with self.transaction() as doc:
            entries = _entries(doc)
            for i in range(len(entries) - 1, -1, -1):
                if (entries[i]["kind"], entries[i]["target"]) == (kind, target):
                    del entries[i]
                    break
            doc["entries"] = entries

    def pending(self) -> list[dict]:
        return _entries(self.read())

    def live(self, entry: dict) -> bool:
        """Written by a process still running (a reset in progress), not one that was killed."""
        from gpuhc.slurm.repair.nvml_yield import start_time

        pid = entry.get("pid")
        return (isinstance(pid, int) and pid != os.getpid() and entry.get("start") is not None
                and start_time(PROC, pid) == entry.get("start"))


def _valid(kind: object, target: object) -> bool:
    return isinstance(target, str) and ((kind == START and bool(_UNIT.fullmatch(target)))
                                        or (kind == PERSISTENCE_ON and bool(_GPU.fullmatch(target))))


def _entries(doc: dict) -> list[dict]:
    raw = doc.get("entries")
    return [e for e in raw if isinstance(e, dict) and _valid(e.get("kind"), e.get("target"))] if isinstance(
        raw, list) else []


def argv_of(kind: str, target: str, reset: dict) -> list[str]:
    """The command that carries out an undo, from ``slurm.remediation.reset`` as configured now."""
    if kind == START:
        return [reset["systemctl"], "start", target]
    return [reset["nvidia_smi"], "-i", target, "-pm", "1"]


def pending_note(state_dir: str) -> str | None:
    """What is pending, in words (for the policy and the log), or None. An unreadable journal
    is pending too: the node cannot be shown to be whole."""
    try:
        entries = Journal(state_dir).pending()
    except Exception as e:
        return f"the reset undo journal cannot be read ({type(e).__name__}: {e})"
    if not entries:
        return None
    return "a GPU reset's undo is pending (" + ", ".join(f"{e['kind']} {e['target']}" for e in entries) + ")"


def replay(state_dir: str, reset: dict, log: Callable[..., None], deadline: Deadline) -> str | None:
    """Carry out every pending undo a killed reset left, newest first; what is still pending
    afterwards, in words, or None. Never raises: a bug here must not stop the run it starts."""
    from gpuhc.slurm.repair.gpureset import run_argv

    journal = Journal(state_dir)
    try:
        if not os.path.lexists(journal.path):  # every hook entry: one lstat when nothing is pending
            return None
        entries = journal.pending()
        for e in reversed(entries):
            if journal.live(e):
                log(f"reset undo: {e['kind']} {e['target']} belongs to a reset still running (pid {e['pid']}): left to it")
                continue
            left = deadline.left()
            if left < 1.0:
                log("reset undo: no time left in this run: the next run goes on", loud=True)
                break
            r = run_argv(argv_of(e["kind"], e["target"], reset), min(float(reset["command_timeout_s"]), left))
            log(f"reset undo: replaying what a killed reset left: {e['kind']} {e['target']}: "
                f"{'ok' if r.ok else 'FAILED'}: {r.detail}", loud=True)
            if r.ok:
                journal.done(e["kind"], e["target"])
    except Exception as ex:
        log(f"reset undo: replay broke ({type(ex).__name__}: {ex}): the node stays out until it runs", loud=True)
    return pending_note(state_dir)
