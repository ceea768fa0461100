"""State store: atomic, locked, and a corrupt file is rebuilt rather than a crash."""

from __future__ import annotations

import multiprocessing
import os

import pytest

from gpuhc.state.node import StateError, StateStore


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
    with pytest.raises(StateError, match=f"refusing state directory: {d} is writable by group or others"):
        with StateStore(str(d)).transaction():
            pass


@pytest.mark.skipif(os.geteuid() != 0, reason="ownership rules apply when running as root")
def test_root_refuses_a_state_dir_inside_a_directory_someone_else_owns(tmp_path):
    """Whoever owns a directory above the state can swap the state directory for their own."""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chown(shared, 65534, 65534)
    with pytest.raises(StateError, match=f"{shared} is owned by uid 65534, not root"):
        with StateStore(str(shared / "state")).transaction():
            pass
    assert not (shared / "state").exists()  # root made nothing inside it


def test_a_new_state_dir_is_private_whatever_the_umask(tmp_path):
    old = os.umask(0)
    try:
        with StateStore(str(tmp_path / "a" / "state")).transaction() as st:
            st["x"] = 1
    finally:
        os.umask(old)
    assert oct((tmp_path / "a" / "state").stat().st_mode & 0o777) == "0o700"


def test_corrupt_copies_are_never_overwritten_and_only_the_newest_are_kept(tmp_path):
    """Three corruptions within one second keep three copies, the first garbage included;
    past CORRUPT_KEEP, the oldest copies go."""
    from gpuhc.state.node import CORRUPT_KEEP

    def corrupt_and_repair(garbage: bytes) -> None:
        (tmp_path / "state.json").write_bytes(garbage)
        with StateStore(str(tmp_path)).transaction():
            pass

    for i in range(3):
        corrupt_and_repair(b"garbage %d" % i)
    copies = sorted(p for p in tmp_path.iterdir() if p.name.startswith("state.json.corrupt-"))
    assert sorted(p.read_bytes() for p in copies) == [b"garbage 0", b"garbage 1", b"garbage 2"]
    for i in range(3, CORRUPT_KEEP + 4):
        corrupt_and_repair(b"garbage %d" % i)
    kept = sorted((p for p in tmp_path.iterdir() if p.name.startswith("state.json.corrupt-")),
                  key=lambda p: int(p.name.rsplit("-", 1)[1]))
    assert [p.read_bytes() for p in kept] == [b"garbage %d" % i for i in range(4, CORRUPT_KEEP + 4)]


def test_atomic_write_never_follows_a_planted_link(tmp_path):
    """The temporary name is fresh and opened O_EXCL|O_NOFOLLOW: whatever links sit in the
    directory, only the target is replaced and the link's target is untouched."""
    from gpuhc.files.fsutil import write_atomic

    victim = tmp_path / "victim"
    victim.write_text("keep")
    for pid in range(os.getpid() - 2, os.getpid() + 3):  # predictable names of the old scheme
        (tmp_path / f".out.{pid}.tmp").symlink_to(victim)
    write_atomic(str(tmp_path / "out"), b"new", 0o600)
    assert (tmp_path / "out").read_bytes() == b"new" and victim.read_text() == "keep"
    assert oct((tmp_path / "out").stat().st_mode & 0o777) == "0o600"


def _deadline_run(fn, seconds: float):
    """Run ``fn`` in a child process; fail (never hang the suite) when it outlives ``seconds``."""
    proc = multiprocessing.get_context("fork").Process(target=fn)
    proc.start()
    proc.join(seconds)
    alive = proc.is_alive()
    if alive:
        proc.kill()
        proc.join()
    return alive, proc.exitcode


def test_a_state_file_that_is_a_fifo_neither_hangs_nor_is_trusted(tmp_path):
    """A FIFO in place of state.json once hung a health check past its deadline (issue 18)."""
    d = tmp_path / "state"
    d.mkdir(mode=0o700)
    os.mkfifo(d / "state.json")

    def judge():
        store = StateStore(str(d))
        with store.transaction() as doc:
            doc["ok"] = 1
        assert "not a regular file (a FIFO)" in (store.problem or "")
        os._exit(0)

    hung, code = _deadline_run(judge, 10)
    assert not hung, "reading a FIFO state file blocked"
    assert code == 0
    assert StateStore(str(d)).read() == {"ok": 1}
    assert [n for n in os.listdir(d) if n.startswith("state.json.corrupt-")], "the FIFO was not set aside"


def test_a_state_file_linked_to_dev_zero_is_set_aside_not_read(tmp_path):
    """A link to /dev/zero once ended in a MemoryError (issue 18): the link is never followed."""
    d = tmp_path / "state"
    d.mkdir(mode=0o700)
    os.symlink("/dev/zero", d / "state.json")
    store = StateStore(str(d))
    assert store.read() == {}
    assert "symbolic link" in store.problem
    with store.transaction() as doc:
        doc["ok"] = 1
    assert not os.path.islink(d / "state.json")
    assert StateStore(str(d)).read() == {"ok": 1}


def test_an_oversized_state_file_is_refused_by_size_not_by_memory(tmp_path, monkeypatch):
    import gpuhc.state.node as state

    monkeypatch.setattr(state, "MAX_STATE_BYTES", 1024)
    d = tmp_path / "state"
    d.mkdir(mode=0o700)
    (d / "state.json").write_text('{"pad": "' + "x" * 4096 + '"}')
    store = StateStore(str(d))
    assert store.read() == {}
    assert "larger than the 1024 bytes limit" in store.problem


def test_a_deeply_nested_state_file_is_corrupt_not_a_crash(tmp_path):
    d = tmp_path / "state"
    d.mkdir(mode=0o700)
    (d / "state.json").write_text("[" * 100000 + "]" * 100000)
    store = StateStore(str(d))
    with store.transaction() as doc:
        doc["ok"] = 1
    assert "nested deeper" in store.problem
    assert StateStore(str(d)).read() == {"ok": 1}
