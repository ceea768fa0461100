"""The options of the commands a node runs every few minutes, declared once, for two parsers.

Why two: click costs a health check about 8 % of its instructions before any check runs
(``inspect``, ``uuid``, ``platform`` and ``gettext`` come with it), and `gpuhc healthcheck`,
`prolog`, `epilog` and `check` run on every node every few minutes and before every job. So
:func:`fast_parse` reads the plain command lines those runs are (long options, ``--opt value`` or
``--opt=value``, flags) from the same declarations click's decorators are built from
(:func:`click_options`), and gives up, returning None, on anything else: help, a typo, a value
click would refuse, an option given twice. click then runs the command as always and says what
is wrong in its own words, so the two parsers never disagree about a command line both accept
(tests/cli/test_options.py holds them together).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Sequence


class Opt:
    """One option: its flags, the parameter it fills, its kind ("str", "flag", "path", "int",
    "choice"), and what click is told about it."""

    __slots__ = ("flags", "dest", "kind", "help", "default", "multiple", "choices", "min", "exists", "file_okay",
                 "dir_okay", "show_default")

    def __init__(self, flags: Sequence[str], dest: str, kind: str = "str", help: str = "", default: Any = None,
                 multiple: bool = False, choices: Sequence[str] = (), min: int | None = None, exists: bool = False,
                 file_okay: bool = True, dir_okay: bool = True, show_default: bool = False):
        self.flags, self.dest, self.kind, self.help, self.default = tuple(flags), dest, kind, help, default
        self.multiple, self.choices, self.min, self.exists = multiple, tuple(choices), min, exists
        self.file_okay, self.dir_okay, self.show_default = file_okay, dir_okay, show_default

    def value(self, text: str) -> Any:
        """``text`` as click would convert it, or :data:`REFUSED` where click would refuse it."""
        if self.kind == "int":
            try:
                n = int(text)
            except ValueError:
                return REFUSED
            return REFUSED if self.min is not None and n < self.min else n
        if self.kind == "choice":
            return text if text in self.choices else REFUSED
        if self.kind == "path":
            return text if _path_ok(text, self) else REFUSED
        return text


REFUSED = object()


def _path_ok(text: str, opt: Opt) -> bool:
    """click.Path's checks as the declarations use them: exists, file_okay, dir_okay, readable."""
    if not text:
        return False
    try:
        st = os.stat(text)
    except (OSError, ValueError):
        return not opt.exists
    import stat

    if stat.S_ISDIR(st.st_mode):
        return opt.dir_okay and os.access(text, os.R_OK)
    return opt.file_okay and os.access(text, os.R_OK)


def fast_parse(decls: Sequence[Opt], argv: Sequence[str]) -> dict[str, Any] | None:
    """The parameters ``argv`` gives, or None where click should read it (see the module)."""
    by_flag = {f: o for o in decls for f in o.flags}
    out: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        token = argv[i]
        name, eq, inline = token.partition("=")
        opt = by_flag.get(name) if token.startswith("-") and token != "--" else None
        if opt is None or (eq and not name.startswith("--")):
            return None
        if opt.kind == "flag":
            if eq:
                return None
            got: Any = True
        else:
            if not eq:
                i += 1
                if i >= len(argv) or argv[i].startswith("-"):
                    return None  # a missing value, or one click might read as an option
                inline = argv[i]
            got = opt.value(inline)
            if got is REFUSED:
                return None
        if opt.multiple:
            out[opt.dest] = (*out.get(opt.dest, ()), got)
        elif opt.dest in out:
            return None  # given twice: click keeps the last; rare enough to leave to it
        else:
            out[opt.dest] = got
        i += 1
    for o in decls:
        out.setdefault(o.dest, () if o.multiple else (False if o.kind == "flag" else o.default))
    return out


def click_options(decls: Sequence[Opt]) -> Callable:
    """A decorator adding ``decls`` as click options (click is imported here, not at import)."""
    import click

    def types(o: Opt) -> dict[str, Any]:
        if o.kind == "flag":
            return {"is_flag": True}
        if o.kind == "int":
            return {"type": click.IntRange(min=o.min)}
        if o.kind == "choice":
            return {"type": click.Choice(o.choices)}
        if o.kind == "path":
            return {"type": click.Path(exists=o.exists, file_okay=o.file_okay, dir_okay=o.dir_okay)}
        return {}

    def decorate(fn: Callable) -> Callable:
        for o in reversed(decls):
            extra = {"default": o.default} if o.default is not None else {}
            fn = click.option(*o.flags, o.dest, help=o.help, multiple=o.multiple, show_default=o.show_default,
                              **types(o), **extra)(fn)
        return fn

    return decorate
