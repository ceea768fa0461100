"""The drain reasons gpuhc writes into Slurm, and how it recognises its own.

The reason string is gpuhc's only durable mark on a node that every machine can see: it tells an
admin why a node is out, it is how gpuhc knows a drain is *its* drain (and so may be resumed), and
it carries the quarantine cycle across reboots. Its shape::

    gpuhc: <check>[<code>] [<subject>] <evidence>[; +N more (<checks>)][ [q<cycle>]]
    gpuhc: RETIRED <check>[<code>] [<subject>] <evidence> ...

e.g. ``gpuhc: xid79 gpu3 (0000:18:00.0): GPU has fallen off the bus``.

Rules, and why:

- **What and where first.** Plain ``sinfo -R`` shows 20 characters of a reason, so it leads with
  the check, its code run into it where the check has one (the Xid or SXid number:
  :data:`CODES`), and the subject (a GPU, a port); the evidence follows without saying either
  again (the message's ``Xid 79`` and ``on gpu3`` are moved, not copied). A code is only ever
  moved from the front of the message, never added: a message without one (``gpu3 has fallen off
  the bus (no Xid logged)``) leads with the bare check. A subject the message first names
  elsewhere (``NIC 0000:1c:00.0: ...``) stays there and does not lead: said once.
- **Every earlier shape is still ours.** Reasons written before the lead took this form
  (``gpuhc: xid Xid 79 on gpu3 ...``, ``gpuhc: xid gpu3 Xid 79``) stay on drained nodes across
  an upgrade: :func:`parse_reason` reads both (the first word is the check, with or without a
  code), so they are resumed, cycled and retired as before, and their evidence is kept as
  written.
- **Ownership by prefix.** A reason starting with ``gpuhc:`` is ours; anything else (an admin's
  note, Slurm's "Not responding", "Prolog error", NHC's "NHC: ...") is never overwritten and
  never resumed. Matching is exact and case-sensitive, colon included, so that an admin's
  "GPUHC check later" or "gpuhc check later" is not mistaken for ours.
- **Deterministic.** The same failing results give byte-identical text (sorted by severity,
  then check and subject), so a re-run sends nothing: gpuhc compares before acting, and Slurm
  treats an identical reason as a no-op anyway.
- **One printable line, at most 255 bytes of UTF-8** (the accounting database column). Kernel log
  text can carry control characters, quotes and backslashes; they are replaced, and truncation
  never cuts a multi-byte character or the ``[qN]`` tag.
- **Brackets are gpuhc's.** ``scontrol show node`` prints ``Reason=<text> [user@time]``, and the
  cycle tag is ``[qN]``; evidence therefore has its square brackets turned into round ones, so
  kernel text can neither forge a tag nor confuse the user/time suffix.
- Slurm itself appends text to a reason in a few cases (``scontrol reboot`` adds
  ``reboot issued``/``reboot complete``), so :func:`parse_reason` finds the tag anywhere after
  the prefix rather than insisting that it ends the string.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Iterable

from gpuhc.model.result import Result, Status

PREFIX = "gpuhc:"
RETIRED = "RETIRED"
MAX_BYTES = 255
_ELLIPSIS = "..."

# Characters removed from evidence: quotes and backslashes survive argv but confuse anyone who
# later pastes the reason into a shell or a scontrol interactive line.
_DROP = str.maketrans({'"': None, "'": None, "`": None, "\\": "/", "[": "(", "]": ")"})
_CYCLE_TAG = re.compile(r"\s\[q(\d{1,3})\](?=\s|$)")
# The remediation ladder's step (gpuhc/slurm/repair/ladder.py): ``[reset 1/2]`` or ``[reboot]``.
_STEP_TAG = re.compile(r"\s\[(reset \d{1,2}/\d{1,2}|reboot)\](?=\s|$)")
# The checks whose findings carry a code, and the word their messages give it ("Xid 79 on gpu3"):
# the reason's first word is the check with the code run into it (xid79, nvswitch12028).
CODES = {"xid": "Xid", "nvswitch": "SXid"}
_CODED = re.compile(rf"({'|'.join(map(re.escape, CODES))})(\d{{1,6}})")


def sanitize(text: str) -> str:
    """One printable line: control and format characters become spaces, runs of whitespace
    collapse, quotes/backslashes/brackets are neutralised."""
    out = []
    for ch in text:
        cat = unicodedata.category(ch)
        if cat[0] == "C" or cat in ("Zl", "Zp") or (cat == "Zs" and ch != " "):
            out.append(" ")
        else:
            out.append(ch)
    return " ".join("".join(out).translate(_DROP).split())


def truncate_utf8(text: str, max_bytes: int) -> str:
    """Cut ``text`` to at most ``max_bytes`` of UTF-8 without splitting a character."""
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text
    return data[:max_bytes].decode("utf-8", errors="ignore")


def _fit(head: str, evidence: str, tail: str) -> str:
    """``head + evidence + tail`` within MAX_BYTES, shortening only the evidence."""
    room = MAX_BYTES - len(head.encode()) - len(tail.encode())
    if len(evidence.encode()) > room:
        evidence = truncate_utf8(evidence, max(0, room - len(_ELLIPSIS))).rstrip() + _ELLIPSIS
    return (head + evidence).rstrip() + tail


def owned(reason: str | None) -> bool:
    """Was this reason written by gpuhc?"""
    return bool(reason) and reason.lstrip().startswith(PREFIX)


# The reasons slurmctld writes when a prolog or an epilog exits non-zero (or slurmd kills it at
# PrologEpilogTimeout): (lower-case prefix, cause). Not gpuhc's text, but gpuhc's hooks are how a
# node gets it, so the circuit breaker counts these nodes too (gpuhc/slurm/policy/breaker.py).
HOOK_FAILURES: tuple[tuple[str, str], ...] = (
    ("prolog error", "prolog error"),
    ("prolog failed", "prolog error"),
    ("epilog error", "epilog error"),
)


def hook_failure(reason: str | None) -> bool:
    """Is this Slurm's reason for a failed prolog or epilog?"""
    low = (reason or "").strip().lower()
    return any(low.startswith(prefix) for prefix, _ in HOOK_FAILURES)


@dataclass(frozen=True)
class GpuhcReason:
    """A parsed gpuhc reason."""

    text: str  # the whole reason as Slurm holds it
    body: str  # after the prefix, without RETIRED and the cycle tag
    check: str  # first word of the body, without its code: the check id that drained the node
    code: int | None = None  # the Xid or SXid the first word carries (xid79); None in earlier reasons
    cycle: int = 0  # quarantine cycle; 0: not in quarantine
    retired: bool = False
    step: str | None = None  # the remediation step in progress: "reset 1/2", "reboot"

    @property
    def quarantined(self) -> bool:
        return self.cycle > 0 and not self.retired


def parse_reason(reason: str | None) -> GpuhcReason | None:
    """Parse a gpuhc reason; ``None`` when the reason is not gpuhc's."""
    if not owned(reason):
        return None
    text = reason.strip()
    body = text[len(PREFIX):].strip()
    retired = body.startswith(RETIRED + " ") or body == RETIRED
    if retired:
        body = body[len(RETIRED):].strip()
    cycle, step, cut = 0, None, len(body) + 1
    m = _CYCLE_TAG.search(" " + body)
    if m:
        cycle, cut = int(m.group(1)), m.start()
    s = _STEP_TAG.search(" " + body)
    if s:
        step, cut = s.group(1), min(cut, s.start())
    body = (" " + body)[:cut].strip()  # tags end the body; Slurm's own notes after them go too
    check, code = split_lead(body.split(" ", 1)[0] if body else "")
    return GpuhcReason(text=text, body=body, check=check, code=code, cycle=cycle, retired=retired, step=step)


def split_lead(word: str) -> tuple[str, int | None]:
    """A reason's first word as (check, code): ``xid79`` -> ("xid", 79), ``pcie`` -> ("pcie",
    None); only the checks of :data:`CODES` carry one."""
    m = _CODED.fullmatch(word)
    return (m.group(1), int(m.group(2))) if m else (word, None)


def format_reason(body: str, cycle: int = 0, retired: bool = False, step: str | None = None) -> str:
    """Build a reason from an already chosen body (check + evidence); ``step`` is the
    remediation ladder's tag (``reset 1/2``, ``reboot``), never on a retired node."""
    head = f"{PREFIX} {RETIRED} " if retired else f"{PREFIX} "
    tail = f" [q{cycle}]" if cycle > 0 and not retired else ""
    if step and not retired:
        if not _STEP_TAG.fullmatch(f" [{step}]"):
            raise ValueError(f"not a remediation step: {step!r}")
        tail += f" [{step}]"
    return _fit(head, sanitize(body) or "unspecified", tail)


def _severity_key(r: Result) -> tuple:
    # Worst action first; then stable text order so that the choice never depends on the order
    # in which checks happened to run.
    return (-r.action.rank, r.check, r.subject, r.message)


def lead(check: str, subject: str, message: str) -> str:
    """``<check>[<code>] [<subject>] <evidence>``: the code a message of a check in :data:`CODES`
    opens with (``Xid 79 on gpu3: ...``) and the subject moved to the front, each said once. A
    code said later in the message is not the finding's ("then Xid 8"): it stays where it is."""
    message = sanitize(message)
    word = check
    m = re.match(rf"{CODES[check]} (\d{{1,6}})(?![\w/.-])", message) if check in CODES else None
    if m:
        word, message = f"{check}{m.group(1)}", message[m.end():]
    where = ""
    if subject not in ("", "node"):
        where = sanitize(subject)
        # Moved from where gpuhc's messages first say it ("gpu3 PCIe link ...", "... on gpu3");
        # said first anywhere else ("NIC 0000:1c:00.0: ..."), the message keeps it, unrepeated.
        m = re.search(rf"(?<![\w/.:-]){re.escape(where)}(?![\w/-])", message)
        before = message[:m.start()] if m else ""
        if m and not before.strip():
            message = message[m.end():]
        elif m and re.search(r"(?:^|\s)on $", before):
            message = before[:-3] + message[m.end():]
        elif m:
            where = ""
    evidence = " ".join(message.split()).lstrip(":,; ")
    return " ".join(p for p in (word, where, evidence) if p)


def failure_body(results: Iterable[Result]) -> str:
    """The lead and evidence (:func:`lead`) of the worst failing result, plus a count of the rest."""
    failing = sorted((r for r in results if r.status is Status.FAIL), key=_severity_key)
    if not failing:
        return ""
    worst = failing[0]
    body = lead(worst.check, worst.subject, worst.message)
    others = failing[1:]
    if others:
        checks = sorted({r.check for r in others})
        body += f"; +{len(others)} more ({','.join(checks)})"
    return body


def build_reason(results: Iterable[Result], cycle: int = 0, retired: bool = False) -> str:
    """The reason for draining on these results; deterministic for the same failure."""
    body = failure_body(results)
    if not body:
        raise ValueError("build_reason needs at least one failing result")
    return format_reason(body, cycle=cycle, retired=retired)


def with_cycle(reason: GpuhcReason, cycle: int) -> str:
    """The same evidence, tagged with a new quarantine cycle."""
    return format_reason(reason.body, cycle=cycle)


def retired_from(reason: GpuhcReason | None, note: str = "") -> str:
    """The RETIRED reason: keep the evidence that got the node here, or an admin's note."""
    body = reason.body if reason and reason.body else (note or "retired by admin")
    return format_reason(body, retired=True)
