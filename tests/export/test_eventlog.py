"""The JSON-lines event log: one whole line per run, even with concurrent writers."""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import stat

from gpuhc.export import eventlog
from gpuhc.export.eventlog import append_event, encode_line


def report(i: int = 0, pad: int = 0) -> dict:
    return {"node": "gpu001", "stage": "passive", "started": 1700000000.0 + i, "duration_s": 0.5,
            "status": "fail", "exit_code": 1, "timed_out": [],
            "results": [{"check": "xid", "status": "fail", "subject": "gpu3", "message": "x" * pad,
                         "value": 79, "threshold": None, "action": "drain + hardware ticket"}]}


def test_appends_one_json_line_per_run_and_creates_dirs(tmp_path):
    path = tmp_path / "a" / "b" / "events.jsonl"
    old = os.umask(0o077)  # the modes must not depend on root's umask
    try:
        assert append_event(str(path), report(1)) is None
        assert append_event(str(path), report(2)) is None
    finally:
        os.umask(old)
    lines = path.read_text().splitlines()
    assert len(lines) == 2
    docs = [json.loads(line) for line in lines]
    assert [d["started"] for d in docs] == [1700000001.0, 1700000002.0]
    assert docs[0]["results"][0]["check"] == "xid" and "logged_at" in docs[0]
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert stat.S_IMODE(path.parent.stat().st_mode) == stat.S_IMODE(path.parent.parent.stat().st_mode) == 0o755


def test_odd_values_still_give_valid_json():
    doc = json.loads(encode_line({"node": "n\n1", "value": float("nan"), "inf": [float("inf")], "obj": object(),
                                  "text": "ünï"}))
    assert doc["node"] == "n\n1" and doc["value"] is None and doc["inf"] == [None]
    assert doc["obj"].startswith("<object object")
    line = encode_line({"text": "ünï\nx"})
    assert line.count(b"\n") == 1 and line.endswith(b"\n") and line.isascii()


def test_never_raises_on_a_bad_place(tmp_path):
    (tmp_path / "dir").mkdir()
    err = append_event(str(tmp_path / "dir"), report())  # a directory where the file should be
    assert err and str(tmp_path / "dir") in err and "Is a directory" in err
    (tmp_path / "file").write_text("")
    err = append_event(str(tmp_path / "file" / "events.jsonl"), report())  # a file where a dir should be
    assert err and "events.jsonl" in err


def test_full_disk_is_reported_not_raised(tmp_path, monkeypatch):
    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(eventlog.os, "write", full)
    err = append_event(str(tmp_path / "events.jsonl"), report())
    assert err == f"event log {tmp_path / 'events.jsonl'}: No space left on device (ENOSPC)"


def test_short_write_is_reported(tmp_path, monkeypatch):
    monkeypatch.setattr(eventlog.os, "write", lambda fd, data: len(data) // 2)
    err = append_event(str(tmp_path / "events.jsonl"), report())
    assert err and "short write" in err


def _writer(path: str, who: int, n: int) -> None:
    for i in range(n):
        assert append_event(path, report(who * 1000 + i, pad=70_000)) is None


def test_concurrent_writers_never_interleave(tmp_path):
    """Lines far larger than PIPE_BUF (4 KiB), four processes at once: every line stays whole."""
    path = str(tmp_path / "events.jsonl")
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(path, who, 25)) for who in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    with open(path) as f:
        docs = [json.loads(line) for line in f]
    assert len(docs) == 100
    assert sorted(d["started"] for d in docs) == sorted(1700000000.0 + w * 1000 + i for w in range(4) for i in range(25))


# ---------------------------------------------------------------------------- the Slurm record


def test_the_slurm_record_reads_back_typed(tmp_path):
    from gpuhc.export.eventlog import SlurmPart, read_records, run_record

    part = SlurmPart(action="drain", why="failing checks", reason="gpuhc: xid79 gpu3", acted=True,
                     breaker={"open": False, "drained": 1, "cap": 5}, fault={"node": "gpu001"})
    path = str(tmp_path / "events.jsonl")
    assert append_event(path, run_record(report(), part)) is None
    assert append_event(path, report(1)) is None  # a plain `gpuhc check` line: no slurm part
    problems: list[str] = []
    got = list(read_records([path], b'"slurm":', problems))
    assert problems == [] and len(got) == 1
    r = got[0]
    assert (r.node, r.started, r.stage, r.time) == ("gpu001", 1700000000.0, "passive", 1700000000.0)
    assert r.slurm == part and r.logged_at is not None


def test_a_slurm_record_of_the_wrong_shape_is_skipped_and_said(tmp_path):
    """A shipped log is anyone's file: a field of the wrong type is no record, and says where."""
    from gpuhc.export.eventlog import read_records

    path = tmp_path / "events.jsonl"
    lines = [{"node": "a", "started": "yesterday", "slurm": {"action": "drain"}},
             {"node": "b", "started": 1.0, "slurm": {"action": "drain", "reason": ["not", "text"]}},
             {"node": "c", "started": 2.0, "slurm": {"action": "drain", "acted": "yes", "breaker": None}},
             {"started": 3.0, "slurm": {"action": "drain"}}]
    path.write_text("".join(json.dumps(d) + "\n" for d in lines))
    problems: list[str] = []
    got = list(read_records([str(path)], b"drain", problems))
    assert [(r.node, r.slurm.acted) for r in got] == [("c", False)]  # only a JSON true is "acted"
    assert len(problems) == 3 and all(p.startswith(f"{path}: a line that is not a gpuhc event") for p in problems)
