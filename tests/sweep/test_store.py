"""Sweep files: atomic writes, safe ids, partial results merged after a hang, the index lock."""

from __future__ import annotations

import json
import os
import threading

import pytest

from gpuhc.sweep.store import (
    SweepStore,
    SweepStoreError,
    load_group_result,
    read_json,
    write_group_result,
    write_json_atomic,
)
from gpuhc.sweep.results import BadResults, merge_partials


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "r.json"
    write_json_atomic(str(path), {"v": 1})

    def boom(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(SweepStoreError, match="No space left"):
        write_json_atomic(str(path), {"v": 2})
    assert read_json(str(path)) == {"v": 1}
    assert os.listdir(tmp_path) == ["r.json"]


def test_readers_never_see_half_a_file(tmp_path):
    path = str(tmp_path / "r.json")
    big = {"sizes": [{"bytes": i, "pad": "x" * 200} for i in range(2000)]}
    write_json_atomic(path, big)
    stop = threading.Event()
    errors: list[Exception] = []

    def writer():
        while not stop.is_set():
            write_json_atomic(path, big)

    t = threading.Thread(target=writer)
    t.start()
    try:
        for _ in range(200):
            try:
                assert len(read_json(path)["sizes"]) == 2000
            except Exception as e:  # noqa: BLE001
                errors.append(e)
    finally:
        stop.set()
        t.join()
    assert errors == []


def test_ids_cannot_climb_out_of_the_results_directory(tmp_path):
    with pytest.raises(SweepStoreError, match="bad sweep id"):
        write_group_result(str(tmp_path), "../etc", "g0", {})
    with pytest.raises(SweepStoreError, match="bad group id"):
        load_group_result(str(tmp_path), "s1", "a/b")


def test_a_broken_results_file_is_named(tmp_path):
    os.makedirs(tmp_path / "s1")
    (tmp_path / "s1" / "g0.json").write_text("{not json")
    with pytest.raises(BadResults, match="g0.json: not valid JSON"):
        load_group_result(str(tmp_path), "s1", "g0")
    (tmp_path / "s1" / "g1.json").write_text('["a list"]')
    with pytest.raises(BadResults, match="g1.json: expected an object, got a list"):
        load_group_result(str(tmp_path), "s1", "g1")
    assert load_group_result(str(tmp_path), "s1", "g9") is None


def partial(rank, node, sizes, timeout=None, rank_nodes=("a", "a", "b", "b")):
    return {"rank": rank, "nranks": 4, "node": node, "local_rank": rank % 2, "rank_nodes": list(rank_nodes) if rank_nodes else None,
            "planned_nodes": ["a", "b"], "sweep_id": "s1", "group_id": "g0", "backend": "mpi", "started": 1.0,
            "sizes_done": [{"bytes": b, "iter_s": [1e-5, 2e-5], "mean_s": 1.5e-5, "correct": True} for b in sizes],
            "errors": [], "timeout": timeout}


def test_partials_after_a_hang_name_the_silent_node(tmp_path):
    t = {"bytes": 64, "seconds": 2.0}
    for r, node in ((0, "a"), (1, "a")):
        write_group_result(str(tmp_path), "s1", "g0", partial(r, node, [8, 16, 32], t), rank=r)
    res = load_group_result(str(tmp_path), "s1", "g0")
    assert res["timeouts"] == [{"bytes": 64, "ranks": [0, 1], "silent_ranks": [2, 3], "silent_nodes": ["b"]}]
    assert [row["bytes"] for row in res["sizes"]] == [8, 16, 32]
    assert res["complete"] is False and res["nodes"] == ["a", "b"]


def test_a_hang_before_names_were_exchanged_still_names_the_node():
    parts = [partial(0, "a", [], {"bytes": 0, "seconds": 5.0}, rank_nodes=None)]
    res = merge_partials(parts)
    assert res["timeouts"][0]["silent_nodes"] == ["b"] and res["timeouts"][0]["bytes"] == 0


def test_complete_merge_keeps_per_rank_and_per_node_detail():
    parts = [partial(r, n, [8, 1024]) for r, n in enumerate("aabb")]
    parts[3]["sizes_done"][1]["mean_s"] = 9e-5
    res = merge_partials(parts)
    row = res["sizes"][1]
    assert res["complete"] and res["ranks_per_node"] == {"a": 2, "b": 2}
    assert row["time_us"] == 90.0 and row["node_time_us"] == {"a": 15.0, "b": 90.0}
    assert len(row["rank_time_us"]) == 4 and row["correct"] is True


def test_index_transaction_persists_and_sweep_records_list(tmp_path):
    store = SweepStore(str(tmp_path))
    with store.locked() as idx:
        idx["current"] = "s1"
    assert store.read_index()["current"] == "s1"
    store.save_sweep({"id": "s1", "rounds": []})
    store.save_sweep({"id": "s2", "rounds": []})
    assert store.list_sweeps() == ["s1", "s2"]
    assert json.loads(open(store.sweep_path("s2")).read())["id"] == "s2"
    assert os.path.isdir(store.prepare_results("s2"))


def test_a_sweep_record_that_is_a_fifo_or_a_link_is_refused_not_read(tmp_path):
    """The sweep's files may belong to the sweep account, and `analyze --apply` runs as root:
    a FIFO would hang it, a link would make root read another file (docs/security.md)."""
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(SweepStoreError, match="not a regular file"):
        read_json(str(fifo))
    link = tmp_path / "link.json"
    os.symlink("/dev/zero", link)
    with pytest.raises(SweepStoreError, match="symbolic link"):
        read_json(str(link))
    assert read_json(str(tmp_path / "absent.json")) is None
