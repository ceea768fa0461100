"""nvswitch on peers' own test lines (issue 51): the SOE's SXids, printed with no fatality word,
judged by the SXid catalog; an SXid behind a prefix the kernel never writes is named, as an Xid
there is. Lines copied from NVSentinel's suite (tests/fixtures/kernel_log/peers/README.md)."""

from __future__ import annotations

from gpuhc.checks import nvswitch, xid
from gpuhc.model.result import Action, Status
from gpuhc.sources.kernel_log_parse import parse_lines
from tests.helpers.peer_lines import brief, judge, lines


def test_soe_halted_exterr_and_watchdog_fail_with_a_reboot():
    watchdog, halted, exterr, halt_data = lines("sxid_soe_nvsentinel.log")
    for line, name in ((watchdog, "SOE watchdog error"), (halted, "SOE halted"), (exterr, "SOE external error")):
        out = judge(nvswitch.CHECKS[0], [line])
        assert brief(out) == [(Status.FAIL, Action.DRAIN_REBOOT, "nvswitch0")], line
        assert name in out.results[0].message
    # the halt's trace lines (flcn_ls10.c) are the same incident as the halt: one result, counted
    out = judge(nvswitch.CHECKS[0], [halted, halt_data])
    assert [(r.status, r.value["count"]) for r in out.results] == [(Status.FAIL, 2)]


def test_an_sxid_behind_a_prefix_the_kernel_never_writes_warns_like_an_xid():
    (line,) = lines("sxid_unknown_prefix_nvsentinel.log")  # "[123] nvidia-nvswitch3: SXid ..."
    log = parse_lines([line])
    assert (log.events, log.unparsed_lines, log.unparsed_example) == ([], 1, line)
    out = judge(xid.CHECKS[0], [line])
    assert brief(out) == [(Status.WARN, Action.NONE, "node")]
    assert "not the driver's exact grammar" in out.results[0].message
    # the same report with the kernel's own stamp is read, its word ("Non-fatal") believed
    stamped = judge(nvswitch.CHECKS[0], [line.replace("[123]", "[  123.000000]")])
    assert brief(stamped) == [(Status.WARN, Action.NONE, "nvswitch3")]


def test_a_severity_detail_line_carries_the_drivers_word_when_its_header_is_gone():
    # error_nvswitch.c prints "Severity N" with the driver's severity (1: fatal): 12033 is
    # reported either way (fatal when the error locked the port), and this one was fatal
    (line,) = lines("sxid_severity_detail_nvsentinel.log")
    assert [(e.code, e.state) for e in parse_lines([line]).events] == [(12033, "fatal")]
    assert brief(judge(nvswitch.CHECKS[0], [line])) == [(Status.FAIL, Action.DRAIN_REBOOT, "nvswitch0")]
    assert brief(judge(nvswitch.CHECKS[0], [line.replace("Severity 1", "Severity 0")])) == [
        (Status.WARN, Action.NONE, "nvswitch0")]
