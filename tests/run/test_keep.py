"""What a run keeps in the node's state, and when it is flushed to disk (gpuhc/run/keep.py)."""

from __future__ import annotations

import os
import time

from gpuhc.run.report import RunReport
from gpuhc.run.keep import save_state
from gpuhc.sources import SourceSpec
from gpuhc.state.node import StateStore


def _save(store: StateStore, slices: dict, held: dict | None = None, spec: SourceSpec | None = None) -> None:
    report = RunReport(node="n1", stage="passive", started=time.time())
    save_state(store, slices, None, spec or SourceSpec(), report, held)
    assert not report.results, report.results


def test_a_run_that_changed_only_its_time_stamp_is_not_flushed_to_disk(tmp_path, monkeypatch):
    """Nothing flushed that a crash may lose (issue 47): last_run alone changed, no fsync; a
    check's slice, the held evidence or a replay's step changed, flushed."""
    calls: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append(fd) or real(fd))
    store = StateStore(str(tmp_path / "state"))
    _save(store, {"xid": {"cursor": 1}})
    flushed = len(calls)
    assert flushed == 2  # the file and its directory
    _save(store, {"xid": {"cursor": 1}})
    assert len(calls) == flushed
    assert store.read()["checks"] == {"xid": {"cursor": 1}} and store.read()["runner"]["last_run"]["stage"] == "passive"
    _save(store, {"xid": {"cursor": 2}})
    assert len(calls) == flushed + 2
    _save(store, {"xid": {"cursor": 2}}, held={"xid/gpu0": {"since": 1.0}})
    assert len(calls) == flushed + 4
    _save(store, {"xid": {"cursor": 2}}, spec=SourceSpec(nvml_scenario="/x.yaml"))  # a replay's step moved
    assert len(calls) == flushed + 6
