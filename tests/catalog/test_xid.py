"""The XID/SXid catalogs (data + strict loader) and `gpuhc explain`."""

from __future__ import annotations

import json
import textwrap

import pytest
from click.testing import CliRunner

from gpuhc.catalog import xid as cat
from gpuhc.cli.explain_cmd import explain
from gpuhc.errors import ConfigError
from gpuhc.model.result import Action

# The XIDs the field cares about (brief + NVIDIA's catalog); each must have a deliberate entry.
FIELD_XIDS = (13, 31, 32, 38, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 109, 119, 120, 121,
              122, 123, 136, 140, 143, *range(144, 151), 154)


@pytest.mark.parametrize("code", FIELD_XIDS)
def test_field_xids_are_known(code):
    info = cat.xid_info(code)
    assert info.known and info.name and info.meaning


@pytest.mark.parametrize("code,severity,action", [
    (13, "warn", Action.RESTART_APP), (31, "warn", Action.RESTART_APP), (43, "warn", Action.RESTART_APP),
    (45, "warn", Action.RESTART_APP), (68, "warn", Action.RESTART_APP), (94, "warn", Action.RESTART_APP),
    (48, "fail", Action.RESET_GPU), (63, "fail", Action.RESET_GPU), (64, "fail", Action.DRAIN_TICKET),
    (74, "fail", Action.RESET_GPU), (79, "fail", Action.DRAIN_REBOOT), (92, "warn", Action.NONE),
    (95, "fail", Action.RESET_GPU), (119, "fail", Action.RESET_GPU), (120, "fail", Action.RESET_GPU),
    (140, "fail", Action.RESET_GPU), (106, "ignore", Action.NONE),
])
def test_verdicts_of_well_known_xids(code, severity, action):
    info = cat.xid_info(code)
    assert (info.severity, info.action) == (severity, action)


def test_application_xids_are_marked_and_never_drain():
    apps = [i for i in cat.xid_table().values() if i.app]
    assert {13, 31, 43, 45, 68} <= {i.code for i in apps}
    assert all(i.severity == "warn" and not i.action.drains for i in apps)


def test_every_entry_is_consistent():
    for info in cat.xid_table().values():
        assert info.action.drains == (info.severity == "fail"), info


def test_unknown_xid_warns_without_draining():
    info = cat.xid_info(100_000)
    assert (info.known, info.severity, info.action, info.code) == (False, "warn", Action.NONE, 100_000)


def test_sxid_lookup():
    assert cat.sxid_info(20034).fatal and cat.sxid_info(26006).fatal
    # the driver reports 12028 only "Non-fatal" (tests/catalog/test_xid_nvswitch.py)
    assert not cat.sxid_info(22013).fatal and not cat.sxid_info(11012).fatal and not cat.sxid_info(12028).fatal
    assert cat.sxid_info(20034).action is Action.DRAIN_REBOOT
    unknown = cat.sxid_info(99999)
    assert (unknown.known, unknown.fatal) == (False, False)


@pytest.mark.parametrize("message,action", [
    ("GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)", Action.RESET_GPU),
    ("GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)", Action.DRAIN_REBOOT),
    ("GPU recovery action changed from 0x0 (None) to 0x3 (Drain P2P)", Action.RESET_GPU),
    ("GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)", Action.NONE),
    ("something else entirely", None),
])
def test_xid_154_recovery_action(message, action):
    assert cat.recovery_action(message) is action


def test_parse_codes():
    assert cat.parse_codes(13) == [13]
    assert cat.parse_codes("39-41, 70") == [39, 40, 41, 70]
    with pytest.raises(ConfigError, match="bad code '5-2'"):
        cat.parse_codes("5-2", "f.yaml", "xids")


def _write(tmp_path, body: str):
    p = tmp_path / "cat.yaml"
    p.write_text(textwrap.dedent(body))
    return p


GOOD_DEFAULT = """\
default: {name: unknown, meaning: not known, severity: warn, action: none}
"""


@pytest.mark.parametrize("xids,match", [
    ("13: {name: a, meaning: b, severity: fatal, action: none}", r"xids\.13\.severity: severity must be"),
    ("13: {name: a, meaning: b, severity: fail, action: restart app}", r"xids\.13\.action: a fail needs a draining"),
    ("13: {name: a, meaning: b, severity: warn, action: reset GPU}", r"a warn must not drain"),
    ("13: {name: a, meaning: b, severity: warn, action: reboot}", r"action must be one of"),
    ("13: {meaning: b, severity: warn, action: none}", r"xids\.13\.name: name must be"),
    ("'1-3': {name: a, meaning: b, severity: warn, action: none}\n  2: {name: a, meaning: b, severity: warn, action: none}",
     r"Xid 2 listed twice"),
    ("13: [not, a, mapping]", r"xids\.13: must be a mapping"),
    ("13: {name: a, meaning: b, severity: warn, action: none, drain_after: 2}", r"xids\.13\.drain_after: .*only a fail"),
    ("13: {name: a, meaning: b, severity: fail, action: reset GPU, drain_after: 0}", r"drain_after must be a whole"),
    ("13: {name: a, meaning: b, severity: fail, action: reset GPU, drain_after: true}", r"drain_after must be a whole"),
])
def test_loader_rejects_bad_entries_naming_file_and_key(tmp_path, xids, match):
    p = _write(tmp_path, GOOD_DEFAULT + "xids:\n  " + xids + "\n")
    with pytest.raises(ConfigError, match=match) as e:
        cat.load_xid_catalog(p)
    assert str(p) in str(e.value)


def test_loader_reports_yaml_line(tmp_path):
    p = _write(tmp_path, GOOD_DEFAULT + "xids:\n  13: {name: [unclosed\n")
    with pytest.raises(ConfigError, match=r"cat\.yaml:\d+: invalid YAML"):
        cat.load_xid_catalog(p)


def test_sxid_loader_rejects_non_boolean_fatal(tmp_path):
    p = _write(tmp_path, "default: {name: u, meaning: m, fatal: false}\nsxids:\n  1: {name: a, meaning: b, fatal: maybe}\n")
    with pytest.raises(ConfigError, match=r"sxids\.1\.fatal"):
        cat.load_sxid_catalog(p)


def test_missing_catalog_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read catalog"):
        cat.load_xid_catalog(tmp_path / "none.yaml")


# ---------------------------------------------------------------------- gpuhc explain


def run(*args):
    res = CliRunner().invoke(explain, list(args))
    return res.exit_code, res.output


def test_explain_one_xid_plain():
    rc, out = run("xid", "79")
    assert rc == 0
    assert out.splitlines()[0] == "Xid 79: GPU has fallen off the bus"
    assert "FAIL, action: drain + reboot" in out and "meaning:" in out


def test_explain_application_xid_and_unknown():
    assert "WARN, action: restart app (application error)" in run("xid", "13")[1]
    rc, out = run("xid", "4242")
    assert rc == 0 and "not in gpuhc's catalog" in out and "WARN, action: none" in out


def test_explain_sxid():
    rc, out = run("sxid", "20034")
    assert rc == 0 and out.startswith("SXid 20034: LTSSM fault (link went down)") and "drain + reboot" in out
    assert "WARN (non-fatal)" in run("SXID", "22013")[1]


def test_explain_whole_table():
    rc, out = run("xid")
    lines = out.splitlines()
    assert rc == 0 and len(lines) == len(cat.xid_table())
    assert any(line.split()[:2] == ["Xid", "119"] and "reset GPU" in line for line in lines)


def test_explain_json():
    one = json.loads(run("xid", "48", "--json")[1])
    assert one["xid"] == 48 and one["action"] == "reset GPU" and one["known"] is True
    table = json.loads(run("sxid", "--json")[1])
    assert {e["sxid"] for e in table} >= {12028, 20034, 22013}


def test_explain_bad_arguments_are_usage_errors():
    assert run("foo")[0] == 2
    assert run("xid", "abc")[0] == 2
    assert run("xid", "-1")[0] == 2


def test_explain_rich_rendering(capsys):
    """On a terminal the table and the entry are drawn with rich (called directly: no TTY here)."""
    from gpuhc.cli.explain_cmd import _entries, _rich

    _rich("xid", _entries("xid", None), single=False)
    _rich("sxid", _entries("sxid", 20034), single=True)
    out = capsys.readouterr().out
    assert "gpuhc Xid catalog" in out and "GSP RPC timeout" in out
    assert "SXid 20034" in out and "LTSSM fault" in out


def test_explain_driver_signals():
    rc, out = run("signal")
    assert rc == 0 and len(out.splitlines()) == len(cat.signal_table())
    rc, out = run("signal", "reset_required")
    assert rc == 0 and out.splitlines()[0] == "Driver signal reset_required: Driver calls for a GPU reset (NV_ERR_RESET_REQUIRED)"
    assert "FAIL, action: reset GPU" in out
    assert json.loads(run("signal", "gpu_lost", "--json")[1])["action"] == "drain + reboot"
    rc, out = run("signal", "banana")
    assert rc == 2 and "no driver signal" in out


def test_109_and_119_wait_for_a_repeat_and_explain_says_so():
    for code in (109, 119):
        info = cat.xid_info(code)
        assert (info.severity, info.action, info.drain_after) == ("fail", Action.RESET_GPU, 2)
        assert info.to_dict()["drain_after"] == 2
    assert "drain_after" not in cat.xid_info(79).to_dict()
    code, out = run("xid", "119")
    assert code == 0 and "gpuhc:   WARN; FAIL at 2 on one GPU in the window, action: reset GPU" in out
