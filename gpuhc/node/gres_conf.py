"""gres.conf and the driver's MIG minors, read into what gpuhc/node/gpumap.py maps Slurm's GPU numbers
from: the ``Name=`` records that apply to this node (brackets expanded in the order written, one
device per file or per ``MultipleFiles=`` record) and ``/proc/driver/nvidia-caps/mig-minors`` as
(GPU minor, GPU instance, compute instance) per capability minor. docs/facts.md ("Slurm's GPU
numbers, MIG and shared GPUs") has the rules.

Pure: text in, records out; every size bounded, every error a :class:`GpuMapError` naming file
and line. Reading the files is ``gpuhc/sources/gres.py``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from gpuhc.errors import GpuhcError

MAX_GRES_LINES = 10_000  # a gres.conf longer than this is not one a person wrote for a node
MAX_FILES = 4096  # device files one record may expand to (32 GPUs' whole MIG tables are far fewer)
MAX_NODES = 200_000  # node names one NodeName= may expand to
_BRACKET = re.compile(r"\[([^\]]*)\]")
_MIG_LINE = re.compile(r"gpu(\d+)/gi(\d+)(?:/ci(\d+))?/access\s+(\d+)")


class GpuMapError(GpuhcError):
    """Slurm's GPUs cannot be told on this node: said, and never a reason to drain. Declared with
    the parser, the first step that can fail; gpuhc/node/gpumap.py raises it too."""


@dataclass(frozen=True)
class GresRecord:
    """One ``Name=...`` record of gres.conf that applies to this node."""

    name: str  # "gpu", "shard", "mps", ...
    files: tuple[str, ...]  # expanded, in the order written
    multiple: bool = False  # MultipleFiles=: all the files are one device
    type: str | None = None
    line: int = 0


@dataclass
class GresConf:
    """What gres.conf says for this node."""

    where: str
    autodetect: str | None = None  # "nvml", "off", ...; None: not set
    records: list[GresRecord] = field(default_factory=list)


def parse_gres_conf(text: str, where: str, node: str, expand: Any = None) -> GresConf:
    """gres.conf text -> the records for ``node``. ``expand`` turns a hostlist or file list into
    its names (python-hostlist's ``expand_hostlist``; passed in so this module imports nothing
    heavy). Keys are case-insensitive as in Slurm; ``\\`` continues a line; ``#`` starts a
    comment. Raises :class:`GpuMapError` naming the file and line."""
    if expand is None:
        import hostlist

        expand = hostlist.expand_hostlist
    conf = GresConf(where=where)
    lines = _logical_lines(text, where)
    node_auto: str | None = None
    for lineno, line in lines:
        pairs = _pairs(line, where, lineno)
        if not pairs:
            continue
        keys = {k.lower(): v for k, v in pairs}
        if "include" in keys:
            raise GpuMapError(f"{where}:{lineno}: Include is not followed by gpuhc; put the GPU records in gres.conf itself")
        if "nodename" in keys:
            try:
                names = _expand(expand, keys["nodename"], MAX_NODES)
            except Exception as e:
                raise GpuMapError(f"{where}:{lineno}: NodeName={keys['nodename']!r} is not a hostlist ({e})") from None
            if node not in names:
                continue
        if "autodetect" in keys:
            value = keys["autodetect"].lower()
            if "name" not in keys and "nodename" not in keys:
                conf.autodetect = value  # the file-wide default
            else:
                node_auto = value
        if "name" not in keys:
            continue
        name = keys["name"].lower()
        multiple = "multiplefiles" in keys
        raw = keys.get("multiplefiles") or keys.get("file") or keys.get("files")
        files: tuple[str, ...] = ()
        if raw:
            try:
                files = tuple(_expand(expand, raw, MAX_FILES))
            except Exception as e:
                raise GpuMapError(f"{where}:{lineno}: {raw!r} is not a list of device files ({e})") from None
        conf.records.append(GresRecord(name, files, multiple, keys.get("type"), lineno))
    if node_auto is not None:
        conf.autodetect = node_auto
    return conf


def _expand(expand: Any, text: str, limit: int) -> list[str]:
    """A hostlist expanded, refused (ValueError) before it is when it could name more than
    ``limit``: ``nvidia[0-99999999]`` must not cost the prolog its memory."""
    size = 1
    for group in _BRACKET.findall(text):
        count = 0
        for part in group.split(","):
            lo, _, hi = part.partition("-")
            ascii_range = part.isascii() and hi.strip().isdigit() and lo.strip().isdigit()
            count += int(hi) - int(lo) + 1 if ascii_range else 1
        size *= max(count, 1)
        if size > limit:
            raise ValueError(f"more than {limit} names")
    return expand(text)


def _logical_lines(text: str, where: str) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    pending, start = "", 0
    raw = text.splitlines()
    if len(raw) > MAX_GRES_LINES:
        raise GpuMapError(f"{where}: more than {MAX_GRES_LINES} lines")
    for n, line in enumerate(raw, 1):
        line = line.split("#", 1)[0].rstrip()
        if not pending:
            start = n
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        out.append((start, pending + line))
        pending = ""
    if pending:
        out.append((start, pending))
    return out


def _pairs(line: str, where: str, lineno: int) -> list[tuple[str, str]]:
    pairs = []
    for token in line.split():
        key, sep, value = token.partition("=")
        if not sep or not key:
            raise GpuMapError(f"{where}:{lineno}: {token!r} is not Key=Value")
        pairs.append((key, value.strip('"')))
    return pairs


def parse_mig_minors(text: str) -> dict[int, tuple[int, int, int | None]]:
    """``/proc/driver/nvidia-caps/mig-minors`` -> capability minor -> (GPU minor, GPU instance,
    compute instance or None for the GPU instance's own capability). Other lines (``config``,
    ``monitor``) are not MIG devices and are skipped, as NVIDIA's own reader skips them."""
    out: dict[int, tuple[int, int, int | None]] = {}
    for line in text.splitlines():
        m = _MIG_LINE.fullmatch(line.strip())
        if m:
            ci = None if m.group(3) is None else int(m.group(3))
            out[int(m.group(4))] = (int(m.group(1)), int(m.group(2)), ci)
    return out
