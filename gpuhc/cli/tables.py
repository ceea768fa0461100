"""The admin's habits on every table command (sinfo, squeue, sacct): ``-o/--format`` picks the
columns, ``--parsable`` separates fields with ``|`` (sacct -P), ``--noheader`` drops the header
line (sinfo's; ``-h`` stays the help, as in every gpuhc command). One implementation, so that
every table reads and scripts alike: a command declares its table once (:class:`Table`: the
columns, their widths, which hold times) and passes it to :func:`table_options`, which names the
columns in the help and refuses an unknown one before the command asks Slurm anything."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import click

from gpuhc.text.logtext import escape


def stamp(t: Any) -> str:
    """Epoch seconds as local ISO time, '-' for none."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t)) if isinstance(t, (int, float)) and t else "-"


def cell(value: Any) -> str:
    """One value as a field: '-' for none, a list comma-joined, a float in at most 6 digits."""
    if value is None:
        return "-"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value) or "-"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


@dataclass(frozen=True)
class Table:
    """One command's table. ``columns``: every field it has, in the default order, with its
    least width (a wider value widens its column; the last column is never padded);
    ``default``: the fields shown without -o (all when empty); ``times``: fields holding epoch
    seconds, shown as local ISO time."""

    columns: dict[str, int]
    default: tuple[str, ...] = ()
    times: frozenset[str] = frozenset()

    def fields(self, fmt: str | None) -> list[str]:
        """The columns ``-o`` names, in its order. Raises click.BadParameter (exit 2) naming a
        field the table lacks, and the ones it has."""
        fields = [f.strip().lower() for f in fmt.split(",") if f.strip()] if fmt else list(self.default or self.columns)
        unknown = [f for f in fields if f not in self.columns]
        if unknown or not fields:
            raise click.BadParameter(f"{', '.join(unknown) or repr(fmt)}: not a column (these are: "
                                     f"{', '.join(self.columns)})", param_hint="-o/--format")
        return fields

    def show(self, field: str, value: Any) -> str:
        return stamp(value) if field in self.times and value is not None else cell(value)

    def lines(self, rows: Sequence[dict], fmt: str | None, parsable: bool, noheader: bool) -> list[str]:
        """``rows`` (dicts keyed by column) as lines, each value one printable line
        (gpuhc.text.logtext.escape): aligned, or ``|``-separated with no padding, a ``|`` inside a
        value written ``\\x7c`` as the escaper writes what it cannot print, so no value shifts
        the fields after it (drain-report's --parsable does the same)."""
        fields = self.fields(fmt)
        body = [[escape(self.show(f, r.get(f))) for f in fields] for r in rows]
        head = [] if noheader else [[f.upper() for f in fields]]
        if parsable:
            return ["|".join(v.replace("|", "\\x7c") for v in values) for values in head + body]
        # a column is as wide as its declared width, its header and its widest value
        widths = [max([self.columns[f], len(f)] + [len(values[i]) for values in body]) for i, f in enumerate(fields)]
        return [" ".join(v if i == len(values) - 1 else f"{v:{widths[i]}}" for i, v in enumerate(values)).rstrip()
                for values in head + body]


def table_options(table: Table) -> Callable[[Callable], Callable]:
    """-o/--format, --parsable and --noheader, handed to the command as ``fmt``, ``parsable`` and
    ``noheader``; the help names ``table``'s columns, and an unknown one is refused at once."""

    def check(_ctx, _param, value: str | None) -> str | None:
        if value is not None:
            table.fields(value)
        return value

    def wrap(fn: Callable) -> Callable:
        fn = click.option("--noheader", is_flag=True, help="No header line (-h is the help, as in every gpuhc "
                          "command).")(fn)
        fn = click.option("--parsable", is_flag=True, help="Fields separated by |, nothing padded (like sacct -P).")(fn)
        return click.option("-o", "--format", "fmt", metavar="FIELDS", callback=check,
                            help=f"Columns, comma-separated, in the order wanted: {', '.join(table.columns)}.")(fn)

    return wrap


def asked(fmt: str | None, parsable: bool, noheader: bool) -> bool:
    """Whether any of the three was given: then the command prints this table (its header only,
    when there is no row), not its own human layout."""
    return bool(fmt or parsable or noheader)
