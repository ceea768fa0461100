"""``gpuhc canary run`` end to end on the fake GPU: the real parent, worker protocol and CLI;
exit codes, the result file, the epilog's --if-due, a hung GPU, bad options."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from gpuhc.canary import node
from gpuhc.canary.schedule import Cadence
from gpuhc.model.result import Status
from tests.helpers.canary_fake import REPO, worker_argv

FAKE = f"{REPO}/tests/helpers/canary_fake.py"


def setup(tmp_path, spec: dict, **canary) -> tuple[str, str]:
    cfg = {"state_dir": str(tmp_path / "state"),
           "canary": {"cases": ["bf16-exact-32", "fp32-random-32"], "repeats": 2, **canary}}
    (tmp_path / "gpuhc.yaml").write_text(yaml.safe_dump(cfg))
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    return str(tmp_path / "gpuhc.yaml"), str(tmp_path / "spec.json")


def gpuhc(cfg: str, spec: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, FAKE, "--cli", spec, "canary", *args, "--config", cfg],
                          capture_output=True, text=True, timeout=120)


def test_healthy_node_passes_writes_its_result_and_its_stamp(tmp_path):
    cfg, spec = setup(tmp_path, {"gpus": 2})
    r = gpuhc(cfg, spec, "run", "--results-dir", str(tmp_path / "res"), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [x["status"] for x in doc["results"]] == ["pass", "pass"]
    saved = json.loads(open(doc["file"]).read())
    assert saved["node"] == doc["node"] and set(saved["gpus"]) == {"gpu0", "gpu1"}
    assert (tmp_path / "state" / node.LAST_FILE).exists()
    # the epilog slice: not due now, so nothing runs
    again = gpuhc(cfg, spec, "run", "--if-due", "--epilog")
    assert again.returncode == 0 and "not due" in again.stdout


def test_a_confirmed_corruption_exits_1_and_names_it(tmp_path):
    cfg, spec = setup(tmp_path, {"gpus": 2, "sick": {"gpu1": {"case": "bf16-exact-32", "word": 33, "bit": 1}}})
    r = gpuhc(cfg, spec, "run")
    assert r.returncode == 1, r.stderr
    assert "FAIL  canary gpu1: silent data corruption confirmed" in r.stdout and "C[1,1] bit 1 (mantissa)" in r.stdout


def test_an_injected_flip_is_caught_and_leaves_no_stamp(tmp_path):
    cfg, spec = setup(tmp_path, {"gpus": 1})
    r = gpuhc(cfg, spec, "run", "--inject", "gpu0:fp32-random-32:5:9", "--json")
    doc = json.loads(r.stdout)
    assert r.returncode == 0 and doc["injected"] is True
    assert doc["results"][0]["status"] == "warn" and "C[0,5] bit 9" in doc["results"][0]["message"]
    assert not (tmp_path / "state" / node.LAST_FILE).exists()


@pytest.mark.parametrize("args,what", [
    (["--cases", "int4-random-32"], "--cases"),
    (["--inject", "gpu0:bf16-exact-32:x:1"], "--inject"),
    (["--inject", "gpu0:bf16-exact-32:1:40"], "--inject"),
])
def test_bad_options_exit_2_naming_the_option(tmp_path, args, what):
    cfg, spec = setup(tmp_path, {"gpus": 1})
    r = gpuhc(cfg, spec, "run", *args)
    assert r.returncode == 2 and what in r.stderr and "Traceback" not in r.stderr


def test_a_bad_case_in_the_config_is_a_config_error(tmp_path):
    cfg, spec = setup(tmp_path, {"gpus": 1}, cases=["bf16-exact-0"])
    r = gpuhc(cfg, spec, "run")
    assert r.returncode == 2 and "canary" in r.stderr and "cases" in r.stderr


def test_a_hung_gpu_is_an_error_never_a_verdict(tmp_path):
    node.WORKER_ARGV = worker_argv({"gpus": 1, "delay_s": 60})
    try:
        r = node.run({"cases": ["fp32-random-32"], "seed": 1, "repeats": 1, "known": {}}, 3.0)
    finally:
        node.WORKER_ARGV = None
    assert [x.status for x in r.results] == [Status.ERROR] and "timed out" in r.error


def test_a_gpu_held_by_another_process_is_skipped(tmp_path):
    node.WORKER_ARGV = worker_argv({"gpus": 2, "procs": {"gpu1": [{"pid": 4242, "name": "python"}]}})
    try:
        r = node.run({"cases": ["fp32-random-32"], "seed": 1, "repeats": 1, "known": {}}, 30.0)
    finally:
        node.WORKER_ARGV = None
    assert [(x.subject, x.status) for x in r.results] == [("gpu0", Status.PASS), ("gpu1", Status.ERROR)]


def test_known_answers_that_are_not_json_are_refused(tmp_path):
    cfg, spec = setup(tmp_path, {"gpus": 1})
    (tmp_path / "known.json").write_text("{not json")
    r = gpuhc(cfg, spec, "run", "--known", str(tmp_path / "known.json"))
    assert r.returncode != 0 and "not valid JSON" in r.stderr and "Traceback" not in r.stderr


def test_the_epilog_slice_runs_its_short_cases_only_when_due_by_stamp_or_result_file(tmp_path):
    cfg, spec = setup(tmp_path, {"gpus": 1}, epilog={"cases": ["fp32-exact-32"], "max_seconds": 30},
                      results_dir=str(tmp_path / "res"))
    first = gpuhc(cfg, spec, "run", "--epilog", "--if-due", "--json")
    doc = json.loads(first.stdout)
    assert first.returncode == 0 and doc["cases"] == ["fp32-exact-32"] and doc["file"].startswith(str(tmp_path / "res"))
    assert "not due" in gpuhc(cfg, spec, "run", "--epilog", "--if-due").stdout
    # a canary job's result file counts as the node's last run even without a local stamp
    (tmp_path / "state" / node.LAST_FILE).unlink()
    assert not node.due(str(tmp_path / "state"), Cadence(), str(tmp_path / "res"), doc["node"])
    assert node.due(str(tmp_path / "state"), Cadence(), str(tmp_path / "res"), "another-node")


def test_the_slice_keeps_the_short_cadence_after_an_unconfirmed_mismatch_on_its_node(tmp_path):
    """A GPU whose mismatch the retest did not reproduce is suspect: the fleet runs it every
    suspect_period_h for suspect_days (gpuhc.canary.schedule). A node that never idles gets only
    the slice, so its stamp keeps that standing and --if-due follows it."""
    from gpuhc.model.result import Result

    state, c = str(tmp_path / "state"), Cadence(period_h=24.0, suspect_period_h=2.0, suspect_days=7.0)

    def ran(*statuses: Status) -> float:
        r = node.Run("n1", 0.0, {}, results=[Result("canary", s, "x", f"gpu{i}") for i, s in enumerate(statuses)])
        assert node.write_last(state, r, c) is None
        return node.read_stamp(state)["ended"]

    t = ran(Status.PASS, Status.PASS)
    assert not node.due(state, c, now=t + 3 * 3600) and node.due(state, c, now=t + 24 * 3600)
    t = ran(Status.PASS, Status.WARN)
    assert node.due(state, c, now=t + 2 * 3600) and not node.due(state, c, now=t + 3600)
    t = ran(Status.PASS, Status.PASS)  # a clean run inside the window keeps it suspect
    assert node.due(state, c, now=t + 2 * 3600)
    stamp = json.loads((tmp_path / "state" / node.LAST_FILE).read_text())
    stamp["suspect_until_h"] = t / 3600.0 - 1  # the window has passed: the next run clears it
    (tmp_path / "state" / node.LAST_FILE).write_text(json.dumps(stamp))
    t = ran(Status.PASS, Status.PASS)
    assert not node.due(state, c, now=t + 3 * 3600)
    (tmp_path / "state" / node.LAST_FILE).write_text('{"ended": 5, "status": "suspect", "suspect_until_h": "x"}')
    assert node.read_stamp(state) == {"ended": 5.0}  # a damaged standing is read as none
