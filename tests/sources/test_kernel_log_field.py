"""Kernel logs from public bug reports, in every shape the field prints, parsed and judged.

Each file in tests/fixtures/kernel_log/real/ is copied from a public report; its source is in
that folder's README. The expectations were counted by hand from the file: the events a person
reading it would name, and the verdict an admin would want.
"""

from __future__ import annotations

import calendar
from collections import Counter

import pytest

from gpuhc.checks import xid
from gpuhc.model.kernel import EventKind
from gpuhc.model.result import Action, Status
from gpuhc.sources.kernel_log import FileKernelLog
from gpuhc.sources.kernel_log_parse import SIGNALS
from gpuhc.catalog.xid import signal_table
from tests.helpers.snapshots import T0, context, healthy_node
from tests.helpers.paths import FIXTURES

REAL = FIXTURES / "kernel_log" / "real"
X, F, D = EventKind.XID, EventKind.FALLEN_OFF_BUS, EventKind.DRIVER
N, L = EventKind.NIC_HEALTH, EventKind.IB_LINK
YEAR = 2026  # syslog stamps carry no year


def _read(name: str):
    return FileKernelLog(str(REAL / name), year=YEAR).read()


def _events(log) -> Counter:
    return Counter((e.kind, e.state if e.kind in (D, N, L) else e.code, e.pci) for e in log.events)


# file -> events (kind, code or driver signal, pci) as a person counts them
EXPECTED = {
    # journalctl without a host name: before, every line was taken for a program's and dropped
    "journal_nohost_xid120_xid154_rtxpro6000.log": {
        (X, 62, "0000:01:00.0"): 1, (X, 154, "0000:01:00.0"): 2, (X, 45, "0000:01:00.0"): 1,
        (X, 120, "0000:01:00.0"): 1},
    # talosctl dmesg: "IP: kern: warning: [RFC 3339 ns]: msg"; the GPU is named only after the signal
    "talosctl_gsp_marked_for_reset_a100.log": {(D, "gsp_rpc_timeouts", None): 1, (X, 154, "0000:0b:00.0"): 1},
    # two failed initialisations of one GPU; the GSP Timeout banner is not an event
    "dmesg_rminitadapter_failed_gsp_timeout_h100.log": {(D, "rm_init_failed", "0000:a1:00.0"): 2},
    "journal_rminitadapter_failed_rtx5080.log": {(D, "rm_init_failed", "0000:09:00.0"): 2},
    "dmesg_T_reset_required_sichek.log": {(D, "reset_required", None): 1},
    # one NV_ERR_RESET_REQUIRED line among NV_ERR_GPU_IN_FULLCHIP_RESET noise
    "journal_reset_required_rtx5080.log": {(D, "reset_required", None): 1},
    "journal_gpu_lost_dgx_station_a100.log": {(D, "gpu_lost", None): 3},
    # pid='<unknown>', name=<unknown>; and a shell prompt line pasted with the output
    "dmesg_T_unknown_pid_name_akash.log": {
        (X, 43, "0000:00:05.0"): 2, (X, 31, "0000:00:07.0"): 1, (X, 94, "0000:00:08.0"): 1},
    # a review comment: each line behind "+> " (a diff of a markdown quote)
    "pasted_diff_quote_dmesg_T_gpud.log": {(X, 13, "0000:cb:00.0"): 3, (X, 109, "0000:cb:00.0"): 1},
    # GB200 lines with non-zero PCI domains (0018, 0019)
    "kmsg_text_nvlink5_nonzero_domain_gb200.log": {
        (X, 149, "0019:01:00.0"): 1, (X, 149, "0000:00:00.0"): 1, (X, 145, "0018:01:00.0"): 1,
        (X, 94, "0000:9b:00.0"): 1, (X, 144, "0000:01:00.0"): 1},
    # "kernel: " before each line, no stamp at all; "caused by previous Xid 149" is not a second Xid
    "kernel_tag_only_xid45_after_nvlink5.log": {
        (X, 45, "0000:dc:00.0"): 2, (X, 45, "0000:ed:00.0"): 2, (X, 45, "0000:ba:00.0"): 2, (X, 45, "0000:97:00.0"): 1},
    # the legacy one-line "GPU at 0000:01:00.0 has fallen off the bus." echoes the Xid 79: one incident
    "syslog_legacy_fallen_off_bus_gt630.log": {(X, 79, "0000:01:00.0"): 1},
    "bare_xid63_device_1c_ml_engineering.log": {(X, 63, "0000:10:1c.0"): 1},  # device number 0x1c
    "syslog_legacy_pci_field_pastebin.log": {(X, 13, "0000:01:00.0"): 3},  # "Xid (0000:01:00)", no PCI:
    # redacted addresses are not the driver's grammar: counted and quoted (UNPARSED), never events
    "redacted_pci_xid79_xid154_writeup.log": {},
    # GSP failures without an Xid (issue 19): a CrashCat banner, then the watchdog line, no Xid
    "journal_gsp_crashcat_watchdog_rtx5070ti.log": {(D, "gsp_crashcat", None): 1, (D, "gsp_watchdog", None): 1},
    "dmesg_gsp_heartbeat_timeout_595.log": {(D, "gsp_heartbeat", None): 2},
    # the banner is named by the rm_init_adapter line just before it
    "dmesg_gsp_crashcat_xid120_rtx5080_laptop.log": {
        (D, "rm_init_failed", "0000:01:00.0"): 1, (D, "gsp_crashcat", "0000:01:00.0"): 1, (X, 120, "0000:01:00.0"): 1},
    # real records of this test host: processes named like driver lines segfaulted under an
    # unprivileged uid (the kernel's own records, facility 0), and two records root wrote into
    # /dev/kmsg (facility 1 whatever the level asked for): none of them is driver evidence
    "kmsg_segfault_named_like_nvrm_and_user_records_this_host.log": {},
    # ConnectX health (issue 46), mailing-list and public-note dmesg: one event per driver line
    # that says the firmware stopped; a buffer dump's assert_var words are none, its synd line one
    "dmesg_mlx5_link_up_down_temp_warn_cx6dx_note.log": {  # netdev "Link down/up"; the adapter hot
        (L, "DOWN", "0000:01:00.0"): 1, (L, "ACTIVE", "0000:01:00.1"): 1, (L, "DOWN", "0000:41:00.0"): 1,
        (L, "ACTIVE", "0000:41:00.1"): 1, (N, "nic_hot", "0000:41:00.0"): 1, (N, "nic_hot", "0000:41:00.1"): 1},
    "dmesg_mlx5_miss_count_high_temp_then_fatal_cx6dx_note.log": {
        **{(N, s, f"0000:41:00.{fn}"): 1 for s in ("miss_count", "fatal_error", "recovery_failed") for fn in (0, 1)},
        (N, "syndrome", "0000:41:00.0"): 2, (N, "syndrome", "0000:41:00.1"): 2},  # synd 0x10, then 0xff
    # a kernel with the "Health issue observed" header: it swallows its dump; four functions only missed the count
    "dmesg_mlx5_miss_count_health_issue_error_vdpa_cx6dx_qemu_devel.log": {
        **{(N, "miss_count", f"0000:0d:00.{fn}"): 1 for fn in range(6)},
        (N, "health_issue", "0000:0d:00.0"): 1, (N, "health_issue", "0000:0d:00.1"): 1},
    "dmesg_mlx5_fatal_error_hot_unplug_s390_v58rc4_netdev.log": {
        (N, "fatal_error", "0000:00:00.0"): 1, (N, "syndrome", "0000:00:00.0"): 1},
    "dmesg_mlx5_fatal_error_recovery_aborted_s390_v57_netdev.log": {
        (N, "fatal_error", "0001:00:00.0"): 1, (N, "syndrome", "0001:00:00.0"): 1,
        (N, "recovery_failed", "0001:00:00.0"): 1},
    # the buffer alone, at boot (the mail wrapped each line after "(pid 0):"; unwrapped)
    "dmesg_mlx5_synd_irisc_not_responding_unwrapped_power9_netdev.log": {(N, "syndrome", "0001:19:00.0"): 1},
}
UNPARSED = {"redacted_pci_xid79_xid154_writeup.log": 2}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_events_a_person_would_count(name):
    log = _read(name)
    assert _events(log) == Counter(EXPECTED[name])
    assert log.unparsed_lines == UNPARSED.get(name, 0)
    assert (log.unparsed_example is None) == (name not in UNPARSED)


def test_every_field_sample_is_covered():
    named = {p.name for p in REAL.glob("*.log") if not p.name[:2].isdigit()}  # NN_*: the gpud set, below
    assert named == set(EXPECTED)


def test_times_of_the_new_prefixes():
    talos = _read("talosctl_gsp_marked_for_reset_a100.log")
    assert talos.last_time == pytest.approx(calendar.timegm((2026, 4, 22, 21, 30, 51)) + 0.870495804)
    (sig,) = [e for e in talos.events if e.kind is D]
    assert sig.time == pytest.approx(calendar.timegm((2026, 4, 22, 21, 30, 51)) + 0.526447914)
    quoted = _read("pasted_diff_quote_dmesg_T_gpud.log")
    assert {e.time for e in quoted.events if e.code == 13} == {
        __import__("time").mktime((2024, 8, 30, 11, 43, 9, 0, 0, -1))}
    nohost = _read("journal_nohost_xid120_xid154_rtxpro6000.log")
    assert nohost.last_time == __import__("time").mktime((YEAR, 3, 29, 15, 38, 59, 0, 0, -1))


def test_driver_names_its_gpu_in_the_event():
    (first, _) = [e for e in _read("dmesg_rminitadapter_failed_gsp_timeout_h100.log").events]
    assert first.message.startswith("GPU 0000:a1:00.0: RmInitAdapter failed!")
    assert [e.device for e in _read("journal_reset_required_rtx5080.log").events] == ["GPU0"]


def test_every_signal_the_parser_names_has_a_catalog_verdict():
    table = signal_table()
    assert sorted(table) == sorted(name for name, _ in SIGNALS)
    # a GSP task watchdog is no error in the driver's own terms (crashcat: no Xid, GSP healthy)
    assert {n for n, i in table.items() if i.severity == "fail" and i.action.drains} == set(table) - {"gsp_watchdog"}
    assert table["gsp_watchdog"].severity == "warn" and not table["gsp_watchdog"].action.drains


# ---------------------------------------------------------------------- verdicts


def _judge(name: str, prev=None, gpus=None):
    log = _read(name)
    snap = healthy_node(time=log.last_time or T0)  # a recording is judged at its latest time
    snap.kernel = log
    return xid.CHECKS[0].judge(snap, context(xid.CHECKS[0], prev=prev, gpus=gpus) if gpus is not None
                               else context(xid.CHECKS[0], prev=prev))


def _fails(out):
    return [(r.subject, r.action, r.message) for r in out.results if r.status is Status.FAIL]


def test_journal_without_host_fails_the_node_with_the_reset_xid_154_asks_for():
    # Before: "PASS xid: no Xid in the last 24h", exit 0.
    # The Mar 27 crash (Xid 62, 154, 45) is more than 24 h before the log's latest line: outside.
    assert _fails(_judge("journal_nohost_xid120_xid154_rtxpro6000.log")) == [
        ("0000:01:00.0", Action.RESET_GPU, "Xid 120 on 0000:01:00.0: GSP error"),
        ("0000:01:00.0", Action.RESET_GPU, "Xid 154 on 0000:01:00.0: GPU recovery action changed")]


@pytest.mark.parametrize("name, subject, action, message", [
    ("talosctl_gsp_marked_for_reset_a100.log", "node", Action.RESET_GPU,
     "node: Repeated GSP RPC timeouts, GPU marked for reset (driver message, no Xid)"),
    ("dmesg_rminitadapter_failed_gsp_timeout_h100.log", "0000:a1:00.0", Action.DRAIN_REBOOT,
     "0000:a1:00.0: GPU failed to initialise (RmInitAdapter failed) x2 (driver message, no Xid)"),
    ("dmesg_T_reset_required_sichek.log", "node", Action.RESET_GPU,
     "node: Driver calls for a GPU reset (NV_ERR_RESET_REQUIRED) (driver message, no Xid)"),
    ("journal_reset_required_rtx5080.log", "node", Action.RESET_GPU,
     "node (the driver's GPU0): Driver calls for a GPU reset (NV_ERR_RESET_REQUIRED) (driver message, no Xid)"),
    ("journal_gpu_lost_dgx_station_a100.log", "node", Action.DRAIN_REBOOT,
     "node: GPU lost from the bus x3 (driver message, no Xid)"),
    # issue 19: an RTX 50 node whose GSP crashed with no Xid passed, exit 0
    ("journal_gsp_crashcat_watchdog_rtx5070ti.log", "node", Action.RESET_GPU,
     "node (the driver's GPU0): GSP firmware crash report (GSP-CrashCat) (driver message, no Xid)"),
    ("dmesg_gsp_heartbeat_timeout_595.log", "node", Action.RESET_GPU,
     "node (the driver's GPU6): GSP heartbeat timed out (GSP-RM hung) x2 (driver message, no Xid)"),
    ("dmesg_gsp_crashcat_xid120_rtx5080_laptop.log", "0000:01:00.0", Action.RESET_GPU,
     "0000:01:00.0: GSP firmware crash report (GSP-CrashCat) (driver message, no Xid)"),
])
def test_driver_signals_without_an_xid_fail_the_node(name, subject, action, message):
    # Before: a log with NV_ERR_RESET_REQUIRED and "GPU marked for reset" and no Xid passed.
    out = _judge(name)
    assert (subject, action, message) in _fails(out)
    again = _judge(name, prev=out.state)  # held like a draining Xid: the node stays drained
    assert (subject, action, message) in _fails(again)


def test_a_signal_on_a_gpu_nvml_knows_is_that_gpus_and_the_prolog_of_other_gpus_still_sees_unattributed_ones():
    from gpuhc.sources.kernel_log_parse import parse_lines

    snap = healthy_node(time=2000.0)  # gpu3 is 0000:5d:00.0
    snap.kernel = parse_lines(["[ 1999.0] NVRM: GPU 0000:5d:00.0: RmInitAdapter failed! (0x62:0x40:2168)",
                               "[ 1999.5] NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required "
                               "[NV_ERR_RESET_REQUIRED] (0x00000062) returned from status @ kernel_channel.c:2874"])
    out = xid.CHECKS[0].judge(snap, context(xid.CHECKS[0], gpus=[0, 1]))
    assert [r.subject for r in out.results if r.status is Status.FAIL] == ["node"]  # gpu3 is not the job's
    out = xid.CHECKS[0].judge(snap, context(xid.CHECKS[0], gpus=[3]))
    assert sorted(r.subject for r in out.results if r.status is Status.FAIL) == ["gpu3", "node"]


def test_redacted_pci_lines_warn_and_never_drain():
    # "NVRM: Xid (PCI:...): 79" is not what the driver prints: a person edited it. Text that is
    # not the driver's grammar may be read but never drains (docs/security.md): one warning
    # that quotes the first line and says why.
    out = _judge("redacted_pci_xid79_xid154_writeup.log")
    assert _fails(out) == []
    (warn,) = [r for r in out.results if r.status is Status.WARN]
    assert "2 kernel log line(s)" in warn.message and "NVRM: Xid (PCI:...): 79" in warn.message
    assert "never drain" in warn.message


def test_an_xid_154_that_says_none_clears_the_signal_before_it():
    from gpuhc.sources.kernel_log_parse import parse_lines

    snap = healthy_node(time=3000.0)
    snap.kernel = parse_lines([
        "[ 1000.0] NVRM: GPU 0000:5d:00.0: RmInitAdapter failed! (0x62:0x40:2168)",
        "[ 2000.0] NVRM: Xid (PCI:0000:5d:00): 154, GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)"])
    out = xid.CHECKS[0].judge(snap, context(xid.CHECKS[0]))
    assert [r.status for r in out.results] == [Status.PASS]


def test_a_gsp_watchdog_alone_warns_once_and_never_drains():
    from gpuhc.sources.kernel_log_parse import parse_lines

    snap = healthy_node(time=T0)
    snap.kernel = parse_lines(["Jun 12 16:28:53 fedora-box kernel: GSP task watchdog timeout @ pc:0x1a0d060, "
                               "partition:4#0, task:3"], year=YEAR)
    snap.time = snap.kernel.last_time
    out = xid.CHECKS[0].judge(snap, context(xid.CHECKS[0]))
    assert [(r.status, r.action) for r in out.results] == [(Status.WARN, Action.NONE)]
    assert "GSP task watchdog timeout" in out.results[0].message
    again = xid.CHECKS[0].judge(snap, context(xid.CHECKS[0], prev=out.state))
    assert [r.status for r in again.results] == [Status.PASS]


def test_processes_named_like_driver_lines_that_segfault_pass():
    # Real records of this host (see the fixtures' README): before, "NVRM Xid()79[6273]:
    # segfault" failed the node as a GPU fallen off the bus, and a root-written record too.
    out = _judge("kmsg_segfault_named_like_nvrm_and_user_records_this_host.log")
    assert [r.status for r in out.results] == [Status.PASS]


def test_each_signal_has_words_its_grammar_cannot_match_without():
    # The words stand before the pattern (kernel_log_grammar.MARKS): a word the pattern does not
    # require would make a real signal pass unseen; each word must be a literal of its pattern
    # (kept whole by the regex: no escapes inside it), and the real lines above still name their
    # signals through both.
    from gpuhc.sources.kernel_log_grammar import MARKS

    assert sorted(MARKS) == sorted(name for name, _ in SIGNALS)
    for name, rx in SIGNALS:
        for word in MARKS[name]:
            assert word in rx.pattern, (name, word)
        assert all(not any(c in w for c in "\\[]().*+?{}|^$") for w in MARKS[name]), name
