"""gpuhc/files/jsonstore.py: the locked JSON document under the node's state and the sweep index.
Each owner gets the same rules (atomic write, bounded read, corrupt copy set aside) under its
own names and errors."""

from __future__ import annotations

import os
import threading

import pytest

from gpuhc.files.jsonstore import JsonStoreError, LockedJson
from gpuhc.state.node import StateError, StateStore
from gpuhc.sweep.store import SweepStore, SweepStoreError


def _store(d, **kw):
    return LockedJson(str(d), "doc.json", "doc.lock", what="test document", max_bytes=4096, max_depth=8, **kw)


def test_transactions_do_not_lose_each_others_writes(tmp_path):
    def bump(i):
        for _ in range(20):
            with _store(tmp_path, lock_timeout_s=30.0).transaction() as doc:
                doc[str(i)] = doc.get(str(i), 0) + 1

    threads = [threading.Thread(target=bump, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert _store(tmp_path).read() == {str(i): 20 for i in range(4)}
    assert sorted(os.listdir(tmp_path)) == ["doc.json", "doc.lock"]


def test_a_failed_block_writes_nothing(tmp_path):
    with _store(tmp_path).transaction() as doc:
        doc["a"] = 1
    with pytest.raises(RuntimeError), _store(tmp_path).transaction() as doc:
        doc["a"] = 2
        raise RuntimeError("stop")
    assert _store(tmp_path).read() == {"a": 1}


def test_a_corrupt_document_is_set_aside_under_the_owners_name(tmp_path):
    (tmp_path / "doc.json").write_text("{not json")
    store = _store(tmp_path)
    with store.transaction() as doc:
        doc["fresh"] = True
    assert store.problem.startswith("test document file ") and "rebuilt from empty" in store.problem
    assert len([p for p in tmp_path.iterdir() if p.name.startswith("doc.json.corrupt-")]) == 1


def test_each_owner_raises_its_own_error(tmp_path):
    (tmp_path / "file").write_text("")
    for store, error in ((_store(tmp_path / "file"), JsonStoreError), (StateStore(str(tmp_path / "file")), StateError),
                         (SweepStore(str(tmp_path / "file")).index, SweepStoreError)):
        with pytest.raises(error), store.transaction():
            pass


def test_the_sweep_index_is_the_generic_store_with_its_old_file_names(tmp_path):
    """An index written before the store moved is read where it was; a FIFO planted in its place
    (the sweep directory may be the sweep account's) is set aside, never opened."""
    sweep = SweepStore(str(tmp_path))
    os.makedirs(sweep.root, mode=0o700)
    with open(os.path.join(sweep.root, "state.json"), "w") as f:
        f.write('{"current": "s1"}')
    assert sweep.read_index() == {"current": "s1"}
    os.unlink(os.path.join(sweep.root, "state.json"))
    os.mkfifo(os.path.join(sweep.root, "state.json"))
    with sweep.locked() as index:
        assert index == {}
        index["current"] = "s2"
    assert sweep.index.problem.startswith("sweep index file ")
    assert sweep.read_index() == {"current": "s2"}


def _fsyncs(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append(fd) or real(fd))
    return calls


def test_a_light_transaction_is_written_whole_without_fsync(tmp_path, monkeypatch):
    """Nothing flushed to disk that a crash may lose (issue 47): the document is still replaced
    whole; only the fsyncs are skipped, and only for the transaction that asked."""
    store = LockedJson(str(tmp_path), "doc.json", ".lock", what="test", max_bytes=1 << 20, max_depth=8)
    calls = _fsyncs(monkeypatch)
    with store.transaction() as doc:
        doc["kept"] = 1
    assert len(calls) == 2  # the file and its directory
    with store.transaction() as doc:
        doc["stamp"] = 2
        store.lightly()
    assert len(calls) == 2 and store.read() == {"kept": 1, "stamp": 2}
    with store.transaction() as doc:
        doc["kept"] = 3
    assert len(calls) == 4  # the next transaction is durable again
