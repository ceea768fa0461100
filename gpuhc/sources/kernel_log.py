"""Kernel log sources: the live node (``/dev/kmsg``, else ``dmesg``) and recorded files.

Why read the kernel log at all: NVML only reports XIDs to a process that was registered for
events when they happened, and a health check lives for a second every few minutes. The kernel
ring buffer keeps them (and NVSwitch SXids, fallen-off-the-bus messages, mlx5 link changes)
until it wraps or the node reboots; the xid/nvswitch checks keep their own memory for that.

All parsing lives in :mod:`gpuhc.sources.kernel_log_parse` (pure, tested on text); this module
only gets the text: non-blocking ``/dev/kmsg`` reads, a ``dmesg`` subprocess with a timeout
(argv list, no shell, no PATH assumed: Slurm gives its programs none), or a file.
"""

from __future__ import annotations

import errno
import os
import time

from gpuhc.errors import SourceError
from gpuhc.model.kernel import KernelLog
from gpuhc.sources.kernel_log_parse import parse_lines

__all__ = ["KmsgSource", "DmesgSource", "LiveKernelLog", "FileKernelLog", "recorded_tail", "parse_lines", "boot_time",
           "boot_id"]

KMSG_PATH = "/dev/kmsg"
BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
MAX_RECORDS = 2_000_000  # a ring buffer holds far fewer; stops a reader racing a log flood
DMESG_TIMEOUT_S = 10.0
_DMESG_DIRS = ("/usr/bin", "/bin", "/usr/sbin", "/sbin")


def boot_time() -> float:
    """Epoch seconds of boot, to turn since-boot stamps into wall-clock times.

    kmsg stamps count from boot on the kernel's local clock; ``now - CLOCK_BOOTTIME`` is what
    ``dmesg`` itself uses. (Both drift apart after a suspend, which servers do not do.)"""
    clock = getattr(time, "CLOCK_BOOTTIME", None)
    if clock is not None:
        try:
            return time.time() - time.clock_gettime(clock)
        except OSError:
            pass
    try:
        with open("/proc/uptime", encoding="ascii") as f:
            return time.time() - float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return time.time() - time.monotonic()


def boot_id(path: str = BOOT_ID_PATH) -> str | None:
    """This boot's random id: a changed id tells the checks that the node rebooted."""
    try:
        with open(path, encoding="ascii") as f:
            return f.read().strip() or None
    except OSError:
        return None


def _sequence(records: list[bytes]) -> tuple[int | None, int]:
    """(the first record's sequence number, records missing between those read): each read of
    /dev/kmsg is one record, ``prefix,seq,usec,flags;text``; a plain file's chunks are not, and
    say nothing."""
    seqs = []
    for rec in records:
        head, _, dictionary = rec.partition(b"\n")
        parts = head.split(b",", 2)
        # one record: its header line, then only " KEY=value" dictionary lines
        if len(parts) < 3 or not parts[1].isdigit() or any(ln and not ln.startswith(b" ") for ln in dictionary.split(b"\n")):
            return None, 0
        seqs.append(int(parts[1]))
    if not seqs:
        return None, 0
    return seqs[0], sum(b - a - 1 for a, b in zip(seqs, seqs[1:]) if b > a + 1)


class KmsgSource:
    """Every record still in the ring buffer, read from ``/dev/kmsg`` without blocking.

    Each ``read()`` of /dev/kmsg returns one record; EAGAIN means we have caught up; EPIPE means
    the record we were about to read was overwritten meanwhile (we just go on with the next)."""

    def __init__(self, path: str = KMSG_PATH, boot_id_path: str = BOOT_ID_PATH):
        self.path = path
        self.boot_id_path = boot_id_path

    def read(self) -> KernelLog:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as e:
            raise SourceError(f"cannot open {self.path}: {e.strerror or e}") from e
        records: list[bytes] = []
        try:
            while len(records) < MAX_RECORDS:
                try:
                    chunk = os.read(fd, 16384)
                except BlockingIOError:
                    break
                except OSError as e:
                    if e.errno == errno.EPIPE:
                        continue
                    if e.errno == errno.EAGAIN:
                        break
                    raise SourceError(f"cannot read {self.path}: {e.strerror or e}") from e
                if not chunk:
                    break
                records.append(chunk)
        finally:
            os.close(fd)
        # One read is one record on the device, but a plain file (a copy of /dev/kmsg) returns
        # arbitrary chunks: join before splitting so that no line is cut in two.
        text = b"".join(records).decode("utf-8", "replace")
        log = parse_lines(text.split("\n"), boot_time=boot_time(), live=True)
        log.first_seq, log.seq_lost = _sequence(records)
        log.source = self.path
        log.boot_id = boot_id(self.boot_id_path)
        return log


class DmesgSource:
    """``dmesg --kernel --time-format=iso`` (the kernel's own records, wall-clock stamps),
    falling back to ``dmesg --kernel`` for an old util-linux; plain stamps are since boot and
    converted with :func:`boot_time`. ``--kernel`` leaves out records written into /dev/kmsg
    from user space, which plain text could not tell from the kernel's (docs/security.md)."""

    def __init__(self, timeout_s: float = DMESG_TIMEOUT_S, binary: str | None = None,
                 boot_id_path: str = BOOT_ID_PATH):
        self.timeout_s = timeout_s
        self.binary = binary
        self.boot_id_path = boot_id_path

    def _find(self) -> str:
        from gpuhc.files.fsutil import UnsafePath, trusted_which

        try:  # Slurm's prolog/health check environments carry no PATH: the usual places then
            found = trusted_which(self.binary or "dmesg", "dmesg", _DMESG_DIRS)
        except UnsafePath as e:
            raise SourceError(str(e)) from None
        if found:
            return found
        if self.binary:
            return self.binary
        raise SourceError("dmesg not found in PATH or " + ", ".join(_DMESG_DIRS))

    def _run(self, argv: list[str]):
        import subprocess  # lazy: see _find

        try:
            return subprocess.run(argv, capture_output=True, timeout=self.timeout_s, check=False)
        except subprocess.TimeoutExpired as e:
            raise SourceError(f"{' '.join(argv)} timed out after {self.timeout_s:g}s") from e
        except OSError as e:
            raise SourceError(f"cannot run {argv[0]}: {e.strerror or e}") from e

    def read(self) -> KernelLog:
        exe = self._find()
        proc = self._run([exe, "--kernel", "--time-format=iso"])
        bt = None
        if proc.returncode != 0:
            proc = self._run([exe, "--kernel"])
            bt = boot_time()
        if proc.returncode != 0:
            err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
            raise SourceError(f"{exe} failed (exit {proc.returncode}): {err[-1] if err else 'no message'}")
        log = parse_lines(proc.stdout.decode("utf-8", "replace").splitlines(), boot_time=bt, live=True)
        log.source = "dmesg"
        log.boot_id = boot_id(self.boot_id_path)
        return log


class LiveKernelLog:
    """The live node: /dev/kmsg when readable (fast, sequence numbers), else dmesg; and the
    previous boot's panics, which neither holds (pstore or the previous boot's journal, read
    once per boot: :mod:`gpuhc.sources.prev_boot`)."""

    def __init__(self, kmsg: KmsgSource | None = None, dmesg: DmesgSource | None = None,
                 previous_boot: bool = True, pstore_dir: str | None = None, journalctl: str | None = None):
        self.kmsg = kmsg or KmsgSource()
        self.dmesg = dmesg or DmesgSource()
        self.previous_boot, self.pstore_dir, self.journalctl = previous_boot, pstore_dir, journalctl

    def read(self) -> KernelLog:
        try:
            log = self.kmsg.read()
        except SourceError as first:
            try:
                log = self.dmesg.read()
            except SourceError as second:
                raise SourceError(f"kernel log unreadable: {first}; {second}") from second
        if self.previous_boot:
            from gpuhc.files.parsecache import cache_dir
            from gpuhc.sources.prev_boot import PSTORE_DIR, previous_boot_panics

            # older than this boot's records: first
            log.events[:0] = previous_boot_panics(log.boot_id, cache_dir(), self.pstore_dir or PSTORE_DIR, self.journalctl)
        return log


class FileKernelLog:
    """A recorded kernel log in any shape :mod:`kernel_log_parse` reads (replay, tickets),
    read from its end as far as the judging window needs (:mod:`kernel_log_file`).

    ``year`` dates syslog/journalctl stamps, which print none."""

    def __init__(self, path: str, year: int | None = None):
        self.path = path
        self.year = year

    def read(self) -> KernelLog:
        from gpuhc.sources.kernel_log_file import read_file  # lazy: the live path never needs it

        try:
            return read_file(self.path, self.year)
        except OSError as e:
            raise SourceError(f"cannot read kernel log {self.path}: {e.strerror or e}") from e


def recorded_tail(path: str, limit: int) -> bytes:
    """The newest whole lines of the recorded kernel log file at ``path``, at most ``limit``
    bytes; opened as untrusted input (no symlink, a regular file), so a FIFO cannot hang the
    caller. Raises :class:`SourceError` naming the file. For the post-mortem bundle."""
    from gpuhc.sources.kernel_log_file import tail_bytes

    try:
        return tail_bytes(path, limit)
    except OSError as e:
        raise SourceError(f"cannot read kernel log {path}: {e.strerror or e}") from e
