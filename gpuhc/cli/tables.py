"""The admin's habits on every table command (sinfo, squeue, sacct): ``-o/--format`` picks the
columns, ``--parsable`` separates fields with ``|`` (sacct -P), ``--noheader`` drops the header
line (sinfo's; ``-h`` stays the help, as in every gpuhc command). One implementation, so that
`quarantine list` and the fleet tables read and script alike."""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence

import click

from gpuhc.logtext import escape


def table_options(fn: Callable) -> Callable:
    """-o/--format, --parsable and --noheader, handed to the command as ``fmt``, ``parsable`` and
    ``noheader``."""
    fn = click.option("--noheader", is_flag=True, help="No header line (-h is the help, as in every gpuhc command).")(fn)
    fn = click.option("--parsable", is_flag=True, help="Fields separated by |, nothing padded (like sacct -P).")(fn)
    return click.option("-o", "--format", "fmt", metavar="FIELDS",
                        help="Columns, comma-separated (the command's help names them).")(fn)


def stamp(t: Any) -> str:
    """Epoch seconds as local ISO time, '-' for none."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t)) if isinstance(t, (int, float)) and t else "-"


def render(rows: Sequence[dict], columns: dict[str, int], default: Sequence[str], fmt: str | None,
           parsable: bool, noheader: bool, show: Callable[[str, Any], str] | None = None) -> list[str]:
    """``rows`` (dicts) as lines. ``columns``: every field this table has, with its width (0:
    the last, unpadded); ``default``: the fields shown without -o. Raises click.BadParameter
    for a field the table lacks."""
    fields = [f.strip() for f in fmt.split(",") if f.strip()] if fmt else list(default)
    unknown = [f for f in fields if f not in columns]
    if unknown or not fields:
        raise click.BadParameter(f"{', '.join(unknown) or repr(fmt)}: not a column (these are: "
                                 f"{', '.join(columns)})", param_hint="-o/--format")
    show = show or (lambda _f, v: "-" if v is None else str(v))

    def line(values: list[str]) -> str:
        if parsable:
            return "|".join(v.replace("|", "/") for v in values)
        cells = [v if i == len(values) - 1 else f"{v:{max(columns[f], len(f))}}"
                 for i, (f, v) in enumerate(zip(fields, values))]
        return " ".join(cells).rstrip()

    out = [] if noheader else [line([f.upper() for f in fields])]
    return out + [escape(line([show(f, r.get(f)) for f in fields])) for r in rows]
