"""State store: atomic, locked, and a corrupt file is rebuilt rather than a crash."""

from __future__ import annotations

import multiprocessing
import os

import pytest

from gpuhc.state import StateError, StateStore


def test_round_trip(tmp_path):
    store = StateStore(str(tmp_path / "s"))
    with store.transaction() as st:
        st["checks"] = {"xid": {"cursor": 5}}
    assert StateStore(str(tmp_path / "s")).read() == {"checks": {"xid": {"cursor": 5}}}


def test_exception_inside_transaction_writes_nothing(tmp_path):
    store = StateStore(str(tmp_path))
    with store.transaction() as st:
        st["a"] = 1
    with pytest.raises(RuntimeError):
        with store.transaction() as st:
            st["a"] = 2
            raise RuntimeError("boom")
    assert store.read() == {"a": 1}


@pytest.mark.parametrize("garbage", [b"{not json", b"[1, 2]", b"\xff\xfe\x00", b""])
def test_corrupt_file_is_reported_and_rebuilt(tmp_path, garbage):
    (tmp_path / "state.json").write_bytes(garbage)
    store = StateStore(str(tmp_path))
    with store.transaction() as st:
        assert st == {}
        st["ok"] = True
    assert store.problem and "rebuilt" in store.problem
    assert store.read() == {"ok": True}
    assert any(p.name.startswith("state.json.corrupt-") for p in tmp_path.iterdir())


def _bump(path: str, n: int) -> None:
    store = StateStore(path)
    for _ in range(n):
        with store.transaction() as st:
            st["count"] = st.get("count", 0) + 1


def test_concurrent_writers_lose_nothing(tmp_path):
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_bump, args=(str(tmp_path), 50)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert StateStore(str(tmp_path)).read()["count"] == 200


def test_lock_held_elsewhere_times_out_with_a_clear_error(tmp_path):
    import fcntl

    store = StateStore(str(tmp_path), lock_timeout_s=0.2)
    with store.transaction():
        pass
    fd = os.open(tmp_path / "state.lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        with pytest.raises(StateError, match="locked by another gpuhc process"):
            with store.transaction():
                pass
    finally:
        os.close(fd)


@pytest.mark.skipif(os.geteuid() != 0, reason="ownership rules apply when running as root")
def test_root_refuses_group_writable_state_dir(tmp_path):
    d = tmp_path / "state"
    d.mkdir()
    os.chmod(d, 0o777)
    with pytest.raises(StateError, match="not writable by"):
        with StateStore(str(d)).transaction():
            pass
