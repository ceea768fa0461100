"""Journal exports read as kernel log text: ``journalctl -o json`` lines and ``journalctl -o
export`` streams, which say who wrote each entry (``_TRANSPORT``). Pure, no I/O, never raises;
:mod:`gpuhc.sources.kernel_log_parse` reads the messages, under the same record rules as every
other shape (docs/security.md, "Kernel log").
"""

from __future__ import annotations

from gpuhc.sources.kernel_log_prefix import Stamps

MAX_JSON_LINE = 1 << 20  # a journal entry longer than this is not one gpuhc reads


def journal_json(line: str, stamps: Stamps) -> tuple[float | None, bool, str] | None:
    """(time, is-the-kernel, message) of one ``journalctl -o json`` entry, else None.

    The journal records who wrote each entry: ``_TRANSPORT`` is ``kernel`` only for the kernel's
    own ring buffer (systemd.journal-fields(7)); a program's message never is, whatever its
    SYSLOG_IDENTIFIER says. MESSAGE is a string, or a list of bytes when it is not UTF-8."""
    if len(line) > MAX_JSON_LINE or not line.rstrip().endswith("}"):
        return None
    import json

    try:
        entry = json.loads(line)
    except ValueError:
        return None
    if not isinstance(entry, dict):
        return None
    msg = entry.get("MESSAGE")
    if isinstance(msg, list) and all(isinstance(b, int) and 0 <= b < 256 for b in msg):
        msg = bytes(msg).decode("utf-8", "replace")
    if not isinstance(msg, str):
        return None
    t = None
    usec = entry.get("__REALTIME_TIMESTAMP")
    if isinstance(usec, str) and usec.isdigit() and len(usec) < 20:
        t = int(usec) / 1e6
    elif isinstance(entry.get("__MONOTONIC_TIMESTAMP"), str) and entry["__MONOTONIC_TIMESTAMP"].isdigit():
        t = stamps.since_boot(int(entry["__MONOTONIC_TIMESTAMP"][:19]) / 1e6)
    return t, entry.get("_TRANSPORT") == "kernel", msg


class JournalExport:
    """``journalctl -o export`` read line by line: an entry is ``KEY=value`` lines up to a blank
    line, starting with ``__CURSOR=``. :meth:`feed` returns ``(time, is-the-kernel, message)``
    when an entry ends, like :func:`journal_json`, and False for a line that belongs to an entry.
    A binary field (a name alone on its line, then a 64-bit length and raw bytes) cannot be told
    apart from the fields after it once the bytes are cut into lines: its bytes may hold
    ``\n_TRANSPORT=kernel\nMESSAGE=...``. So an entry with one is dropped here; a file is read by
    its bytes instead (:func:`export_entries`), where every field is taken by its length."""

    MAX_FIELDS = 256  # an entry with more is not one journald writes

    def __init__(self, stamps: Stamps):
        self.stamps = stamps
        self.fields: dict[str, str] | None = None

    def feed(self, line: str) -> tuple[float | None, bool, str] | bool | None:
        if self.fields is None:
            if not line.startswith("__CURSOR="):
                return None
            self.fields = {}
        if not line.strip():
            return self.end()
        key, eq, value = line.partition("=")
        if not eq:
            self.fields[_BINARY] = ""  # a binary field: what follows is not to be read as lines
        elif len(self.fields) < self.MAX_FIELDS:
            self.fields.setdefault(key, value)
        return False

    def end(self) -> tuple[float | None, bool, str] | None:
        fields, self.fields = self.fields, None
        if not fields or "MESSAGE" not in fields or _BINARY in fields:
            return None
        usec = fields.get("__REALTIME_TIMESTAMP", "")
        t = int(usec) / 1e6 if usec.isdigit() and len(usec) < 20 else None
        return t, fields.get("_TRANSPORT") == "kernel", fields["MESSAGE"]


_BINARY = "\0binary"  # no field name journald writes holds a NUL


def export_entries(data: bytes, max_entries: int = 1_000_000) -> list[str] | None:
    """A ``journalctl -o export`` stream read by its bytes (systemd's "Journal Export Format"):
    each entry as one ``journalctl -o json``-shaped line (``_TRANSPORT``, ``MESSAGE``,
    ``__REALTIME_TIMESTAMP``) for :func:`journal_json`. A field is ``NAME=value\\n`` or ``NAME\\n``,
    a little-endian 64-bit length, that many bytes, ``\\n``; an entry ends at an empty line. A
    binary value is taken by its length, so bytes inside it are never fields. Each field name
    counts once (the first), as journald writes each once. None when ``data`` is not an export
    (it must begin with ``__CURSOR=``); a stream cut short ends with the entries it completed."""
    if not data.startswith(b"__CURSOR="):
        return None
    out: list[str] = []
    fields: dict[str, str] = {}
    at, n = 0, len(data)
    while at < n and len(out) < max_entries:
        nl = data.find(b"\n", at)
        if nl < 0:
            break
        line = data[at:nl]
        at = nl + 1
        if not line:
            if "MESSAGE" in fields:
                out.append(_as_json(fields))
            fields = {}
            continue
        name, eq, value = line.partition(b"=")
        if not eq:  # binary: length, bytes, newline
            if at + 8 > n:
                break
            size = int.from_bytes(data[at:at + 8], "little")
            if size > n - at - 8:
                break
            value, at = data[at + 8:at + 8 + size], at + 8 + size + 1
        fields.setdefault(name.decode("utf-8", "replace"), value.decode("utf-8", "replace"))
    if "MESSAGE" in fields and at >= n:
        out.append(_as_json(fields))
    return out


def _as_json(fields: dict[str, str]) -> str:
    import json

    return json.dumps({k: fields[k] for k in ("__REALTIME_TIMESTAMP", "_TRANSPORT", "MESSAGE") if k in fields})
