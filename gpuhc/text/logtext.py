"""Text from elsewhere, made safe for a log line or a terminal: declared once, used everywhere.

Messages gpuhc prints quote what others wrote: kernel log lines (an Xid names the user's
process), node names and reasons from Slurm, probe results written by unprivileged jobs, paths
an admin typed. A ``\\n`` or ``\\r`` in any of them would forge a line in the cron log or syslog;
an escape sequence would drive the admin's terminal. So every such text becomes one printable
line: a tab or an exotic space becomes a space, every other character that is not printable
(Unicode's control, format, surrogate, private-use and unassigned characters, line and
paragraph separators) is written as a visible escape (``\\x0a``, ``\\u202e``), so the log shows
that something was there and nothing in it acts.

JSON keeps the exact text instead, through JSON's own escaping: :func:`json_text` writes every
character that is not printable as a ``\\uXXXX`` escape (json.dumps leaves C1 controls such as
U+009B, a one-character CSI, and U+2028 raw when it keeps non-ASCII), so a JSON document on a
terminal is as inert as a line, and a reader gets back every byte Slurm gave.

The drain reason has stricter rules of its own on top (``gpuhc.slurm.policy.reason.sanitize``: Slurm
quotes and brackets), and kernel-log messages are already one line when parsed
(``gpuhc.sources.kernel_log_parse.sanitize``); this is what every log line goes through last.
"""

from __future__ import annotations


def escape(text: object, cap: int | None = None) -> str:
    """``text`` as one printable line (see the module doc), at most ``cap`` characters."""
    s = str(text)
    if not s.isprintable():  # C-speed test; the common case never walks the characters
        s = "".join(map(_char, s))
    if cap is not None and len(s) > cap:
        s = s[:cap] + "..."
    return s


def _char(ch: str) -> str:
    if ch.isprintable():
        return ch
    import unicodedata  # only for text that needs it: the health check's lines rarely do

    if ch == "\t" or unicodedata.category(ch) == "Zs":
        return " "
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def json_text(doc: object, **kw) -> str:
    """``json.dumps(doc, ensure_ascii=False, **kw)`` with every character that is not printable
    (bar the newlines of ``indent``) written as a JSON ``\\u`` escape: same data, inert text."""
    import json

    text = json.dumps(doc, ensure_ascii=False, **kw)
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() or ch == "\n" else _json_char(ch) for ch in text)


def _json_char(ch: str) -> str:
    code = ord(ch)
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000  # JSON spells a character past the BMP as a UTF-16 surrogate pair
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
