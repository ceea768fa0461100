"""DCGM diagnostics: the JSON parser over gpuhc's own fixtures (tests/fixtures/dcgm) and over the
real-world samples in /work/shared/realdata/dcgm (skipped only where that folder is absent; it
is present in CI), and the dcgmi runner against fake executables (the boundary to DCGM)."""

from __future__ import annotations

import json
import os
import sys

import pytest
from tests.helpers.paths import FIXTURES
from tests.helpers.realdata import ROOT as REALDATA_ROOT

from gpuhc.active import dcgm
from gpuhc.model.result import Action, Status

DCGM = os.path.join(FIXTURES, "dcgm")
REALDATA = str(REALDATA_ROOT / "dcgm")


def _doc(name: str) -> dict:
    with open(os.path.join(DCGM, name), encoding="utf-8") as f:
        return dcgm.parse_json_text(f.read())


def test_passing_dcgm4_run_with_entity_ids():
    doc = _doc("pass_r1_dcgm4_two_gpus.json")
    items = dcgm.tests(doc)
    assert [(t["test"], t["gpus"], t["status"]) for t in items] == [
        ("software", [], "pass"), ("memory", [0], "pass"), ("memory", [1], "pass"), ("eud", [0], "skip")]
    (r,) = dcgm.judge(doc, {}, 1)
    assert r.status is Status.PASS and r.message == "dcgmi diag -r 1: 3 pass, 1 skip"


def test_failing_memory_test_drains_for_a_ticket_and_thermal_warning_warns():
    res = dcgm.judge(_doc("fail_memory_r3_dcgm3.json"), {}, 3)
    by = {r.status: r for r in res}
    fail = by[Status.FAIL]
    assert fail.subject == "gpu1" and fail.action is Action.DRAIN_TICKET
    assert fail.message.startswith("dcgmi diag -r 3: Hardware/GPU Memory failed on gpu1: Error using CUDA API")
    assert "Found 2 miscompares" in fail.message
    warn = by[Status.WARN]
    assert warn.subject == "gpu0,gpu1" and "Thermal violations totaling 3.1 seconds" in warn.message
    assert warn.action is Action.NONE


def test_warnings_can_be_made_failures():
    res = dcgm.judge(_doc("fail_memory_r3_dcgm3.json"), {"warn_is_fail": True}, 3)
    assert [r.status for r in res] == [Status.FAIL, Status.FAIL]


def test_pending_row_remap_asks_for_a_reset_and_text_before_the_json_is_skipped():
    (r,) = dcgm.judge(_doc("fail_row_remap_dcgm4.json"), {}, 2)
    assert r.status is Status.FAIL and r.action is Action.RESET_GPU and r.subject == "gpu3"
    assert "row remapping is pending" in r.message


def test_deployment_failures_are_errors_not_verdicts():
    (r,) = dcgm.judge(_doc("fail_cuda_library_dcgm3.json"), {}, 2)
    assert r.status is Status.ERROR and r.action is Action.NONE
    assert "Deployment/CUDA Main Library failed on node: Cannot load libcuda.so.1" in r.message


def test_runtime_error_and_garbage():
    (r,) = dcgm.judge(_doc("runtime_error_dcgm4.json"), {}, 2)
    assert r.status is Status.ERROR and "unable to establish a connection" in r.message
    with pytest.raises(dcgm.DcgmParseError, match="no JSON"):
        dcgm.parse_json_text("Error: DCGM is not installed\n")
    with pytest.raises(dcgm.DcgmParseError, match="unreadable JSON"):
        dcgm.parse_json_text('{"DCGM Diagnostic": {"test_categories": [}')
    (r,) = dcgm.judge({"something": 1}, {}, 2)
    assert r.status is Status.ERROR and "no 'DCGM Diagnostic' section" in r.message


# ------------------------------------------------------------------------------- real-world samples


@pytest.mark.skipif(not os.path.isdir(REALDATA), reason="reads /work/shared/realdata/dcgm (absent here)")
@pytest.mark.parametrize("name,status,passes", [
    ("01_dcgmi_diag_r2_pass_dcgm3_single_gpu_virtualclient.json", Status.PASS, 11),
    ("02_dcgmi_diag_r3_pass_with_skip_dcgm3_single_gpu_virtualclient.json", Status.PASS, 15),
])
def test_realdata_passing_runs(name, status, passes):
    """Real `dcgmi diag -j` outputs (DCGM 3, one GPU) from the shared realdata folder."""
    with open(os.path.join(REALDATA, name), encoding="utf-8") as f:
        doc = dcgm.parse_json_text(f.read())
    (r,) = dcgm.judge(doc, {}, None)
    assert r.status is status and r.value["pass"] == passes


@pytest.mark.skipif(not os.path.isdir(REALDATA), reason="reads /work/shared/realdata/dcgm (absent here)")
def test_realdata_edited_fixture_without_the_test_categories_wrapper():
    """The hand-edited realdata sample puts the category list straight under the top key and
    fails the CUDA library check: read leniently, judged as 'could not test', never a drain."""
    path = os.path.join(REALDATA, "04_dcgmi_diag_fixture_edited_malformed_fail_cuda_lib_virtualclient.json")
    with open(path, encoding="utf-8") as f:
        doc = dcgm.parse_json_text(f.read())
    (r,) = dcgm.judge(doc, {}, None)
    assert r.status is Status.ERROR and "CUDA Main Library" in r.message and "libcuda.so" in r.message


# ------------------------------------------------------------------------------- running dcgmi


def _fake_dcgmi(tmp_path, body: str):
    exe = tmp_path / "dcgmi"
    exe.write_text(f"#!{sys.executable}\n{body}\n")
    exe.chmod(0o755)
    return str(exe)


def test_run_passes_level_and_json_flag(tmp_path):
    out = tmp_path / "argv.json"
    fixture = os.path.join(DCGM, "fail_memory_r3_dcgm3.json")
    exe = _fake_dcgmi(tmp_path, f"import sys, json\njson.dump(sys.argv[1:], open({str(out)!r}, 'w'))\n"
                                f"sys.stdout.write(open({fixture!r}).read())\nsys.exit(226)")
    res = dcgm.run(3, 10.0, exe, {})
    assert json.loads(out.read_text()) == ["diag", "-r", "3", "-j"]
    assert Status.FAIL in {r.status for r in res}  # the exit status is ignored, the JSON decides


def test_run_timeout_missing_and_broken(tmp_path, monkeypatch):
    slow = _fake_dcgmi(tmp_path, "import time\ntime.sleep(30)")
    (r,) = dcgm.run(2, 0.5, slow, {})
    assert r.status is Status.ERROR and r.message == "dcgmi diag -r 2 timed out after 0s"
    (r,) = dcgm.run(2, 5.0, str(tmp_path / "absent"), {})
    assert r.status is Status.ERROR and "not executable" in r.message
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(dcgm, "SEARCH", ())
    (r,) = dcgm.run(2, 5.0, None, {})
    assert r.status is Status.NA and r.message == "DCGM not installed (no dcgmi)"
    noise = _fake_dcgmi(tmp_path, "import sys\nsys.stderr.write('Error: host engine down\\n')\nsys.exit(255)")
    (r,) = dcgm.run(2, 5.0, noise, {})
    assert r.status is Status.ERROR and "(exit 255): no JSON in the output: Error: host engine down" in r.message
