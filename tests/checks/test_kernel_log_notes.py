"""The xid check names what the kernel-log read could not read (gpuhc/checks/kernel_log_notes.py):
a line with no stamp in a stamped log is a WARN with its count and first line number, said by a
replay of a recording and, on a live node, only when the count grows (one odd line must not
repeat on every run). Never a drain."""

from __future__ import annotations

import json

from gpuhc.checks import xid
from gpuhc.model.result import Status
from gpuhc.sources.kernel_log_parse import parse_lines
from tests.helpers.cli import gpuhc
from tests.helpers.paths import SCENARIOS
from tests.helpers.snapshots import context, healthy_node

# A real record (congphase/my-t450s troubleshoot_log.md, quoting nvidia-bug-report.log), dmesg -T shape
XID79 = "[Fri Mar 21 20:18:56 2025] NVRM: Xid (PCI:0000:01:00): 79, pid='<unknown>', name=<unknown>, " \
        "GPU has fallen off the bus."
# a real healthy kernel line (../realdata 04, leptonai/gpud PR 1209), in the same shape
HEALTHY = "[Fri Mar 21 20:18:50 2025] workqueue: ib_cache_event_task [ib_core] hogged CPU for >10000us 4 times, " \
          "consider switching to WQ_UNBOUND"
# what a paste into a ticket adds: the admin's prompt, and a line whose stamp the copy cut off
PASTED = ["$ sudo dmesg -T | tail -n 3", HEALTHY, "ork: ib_cache_event_task [ib_core] hogged CPU", XID79]


def _judge(lines: list[str], prev: dict | None = None):
    log = parse_lines(lines, year=2025)
    snap = healthy_node(time=log.last_time + 1)
    snap.kernel = log
    return xid.CHECKS[0].judge(snap, context(xid.CHECKS[0], prev=prev))


def _unread(out) -> list:
    return [r for r in out.results if "no stamp gpuhc can read" in r.message]


def test_a_pasted_log_with_unreadable_lines_says_how_many_and_where_and_hides_nothing():
    out = _judge(PASTED)
    (note,) = _unread(out)
    assert note.status is Status.WARN and not note.action.drains
    assert note.value == {"unread_lines": 2, "unread_first_line": 1} and "first: line 1" in note.message
    assert any(r.status is Status.FAIL and "Xid 79" in r.message for r in out.results)  # the Xid after them


def test_a_clean_log_says_nothing_about_its_read():
    assert _unread(_judge([HEALTHY, XID79])) == []


def test_a_live_node_says_it_once_and_again_only_when_the_count_grows():
    first = _judge(PASTED)
    assert _unread(first) and _unread(_judge(PASTED, prev=first.state)) == []
    (again,) = _unread(_judge(PASTED + ["stray typed text"], prev=first.state))
    assert again.message.startswith("1 kernel log line(s)") and again.value["unread_lines"] == 3


def test_the_command_line_shows_it_on_the_tty_and_in_json(tmp_path):
    log = tmp_path / "pasted.log"
    log.write_text("\n".join(PASTED) + "\n")
    scenario = str(SCENARIOS / "healthy-8xh100.yaml")
    argv = ["check", "--nvml-scenario", scenario, "--kernel-log", str(log), "--only", "xid"]
    tty = gpuhc(*argv, "--state-dir", str(tmp_path / "a"))
    assert "2 kernel log line(s) carry no stamp gpuhc can read" in tty.stdout, tty.stdout + tty.stderr
    out = gpuhc(*argv, "--json", "--state-dir", str(tmp_path / "b"))
    notes = [r for r in json.loads(out.stdout)["results"] if "no stamp" in r["message"]]
    assert [(r["status"], r["value"]) for r in notes] == [("warn", {"unread_lines": 2, "unread_first_line": 1})]
