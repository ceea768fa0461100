"""gpuhc.files.untrusted: the one reader for files that others may have written (docs/ARCHITECTURE.md)."""

import os

import pytest
from hypothesis import given, strategies as st

from gpuhc.files.untrusted import UntrustedInputError, json_depth, load_json, read_bounded, read_tail


def test_regular_file_is_read_whole(tmp_path):
    p = tmp_path / "r.json"
    p.write_bytes(b'{"a": 1}')
    assert read_bounded(str(p), 100) == b'{"a": 1}'


@pytest.mark.parametrize("make, why", [
    (lambda p: os.mkfifo(p), "not a regular file (a FIFO)"),
    (lambda p: os.symlink("/dev/zero", p), "is a symbolic link"),
    (lambda p: os.mkdir(p), "not a regular file (a directory)"),
])
def test_refuses_what_is_not_a_plain_file_without_blocking(tmp_path, make, why):
    p = str(tmp_path / "results.json")
    make(p)
    with pytest.raises(UntrustedInputError) as e:
        read_bounded(p, 1024, "results file")
    assert str(e.value).startswith(f"results file {p}: {why}")


def test_larger_than_limit_is_refused_by_name(tmp_path):
    p = tmp_path / "big"
    p.write_bytes(b"x" * 2048)
    with pytest.raises(UntrustedInputError, match="larger than the 1024 bytes limit"):
        read_bounded(str(p), 1024)


def test_tail_keeps_whole_lines_and_says_it_cut(tmp_path):
    p = tmp_path / "log"
    p.write_bytes(b"first line\nsecond\nthird\n")
    assert read_tail(str(p), 13) == (b"third\n", True)
    assert read_tail(str(p), 1000) == (b"first line\nsecond\nthird\n", False)


def test_deep_json_is_refused_before_decoding():
    with pytest.raises(UntrustedInputError, match="nested deeper than 64"):
        load_json(b"[" * 200_000 + b"]" * 200_000, "probe results")


def test_brackets_inside_strings_do_not_count():
    assert json_depth('[{"a": "[[[[\\"[["}]') == 2
    assert load_json('{"x": "[[[["}', "s") == {"x": "[[[["}


@given(st.recursive(st.none() | st.integers() | st.text(), lambda c: st.lists(c) | st.dictionaries(st.text(), c)))
def test_depth_matches_the_decoded_structure(value):
    import json

    def depth(v):
        if isinstance(v, list):
            return 1 + max(map(depth, v), default=0)
        if isinstance(v, dict):
            return 1 + max(map(depth, v.values()), default=0)
        return 0

    assert json_depth(json.dumps(value)) == depth(value)
