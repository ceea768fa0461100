"""Collecting the nodes' result files: the results directory is the job account's, so what is in
it is read bounded, never through a link, and only in the shape a canary run writes."""

from __future__ import annotations

import json
import os

from gpuhc.canary import fleet, status, submit
from gpuhc.cli.canary_cmd import STATUS
from gpuhc.canary.settings import SCHEMA

SETTINGS = {k: v.default for k, v in SCHEMA.items() if hasattr(v, "default")}
NOW = 1_800_000_000.0


def result(node: str, **over) -> dict:
    doc = {"node": node, "ended": NOW - 60, "injected": False, "error": None,
           "gpus": {"gpu0": {"key": "NVIDIA H100|sm132|driver 12080|cublas 1", "uuid": "GPU-1", "name": "NVIDIA H100",
                             "status": "pass", "message": "ok", "digests": {"bf16-exact-32": "0011f37093de0000"}}}}
    doc.update(over)
    return doc


def write(rdir, node: str, name: str, doc) -> str:
    d = rdir / node
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(d / name)


def test_result_files_that_are_links_huge_forged_or_malformed_are_skipped_and_said(tmp_path):
    rdir = tmp_path / "results"
    write(rdir, "n1", "a.json", result("n1"))
    write(rdir, "n2", "b.json", result("n1"))  # names another node
    write(rdir, "n3", "c.json", result("n3", ended="yesterday"))
    write(rdir, "n4", "d.json", result("n4", gpus={"gpu0": {"status": "pass", "digests": {"x": "not hex"}}}))
    write(rdir, "n5", "e.json", "{broken")
    (rdir / "n6").mkdir()
    os.symlink("/dev/zero", rdir / "n6" / "f.json")
    os.symlink(str(rdir / "n1"), rdir / "n7")  # a node directory that is a link
    big = write(rdir, "n8", "g.json", "")
    with open(big, "wb") as f:
        f.truncate(submit.MAX_RESULT_BYTES + 1)
    doc: dict = {}
    lines = submit.collect(doc, str(rdir), SETTINGS, NOW)
    assert list(doc["gpus"]) == ["n1/gpu0"]
    said = "\n".join(lines)
    for node, why in [("n2", "not a canary result of node n2"), ("n3", "no finite end time"),
                      ("n4", "digests are not 16 hex digits"), ("n5", "not valid JSON"), ("n6", "symbolic link"),
                      ("n7", "not a directory"), ("n8", "larger than")]:
        assert f"skipped {node}/" in said and why in said, (node, said)
    # each file is read once; the linked directory is said again, every time
    assert [line.split(":")[0] for line in submit.collect(doc, str(rdir), SETTINGS, NOW)] == ["skipped n7/"]


def test_text_from_result_files_is_escaped_in_the_status_table(tmp_path):
    rdir = tmp_path / "results"
    write(rdir, "n1", "a.json", result("n1", gpus={"gpu0": {"status": "fail", "message": "bad\x1b]0;owned\x07 bits",
                                                             "uuid": "GPU-\x1b[2J", "digests": {}}}))
    doc: dict = {}
    submit.collect(doc, str(rdir), SETTINGS, NOW)
    text = "\n".join(STATUS.lines([status.cells(r, NOW) for r in fleet.rows(doc, SETTINGS, NOW)], "node,gpu,uuid,finding",
                                   False, False))
    assert "\x1b" not in text and "\x07" not in text and "owned" in text


def test_slurm_down_keeps_what_was_collected_and_dry_run_writes_nothing(tmp_path):
    from gpuhc.sweep.slurmcli import SlurmCli

    cli = SlurmCli.from_section({"squeue": "/bin/false", "sinfo": "/bin/false"})
    section = {**SETTINGS, "job": {k: v.default for k, v in SCHEMA["job"].items()},
               "results_dir": str(tmp_path / "results")}
    write(tmp_path / "results", "n1", "a.json", result("n1"))
    state = str(tmp_path / "state")
    dry = submit.submit(section, state, cli, NOW, dry_run=True)
    assert dry["errors"][0].startswith("no canary jobs submitted: false -h -u") and fleet.store(state).read() == {}
    out = submit.submit(section, state, cli, NOW)
    assert out["errors"] and list(fleet.store(state).read()["gpus"]) == ["n1/gpu0"]
    assert json.loads((tmp_path / "results" / "known.json").read_text()) == {}
