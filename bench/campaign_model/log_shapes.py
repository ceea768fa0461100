"""The shape a node's kernel log arrives in (docs/campaign.md, "Logs in every shape"). Sites read
the kernel through different tools: ``dmesg --time-format=iso``, the journal's short-iso, a
syslog file in RFC 3164 or RFC 5424, ``dmesg -T``. Each modelled node has one, drawn at the
start from SHARES (ours), and every line of its kernel log (the faults', the noise's, the
driver's) is written in it: a shape gpuhc misreads hides the fault, and its jobs are escapes.

The model keeps its lines as ``dmesg --time-format=iso`` writes them (node.py's restamp and
windows read that stamp); this module renders them for the scenario gpuhc reads, the message
unchanged.
"""

from __future__ import annotations

import calendar
import random
import re
import time

SHARES = (("iso", 0.30), ("short-iso", 0.30), ("rfc3164", 0.25), ("ctime", 0.10), ("rfc5424", 0.05))
_ISO = re.compile(r"^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d),(\d{6})\+00:00 (.*)$", re.S)
# who wrote it: the kernel's lines name a driver; the model's clock line is systemd's
_SYSTEMD = re.compile(r"^systemd\[\d+\]: ")


def draw(rng: random.Random) -> str:
    r, acc = rng.random(), 0.0
    for shape, share in SHARES:
        acc += share
        if r < acc:
            return shape
    return SHARES[-1][0]


def render(line: str, shape: str, host: str) -> str:
    """``line`` (an ISO-stamped kernel or systemd line) as ``shape`` prints it on ``host``."""
    m = _ISO.match(line)
    if m is None or shape == "iso":
        return line
    y, mo, d, hh, mm, ss, us, msg = m.groups()
    # syslog and dmesg -T print local time, as gpuhc reads them back
    local = time.localtime(calendar.timegm((int(y), int(mo), int(d), int(hh), int(mm), int(ss), 0, 0, 0)))
    ident, text = ("systemd[1]", msg[m2.end():]) if (m2 := _SYSTEMD.match(msg)) else ("kernel", msg)
    if shape == "short-iso":
        return f"{y}-{mo}-{d}T{hh}:{mm}:{ss}.{us}+00:00 {host} {ident}: {text}"
    if shape == "rfc3164":
        return f"{time.strftime('%b', local)} {local.tm_mday:2d} {time.strftime('%H:%M:%S', local)} {host} {ident}: {text}"
    if shape == "ctime":
        return f"[{time.strftime('%a %b', local)} {local.tm_mday:2d} {time.strftime('%H:%M:%S %Y', local)}] {msg}"
    if shape == "rfc5424":
        pri = "<30>" if ident != "kernel" else "<4>"  # daemon.info; kern.warning
        app = "systemd" if ident != "kernel" else "kernel"
        return f"{pri}1 {y}-{mo}-{d}T{hh}:{mm}:{ss}.{us}Z {host} {app} - - - {text}"
    raise ValueError(shape)
