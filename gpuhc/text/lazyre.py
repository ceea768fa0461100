"""Regular expressions compiled on first use, not at import.

The kernel-log parser declares some forty patterns, one per line shape and message; compiling
them all costs the health check a couple of milliseconds on every run, while a healthy node's
log needs a handful (docs/ARCHITECTURE.md, "Hot path"). A :class:`LazyPattern` stands where
the compiled pattern would, and compiles it the first time one of its methods is looked up;
from then on a lookup is a plain attribute read, as fast as on the compiled pattern.
"""

from __future__ import annotations

import re

_METHODS = ("match", "search", "fullmatch", "finditer", "findall", "sub", "subn", "split")


class LazyPattern:
    __slots__ = (*_METHODS, "pattern", "flags", "groups", "groupindex")

    def __init__(self, pattern: str, flags: int = 0):
        # "pattern" and "flags" are set now (cheap, and what a reader of the object expects);
        # the methods stay unset until first use, which sends their lookup to __getattr__.
        self.pattern, self.flags = pattern, flags

    def __getattr__(self, name: str):
        if name not in _METHODS and name not in ("groups", "groupindex"):
            raise AttributeError(name)
        compiled = re.compile(self.pattern, self.flags)
        for method in _METHODS:
            setattr(self, method, getattr(compiled, method))
        self.groups, self.groupindex = compiled.groups, compiled.groupindex
        return getattr(self, name)

    def __repr__(self) -> str:
        return f"LazyPattern({self.pattern!r}, {self.flags!r})"


def lazy(pattern: str, flags: int = 0) -> LazyPattern:
    """``re.compile(pattern, flags)``, deferred until the pattern is first used."""
    return LazyPattern(pattern, flags)
