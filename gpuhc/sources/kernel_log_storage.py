"""The kernel's own words about the node's disks, its NFS mounts and its own health: a record
reader of the kernel-log parse (:data:`gpuhc.sources.kernel_log_readers.READERS`). Pure, no I/O,
never raises.

Each form is the printk format of the kernel source named, matched exactly from the start of a
record the kernel wrote (the parser's record rules: docs/security.md, "Kernel log"); anything
else is nothing. Where a peer's test line is not one of these forms, docs/parity.md says which
and why.

STORAGE events (``state`` says which; ``device`` the block device, md array or controller):

- ``md_failed``: ``drivers/md/raid1.c``, ``raid10.c``, ``raid5.c`` print ``md/raid<N>:<md>:
  Disk failure on <dev>, disabling device.`` when a member is kicked out; since 6.x ``raid0.c``
  and ``md-linear.c`` print ``md/raid0<md>: Disk failure on <dev> detected, failing array.`` (no
  colon between the personality and the array's name, as the source has it).
- ``nvme_disabled``: ``drivers/nvme/host/pci.c``: ``nvme nvme<N>: Disabling device after reset
  failure: <errno>`` (the controller did not come back from its reset and is removed).
- ``nvme_timeout``: ``pci.c``'s ``nvme nvme<N>: I/O tag <t> (<cid>) opcode 0x<o> (<name>) QID
  <q> timeout, reset controller`` (older: ``I/O <t> QID <q> timeout, reset controller``): the
  driver resets the controller and retries; a reset that fails prints ``nvme_disabled``.
- ``no_path``: ``drivers/nvme/host/multipath.c``: ``block nvme<N>n<M>: no available path -
  failing I/O`` (every path of the namespace is gone: its I/O fails).
- ``io_error``: ``block/blk-core.c``'s ``I/O error, dev <dev>, sector <n> ...`` and its
  ``critical medium error`` / ``critical target error`` (the block status's own name: a bad
  sector, a failed target; before 5.18 behind ``blk_update_request: ``, in 4.x
  ``print_req_error: ``), ``fs/buffer.c``'s ``Buffer
  I/O error on dev <dev>, logical block <n>, ...``, and ext4's ``EXT4-fs (<dev>): I/O error
  while writing superblock``.
- ``fs_readonly``: ext4's ``EXT4-fs (<dev>): Remounting filesystem read-only`` (``ext4_handle_error``;
  ext2/ext3 print the same words with their own name), XFS's ``XFS (<dev>): ... Filesystem has
  been shut down due to ...`` / ``Corruption of in-memory data ... Shutting down filesystem``,
  and Btrfs's ``BTRFS ... (device <dev>...): forced readonly``.

NFS events (``fs/nfs/client.c``/``nfs4state.c``; ``device`` the server): ``nfs: server <s> not
responding, still trying|timed out`` (``not_responding``), ``nfs: server <s> OK`` (``ok``: it
answers again), ``[NFS: ][__]nfs4_reclaim_open_state: Lock reclaim failed!`` (``lock_reclaim``:
the server restarted and a lock was lost; the print has had both prefixes).

HOST_KERNEL events (``state``): ``soft_lockup`` (``kernel/watchdog.c``: ``watchdog: BUG: soft
lockup - CPU#<n> stuck for <s>s! [<comm>:<pid>]``), ``panic`` (``kernel/panic.c``: ``Kernel panic
- not syncing: <why>``; ``code`` 1 when the reason is the hardware's: a machine check, an NMI,
a firmware-first hardware error), ``file_max`` (``fs/file_table.c``: ``VFS: file-max limit <n>
reached``).

``removable_io_error``: an I/O error on a disk the SCSI layer attached as removable earlier in
the log (``drivers/scsi/sd.c``: ``sd H:C:T:L: [sdX] Attached SCSI removable disk``, before 2.6.2x
``Attached scsi removable disk sdX``): a USB stick or a BMC's virtual media, not the node's disk.

Block devices that are not the node's own disk (a network block device, a loop file, a RAM
disk, a CD) are named in ``device`` like any other; the storage check says which are local (gpuhc/checks/storage.py).
"""

from __future__ import annotations

import re

from gpuhc.text.lazyre import lazy
from gpuhc.model.kernel import EventKind
from gpuhc.sources.kernel_log_record import Found, KernelRecord, sanitize

_MAX_MESSAGE = 300
_DEVNAME = r"[\w.:/-]{1,40}"

_MD = lazy(r"md/(?:raid\d{1,2}|linear)(?::(?P<md1>[\w.-]{1,32}):|(?P<md0>[\w.-]{1,32}):) Disk failure on "
           r"(?P<dev>" + _DEVNAME + r")(?:, disabling device\.| detected, failing array\.)")
_NVME = lazy(r"nvme (?P<dev>nvme\d{1,4}): (?:(?P<dis>Disabling device after reset failure: -?\d{1,4})"
             r"|I/O (?:tag )?\d{1,6} (?:\(\d{1,6}\) )?(?:opcode 0x[0-9a-f]{1,2} \([\w ]{1,40}\) )?QID \d{1,5} "
             r"timeout, reset controller)\s*$")
_NO_PATH = lazy(r"block (?P<dev>nvme\d{1,4}(?:c\d{1,4})?n\d{1,4}): no available path - failing I/O\s*$")
_BLK = lazy(r"(?:blk_update_request: |print_req_error: |end_request: )?(?:I/O|critical medium|critical target) error, dev (?P<dev>" + _DEVNAME + r"), sector \d{1,20}\b")
_BUFFER = lazy(r"Buffer I/O error on dev(?:ice)? (?P<dev>" + _DEVNAME + r"), logical block \d{1,20}\b")
_EXT = lazy(r"EXT[234]-fs \((?P<dev>" + _DEVNAME + r")\): (?P<what>Remounting filesystem read-only|"
            r"I/O error while writing superblock)\s*$")
_XFS = lazy(r"XFS \((?P<dev>" + _DEVNAME + r")\): (?:.{0,200}\.  Shutting down filesystem\.?|"
            r".{0,80}Filesystem has been shut down due to .{0,80})\s*$")
_BTRFS = lazy(r"BTRFS(?: \w{1,10})? \(device (?P<dev>[\w.-]{1,40})(?::? state [A-Za-z]{1,10})?\): forced readonly\s*$")
# drivers/scsi/sd.c: a disk the SCSI layer attached as removable (a USB stick, a BMC's virtual media)
_REMOVABLE = lazy(r"sd \d{1,5}:\d{1,5}:\d{1,5}:\d{1,5}: (?:\[(?P<dev>sd[a-z]{1,4})\] Attached SCSI removable disk|"
                  r"Attached scsi removable disk (?P<old>sd[a-z]{1,4}))\s*$")
_PARTITION = re.compile(r"(?<=[a-z])\d{1,3}$")
_NFS = lazy(r"nfs: server (?P<dev>[\w.:\[\]-]{1,255}) (?P<what>not responding, (?:still trying|timed out)|OK)\s*$")
_RECLAIM = lazy(r"(?:NFS: )?(?:__)?nfs4_reclaim_open_state: Lock reclaim failed!\s*$")
_LOCKUP = lazy(r"watchdog: BUG: soft lockup - CPU#(?P<cpu>\d{1,5}) stuck for \d{1,6}s! \[")
_PANIC = lazy(r"Kernel panic - not syncing: (?P<why>.{1,200})")
_FILE_MAX = lazy(r"VFS: file-max limit \d{1,20} reached\s*$")
# a panic whose reason is the hardware's (arch/x86/kernel/cpu/mce/core.c "Fatal machine check",
# "Fatal local machine check", "Machine check from unknown source"; kernel/watchdog_hld.c and
# arch/x86/kernel/nmi.c "NMI: Not continuing", "Hard LOCKUP", ghes.c "Fatal hardware error!")
_HARDWARE_PANIC = lazy(r"(?i)machine check|\bNMI\b|hardware error|\bMCE\b")
_WORDS = ("md/", "nvme", "I/O error", "critical ", "removable disk", "EXT", "XFS (", "BTRFS", "nfs", "NFS", "watchdog: BUG", "Kernel panic", "VFS: file-max")
_ANY_WORD = re.compile("|".join(map(re.escape, _WORDS)))


def _clip(msg: str) -> str:
    return sanitize(msg, _MAX_MESSAGE)


class StorageLines:
    """One parse's disk, NFS and kernel-health events (the module doc)."""

    words = _WORDS

    @staticmethod
    def wants(msg: str) -> bool:
        return _ANY_WORD.search(msg) is not None

    def __init__(self) -> None:
        self._removable: set[str] = set()  # disks the kernel attached as removable in this log

    def feed(self, rec: KernelRecord) -> Found | None:
        """The event a record the kernel wrote is, or None (a process's line is nothing)."""
        if not rec.kernel:
            return None
        if rec.text.startswith("sd "):
            m = _REMOVABLE.match(rec.text)
            if m is not None and len(self._removable) < 256:
                self._removable.add(m.group("dev") or m.group("old"))
            return None
        hit = next(_forms(rec.text), None)
        if hit is None:
            return None
        kind, state, dev = hit
        if state == "io_error" and dev and _PARTITION.sub("", dev) in self._removable:
            state = "removable_io_error"  # a USB stick's or a virtual CD's error is not the node's disk
        hardware = int(bool(_HARDWARE_PANIC.search(rec.text))) if state == "panic" else None
        return Found(kind, rec.time, rec.seq, rec.line, _clip(rec.text), device=dev, state=state, code=hardware)


def _forms(msg: str):
    """(kind, state, device) of the one form ``msg`` is, as a generator of at most one."""
    for starts, rx, kind, state in _FORMS:
        if msg.startswith(starts):
            m = rx.match(msg)
            if m is not None:
                g = m.groupdict()
                dev = g.get("dev") or (f"CPU{g['cpu']}" if g.get("cpu") else None)
                yield kind, state if isinstance(state, str) else state(m), dev
            return


_STORAGE, _NFS_KIND, _HOST = EventKind.STORAGE, EventKind.NFS, EventKind.HOST_KERNEL
# (how the record starts, its form, its kind, its state or how the match names it); first match decides
_FORMS = (
    ("md/", _MD, _STORAGE, "md_failed"),
    ("nvme ", _NVME, _STORAGE, lambda m: "nvme_disabled" if m.group("dis") else "nvme_timeout"),
    ("block ", _NO_PATH, _STORAGE, "no_path"),
    ("EXT", _EXT, _STORAGE, lambda m: "fs_readonly" if m.group("what").startswith("Remount") else "io_error"),
    ("XFS (", _XFS, _STORAGE, "fs_readonly"),
    ("BTRFS", _BTRFS, _STORAGE, "fs_readonly"),
    ("nfs: ", _NFS, _NFS_KIND, lambda m: "ok" if m.group("what") == "OK" else "not_responding"),
    (("NFS: ", "nfs4_", "__nfs4_"), _RECLAIM, _NFS_KIND, "lock_reclaim"),
    ("watchdog: ", _LOCKUP, _HOST, "soft_lockup"),
    ("Kernel panic", _PANIC, _HOST, "panic"),
    ("VFS: ", _FILE_MAX, _HOST, "file_max"),
    (("I/O", "critical", "blk_update_request", "print_req_error", "end_request"), _BLK, _STORAGE, "io_error"),
    ("Buffer I/O", _BUFFER, _STORAGE, "io_error"),
)
