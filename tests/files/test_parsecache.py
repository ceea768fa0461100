"""gpuhc.files.parsecache: a parse is memoised between runs only when nothing about it could differ,
and only in a place nobody else could have written; any doubt means parsing again."""

from __future__ import annotations

import datetime
import json
import marshal
import os
import subprocess
import sys

import pytest

from gpuhc.files import parsecache
from gpuhc.config.load import load_config
from gpuhc.errors import ConfigError
from gpuhc.text.yamlpos import load_file_text
from tests.helpers.paths import REPO

ROOT = str(REPO)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    d.mkdir(mode=0o700)
    monkeypatch.setenv("GPUHC_CACHE_DIR", str(d))
    monkeypatch.setattr(parsecache, "_memo_dir", None)  # read afresh, as a new process would
    return d


class Counting:
    """A parse that counts its calls."""

    def __init__(self, value):
        self.value, self.calls = value, 0

    def __call__(self, text):
        self.calls += 1
        return self.value(text) if callable(self.value) else self.value


def new_process(monkeypatch):
    monkeypatch.setattr(parsecache, "_memo_dir", None)


def test_a_second_run_gets_the_parse_without_parsing(cache, tmp_path, monkeypatch):
    parse = Counting(lambda t: {"text": t, "n": [1, 2.5, True, None]})
    first = parsecache.cached(str(tmp_path / "a.yaml"), "a: 1\n", "k", parse)
    new_process(monkeypatch)
    again = parsecache.cached(str(tmp_path / "a.yaml"), "a: 1\n", "k", parse)
    assert parse.calls == 1 and again == first == {"text": "a: 1\n", "n": [1, 2.5, True, None]}
    assert again is not first  # a fresh copy: callers may change what they get
    assert (cache / parsecache.FILE_NAME).exists()


@pytest.mark.parametrize("change", ["text", "path", "kind", "code"])
def test_anything_that_could_change_the_parse_parses_again(cache, tmp_path, monkeypatch, change):
    parse = Counting(lambda t: t.upper())
    parsecache.cached(str(tmp_path / "a.yaml"), "same length", "k", parse)
    new_process(monkeypatch)
    path, text, kind = str(tmp_path / "a.yaml"), "same length", "k"
    if change == "text":
        text = "same lengtH"  # same size: the checksum tells them apart
    elif change == "path":
        path = str(tmp_path / "b.yaml")
    elif change == "kind":
        kind = "other"
    else:
        monkeypatch.setattr(parsecache, "_stamp", parsecache._code_stamp()[:-1] + (("yamlpos.py", 1, 2),))
    assert parsecache.cached(path, text, kind, parse) == text.upper()
    assert parse.calls == 2


def test_values_marshal_would_change_are_never_kept(cache, tmp_path, monkeypatch):
    # a YAML date, and a str subclass, would come back as something else
    class Name(str):
        pass

    for value in ({"when": datetime.date(2025, 1, 1)}, [Name("x")], {1, 2}):
        parse = Counting(value)
        parsecache.cached(str(tmp_path / "a.yaml"), "x", "k", parse)
        new_process(monkeypatch)
        assert parsecache.cached(str(tmp_path / "a.yaml"), "x", "k", parse) == value
        assert parse.calls == 2


def test_errors_are_not_kept_and_still_name_file_line_and_key(cache, tmp_path, monkeypatch):
    cfg = tmp_path / "gpuhc.yaml"
    cfg.write_text("budget_s:\n  passive: 45\n  prolog: -1\n")
    for _ in range(2):
        new_process(monkeypatch)
        with pytest.raises(ConfigError) as e:
            load_config(str(cfg))
        assert f"{cfg}:3: budget_s.prolog:" in str(e.value)
    cfg.write_text("a: [unclosed\n")
    for _ in range(2):
        new_process(monkeypatch)
        with pytest.raises(ConfigError, match=rf"{cfg}:\d+: not valid YAML"):
            load_file_text(cfg.read_text(), str(cfg))


def test_an_edited_config_is_read_as_edited(cache, tmp_path, monkeypatch):
    cfg = tmp_path / "gpuhc.yaml"
    cfg.write_text("budget_s:\n  passive: 45\n")
    assert load_config(str(cfg)).section("budget_s")["passive"] == 45
    cfg.write_text("budget_s:\n  passive: 46\n")  # same size, same second
    new_process(monkeypatch)
    assert load_config(str(cfg)).section("budget_s")["passive"] == 46
    assert load_config(str(cfg)).lines[("budget_s", "passive")] == 2


def _write_memo(cache, memo: dict, mode: int = 0o600) -> None:
    path = cache / parsecache.FILE_NAME
    path.write_bytes(marshal.dumps(memo))
    path.chmod(mode)


def _poisoned(tmp_path) -> dict:
    """A memo that says a.yaml's text parses to something it does not."""
    text = "real: 1\n"
    data = text.encode()
    import zlib

    key = ("k", parsecache._code_stamp(), len(data), zlib.crc32(data))
    return {str(tmp_path / "a.yaml"): (key, marshal.dumps({"planted": True}))}


def test_a_memo_others_could_write_is_ignored(cache, tmp_path, monkeypatch):
    _write_memo(cache, _poisoned(tmp_path))
    new_process(monkeypatch)
    assert parsecache.cached(str(tmp_path / "a.yaml"), "real: 1\n", "k", lambda t: {"real": 1}) == {"planted": True}
    for file_mode, dir_mode in ((0o620, 0o700), (0o602, 0o700), (0o600, 0o770), (0o600, 0o707)):
        _write_memo(cache, _poisoned(tmp_path), file_mode)
        cache.chmod(dir_mode)
        new_process(monkeypatch)
        try:
            got = parsecache.cached(str(tmp_path / "a.yaml"), "real: 1\n", "k", lambda t: {"real": 1})
        finally:
            cache.chmod(0o700)
        assert got == {"real": 1}, (oct(file_mode), oct(dir_mode))


@pytest.mark.skipif(os.geteuid() != 0, reason="root's rules: the memo must be root's (CI runs as root)")
def test_as_root_a_memo_owned_by_another_user_or_through_a_link_is_ignored(cache, tmp_path, monkeypatch):
    _write_memo(cache, _poisoned(tmp_path))
    os.chown(cache / parsecache.FILE_NAME, 65534, 65534)
    new_process(monkeypatch)
    assert parsecache.cached(str(tmp_path / "a.yaml"), "real: 1\n", "k", lambda t: {"real": 1}) == {"real": 1}
    os.unlink(cache / parsecache.FILE_NAME)
    _write_memo(tmp_path, _poisoned(tmp_path))
    os.symlink(tmp_path / parsecache.FILE_NAME, cache / parsecache.FILE_NAME)
    new_process(monkeypatch)
    assert parsecache.cached(str(tmp_path / "a.yaml"), "real: 1\n", "k", lambda t: {"real": 1}) == {"real": 1}


@pytest.mark.parametrize("content", [b"", b"\x00garbage", marshal.dumps(["not", "a", "mapping"]),
                                     marshal.dumps({"/x": "not an entry"})])
def test_a_damaged_memo_is_parsed_around_and_rewritten(cache, tmp_path, monkeypatch, content):
    (cache / parsecache.FILE_NAME).write_bytes(content)
    (cache / parsecache.FILE_NAME).chmod(0o600)
    new_process(monkeypatch)
    parse = Counting({"ok": 1})
    assert parsecache.cached(str(tmp_path / "a.yaml"), "ok: 1", "k", parse) == {"ok": 1}
    new_process(monkeypatch)
    assert parsecache.cached(str(tmp_path / "a.yaml"), "ok: 1", "k", parse) == {"ok": 1}
    assert parse.calls == 1


def test_turned_off_by_an_empty_directory_name(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUHC_CACHE_DIR", "")
    parse = Counting({"ok": 1})
    for _ in range(2):
        new_process(monkeypatch)
        parsecache.cached(str(tmp_path / "a.yaml"), "ok: 1", "k", parse)
    assert parse.calls == 2 and parsecache.cache_dir() is None


def test_an_unwritable_place_is_not_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUHC_CACHE_DIR", str(tmp_path / "file" / "below"))
    (tmp_path / "file").write_text("a file, not a directory")
    new_process(monkeypatch)
    assert parsecache.cached(str(tmp_path / "a.yaml"), "ok: 1", "k", lambda t: {"ok": 1}) == {"ok": 1}


def test_the_memo_stays_bounded(cache, tmp_path, monkeypatch):
    monkeypatch.setattr(parsecache, "MAX_ENTRIES", 3)
    for i in range(5):
        parsecache.cached(str(tmp_path / f"{i}.yaml"), f"n: {i}", "k", lambda t: {"n": 1})
    new_process(monkeypatch)
    kept = marshal.loads((cache / parsecache.FILE_NAME).read_bytes())
    assert sorted(os.path.basename(p) for p in kept) == ["2.yaml", "3.yaml", "4.yaml"]
    big = Counting({"n": 1})
    text = "x" * (parsecache.MAX_TEXT_BYTES + 1)
    for _ in range(2):
        new_process(monkeypatch)
        parsecache.cached(str(tmp_path / "big.yaml"), text, "k", big)
    assert big.calls == 2


def test_a_file_rewritten_under_a_long_process_is_not_written_out_at_every_parse(cache, tmp_path, monkeypatch):
    """The campaign model rewrites each node's recording before every run, in one process: each
    parse stored rewrote the whole memo file, and pushed the files that do not change out of
    it. A file that changed under the process is stored again only once it reads the same twice
    in a row; a file's first parse in a process (the health check's only one) always is."""
    from gpuhc.files import fsutil

    writes, real = [], fsutil.write_atomic
    monkeypatch.setattr(fsutil, "write_atomic", lambda path, data, *a, **k: writes.append(data) or real(path, data, *a, **k))
    node, config = str(tmp_path / "node.yaml"), str(tmp_path / "gpuhc.yaml")
    parse = Counting(lambda t: {"text": t})
    for run in range(4):
        parsecache.cached(node, f"time: {run}", "k", parse)
    assert parse.calls == 4 and len(writes) == 1  # the first parse only
    parsecache.cached(config, "a: 1", "k", parse)
    assert len(writes) == 2 and list(marshal.loads(writes[-1])) == [config]  # the stale entry dropped
    for _ in range(2):
        parsecache.cached(node, "time: 9", "k", parse)
    assert len(writes) == 3 and parsecache.cached(node, "time: 9", "k", parse) == {"text": "time: 9"}
    assert parse.calls == 7
    new_process(monkeypatch)  # the next process: an edited file's first parse is kept at once
    parsecache.cached(config, "a: 2", "k", parse)
    assert len(writes) == 4


def test_a_healthy_replay_from_the_memo_never_imports_yaml(cache, tmp_path):
    """The point of the memo: the second run of the same files needs no YAML library."""
    cfg = tmp_path / "gpuhc.yaml"
    cfg.write_text(open(os.path.join(ROOT, "etc", "gpuhc.yaml")).read().replace("/var/", f"{tmp_path}/var/"))
    probe = ("import sys\nsys.argv = ['gpuhc', 'check', '--demo', '--json', '--config', sys.argv[1]]\n"
             "from gpuhc.errors import run_cli\nfrom gpuhc.cli import cli\n"
             "try:\n    run_cli(cli)\nexcept SystemExit as e:\n    code = e.code\n"
             "print('yaml imported' if 'yaml' in sys.modules else 'no yaml', code, file=sys.stderr)\n")
    env = dict(os.environ, GPUHC_CACHE_DIR=str(cache), GPUHC_STATE_DIR=str(tmp_path / "state"))
    runs = [subprocess.run([sys.executable, "-c", probe, str(cfg)], env=env, capture_output=True, text=True,
                           timeout=60, cwd=ROOT) for _ in range(2)]
    assert [r.stderr.splitlines()[-1] for r in runs] == ["yaml imported 0", "no yaml 0"], runs[1].stderr
    first, second = (json.loads(r.stdout) for r in runs)
    assert first["results"] == second["results"] and first["results"]


def test_a_long_lived_process_keeps_no_node_of_the_documents_it_parsed(monkeypatch):
    # The shared YAML constructor remembers every node it builds; a watcher or a campaign that
    # parses thousands of documents grew by a gigabyte a simulated month until it was cleared.
    from gpuhc.text import yamlpos

    monkeypatch.setenv("GPUHC_CACHE_DIR", "")  # parse every time
    for i in range(50):
        load_file_text(f"a: {i}\nb: [1, 2, {{c: x{i}}}]\n", f"/n{i}.yaml")
    with pytest.raises(ConfigError):
        load_file_text("a: [1, 2\n", "/bad.yaml")
    constructor = yamlpos._yaml()[1]
    assert not constructor.constructed_objects and not constructor.recursive_objects
