"""gpuhc.text.lazyre: a pattern compiled on first use answers exactly as the compiled one would."""

from __future__ import annotations

import re

import pytest

from gpuhc.text import lazyre
from gpuhc.sources import kernel_log_parse, kernel_log_prefix


def test_nothing_is_compiled_until_used(monkeypatch):
    compiled = []
    real = re.compile
    monkeypatch.setattr(lazyre.re, "compile", lambda *a: compiled.append(a) or real(*a))
    p = lazyre.lazy(r"Xid \(([^)]*)\): (\d+)", re.I)
    assert compiled == [] and p.pattern == r"Xid \(([^)]*)\): (\d+)" and p.flags == re.I
    assert p.search("NVRM: xid (PCI:0000:b3:00): 79").groups() == ("PCI:0000:b3:00", "79")
    assert len(compiled) == 1 and p.groups == 2
    assert (p.match("x"), p.fullmatch("x"), p.findall("x")) == (None, None, [])
    assert len(compiled) == 1  # once


@pytest.mark.parametrize("text", ["NVRM: Xid (PCI:0000:b3:00): 79, pid=1, GPU has fallen off the bus.",
                                  "nothing here", "", "Xid (a): 1 Xid (b): 2"])
def test_every_method_answers_as_re_does(text):
    pattern, flags = r"Xid \(([^)]*)\): (\d+)", re.I
    lazy, real = lazyre.lazy(pattern, flags), re.compile(pattern, flags)
    for name in ("search", "match", "fullmatch"):
        a, b = getattr(lazy, name)(text), getattr(real, name)(text)
        assert (a.span(), a.groups()) == (b.span(), b.groups()) if b else a is None
    assert lazy.findall(text) == real.findall(text)
    assert [m.span() for m in lazy.finditer(text)] == [m.span() for m in real.finditer(text)]
    assert lazy.sub("X", text) == real.sub("X", text) and lazy.subn("X", text) == real.subn("X", text)
    assert lazy.split(text) == real.split(text)
    assert lazy.groupindex == real.groupindex


def test_an_unknown_attribute_is_an_attribute_error():
    with pytest.raises(AttributeError):
        lazyre.lazy("a").nonsense  # noqa: B018


def test_a_bad_pattern_fails_at_first_use():
    with pytest.raises(re.error):
        lazyre.lazy("(").search("x")


def test_the_kernel_log_patterns_all_compile():
    """A pattern broken in an edit would otherwise surface only when a log line needs it."""
    found = [v for mod in (kernel_log_parse, kernel_log_prefix) for v in vars(mod).values()
             if isinstance(v, lazyre.LazyPattern)]
    found += [p for _, p in kernel_log_parse.SIGNALS] + list(kernel_log_prefix._EMBEDDED)
    assert len(found) >= 35
    for p in found:
        assert p.groups == re.compile(p.pattern, p.flags).groups
