"""The previous boot's kernel panic, read once per boot: pstore, else the previous boot's journal.

A kernel that panics never runs on to be read: its last words reach the next boot only through
pstore (the kernel's persistent store: ramoops in reserved RAM, EFI variables, ERST; the
kernel's ``Documentation/admin-guide/ramoops.rst`` and ``pstore-blk.rst``) or, when it had
time to flush, the journal of the boot that ended (``journalctl -k -b -1``). The live kernel
log holds neither, so the kernel-health check would never see a panic on a live node.

What is read, all bounded, all as root may (docs/security.md, "Kernel log"):

- ``/sys/fs/pstore``: the kernel's ``dmesg-<backend>-<id>`` files (``dmesg-ramoops-0``,
  ``dmesg-efi-175620440600001``, ``dmesg-erst-...``), the console log of the panic; names
  matched exactly, at most :data:`MAX_FILES`, each opened without following a link and only if
  a regular file, read up to :data:`MAX_FILE_BYTES` (its last bytes: the panic is at the end).
  Compressed records (``.enc.z``) are left alone. A record's time is its file's mtime (pstore
  stamps each file with the record's time).
- else ``journalctl -k -b -1 -n 4000 -o short-iso`` (``/usr/bin/journalctl`` under the rule for
  programs root runs; argv, no shell), its output cut at :data:`MAX_JOURNAL_BYTES` and the
  command at :data:`TIMEOUT_S`. (systemd-pstore moves pstore's files to /var/lib/systemd/pstore
  at boot where it is enabled; the journal then holds the panic if it was flushed in time.)

Only the panic events are kept (``EventKind.HOST_KERNEL``, state ``panic``; ``code`` 1 when the
reason is the hardware's). They are kept in ``prev-boot.json`` in gpuhc's cache directory
(:func:`gpuhc.files.parsecache.cache_dir`, the same trust rules), keyed by this boot's id: the first
run of a boot pays the read, the others read a few hundred bytes. Nothing here ever raises: an
unreadable store is an empty answer (the live log is still judged).
"""

from __future__ import annotations

import json
import os
import re

from gpuhc.model.kernel import EventKind, KernelEvent

PSTORE_DIR = "/sys/fs/pstore"
_PSTORE_NAME = re.compile(r"dmesg-[a-z][a-z_-]{0,15}-\d{1,24}")
MAX_FILES = 64
MAX_FILE_BYTES = 1 << 20
MAX_JOURNAL_BYTES = 8 << 20
TIMEOUT_S = 10.0
JOURNAL_LINES = "4000"
_JOURNALCTL_DIRS = ("/usr/bin", "/bin")
CACHE_FILE = "prev-boot.json"


def previous_boot_panics(boot_id: str | None, cache_dir: str | None, pstore_dir: str = PSTORE_DIR,
                         journalctl: str | None = None) -> list[KernelEvent]:
    """The previous boot's panics (see the module doc); read once per ``boot_id``."""
    if boot_id is None:
        return []
    cached = _load(cache_dir, boot_id)
    if cached is not None:
        return cached
    events = _from_pstore(pstore_dir) or _from_journal(journalctl)
    _store(cache_dir, boot_id, events)
    return events


def _panics(lines: list[str], when: float | None) -> list[KernelEvent]:
    from gpuhc.sources.kernel_log_parse import parse_lines

    log = parse_lines(lines, live=True)  # the kernel's own records: no wrapper, no quote is read
    out = []
    for ev in log.events:
        if ev.kind is EventKind.HOST_KERNEL and ev.state == "panic":
            out.append(KernelEvent(ev.kind, when if when is not None else ev.time, ev.message, code=ev.code,
                                   state=ev.state))
    return out


def _from_pstore(directory: str) -> list[KernelEvent]:
    from gpuhc.files.untrusted import UntrustedInputError, open_directory, open_regular, read_upto

    try:
        dfd = open_directory(directory, "pstore")
    except (OSError, UntrustedInputError):
        return []
    out: list[KernelEvent] = []
    try:
        names = sorted(n for n in os.listdir(dfd) if _PSTORE_NAME.fullmatch(n))[:MAX_FILES]
        for name in names:
            try:
                fd = open_regular(name, "pstore record", dir_fd=dfd, shown=os.path.join(directory, name))
            except (OSError, UntrustedInputError):
                continue
            try:
                st = os.fstat(fd)
                os.lseek(fd, max(0, st.st_size - MAX_FILE_BYTES), os.SEEK_SET)
                text = read_upto(fd, MAX_FILE_BYTES).decode("utf-8", "replace")
            except OSError:
                continue
            finally:
                os.close(fd)
            out += _panics(text.splitlines(), st.st_mtime)
    except OSError:
        pass
    finally:
        os.close(dfd)
    return out


def _from_journal(journalctl: str | None) -> list[KernelEvent]:
    from gpuhc.files.fsutil import UnsafePath, trusted_which

    try:  # by its trusted real path, as every program root runs (docs/security.md)
        exe = trusted_which(journalctl or os.path.join(_JOURNALCTL_DIRS[0], "journalctl"), "journalctl",
                            _JOURNALCTL_DIRS)
    except (UnsafePath, OSError):
        return []
    if exe is None:
        return []
    import subprocess  # here: the first run of a boot without pstore records is the only one that runs it

    argv = [exe, "-k", "-b", "-1", "-n", JOURNAL_LINES, "-o", "short-iso", "--no-pager", "-q"]
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                                env={"LC_ALL": "C", "SYSTEMD_PAGER": "", "SYSTEMD_COLORS": "0"})
    except OSError:
        return []
    import time

    from gpuhc.files.untrusted import read_output

    try:  # a journal that never ends, or a journalctl that hangs, costs the bound and no more
        data, _ = read_output(proc.stdout, MAX_JOURNAL_BYTES, time.monotonic() + TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stdout.close()
    return _panics(data[:MAX_JOURNAL_BYTES].decode("utf-8", "replace").splitlines(), None)


def _load(cache_dir: str | None, boot_id: str) -> list[KernelEvent] | None:
    from gpuhc.files.parsecache import safe_dir, trusted_stat
    from gpuhc.files.untrusted import UntrustedInputError, load_json, open_regular, read_upto

    if not cache_dir:
        return None
    try:
        fd = open_regular(os.path.join(cache_dir, CACHE_FILE), "previous boot's panics")
    except (OSError, UntrustedInputError):
        return None
    try:
        if not (trusted_stat(os.fstat(fd)) and safe_dir(cache_dir)):
            return None
        doc = load_json(read_upto(fd, 1 << 20), CACHE_FILE)
        if not isinstance(doc, dict) or doc.get("boot_id") != boot_id or not isinstance(doc.get("panics"), list):
            return None
        return [KernelEvent(EventKind.HOST_KERNEL, float(p["time"]) if p.get("time") is not None else None,
                            str(p["message"])[:400], code=int(p["code"]) if p.get("code") is not None else None,
                            state="panic") for p in doc["panics"][:MAX_FILES]]
    except Exception:  # damaged: read the stores again
        return None
    finally:
        os.close(fd)


def _store(cache_dir: str | None, boot_id: str, events: list[KernelEvent]) -> None:
    from gpuhc.files.fsutil import make_dirs, write_atomic
    from gpuhc.files.parsecache import safe_dir

    if not cache_dir:
        return
    doc = {"boot_id": boot_id, "panics": [{"time": e.time, "message": e.message, "code": e.code} for e in events]}
    try:
        make_dirs(cache_dir, 0o755, "cache directory")
        if safe_dir(cache_dir):
            write_atomic(os.path.join(cache_dir, CACHE_FILE), json.dumps(doc).encode(), 0o644, "previous boot's panics",
                         durable=False)
    except Exception:  # never a reason to fail the run: the next run reads the stores again
        pass
