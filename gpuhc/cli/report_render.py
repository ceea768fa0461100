"""How ``gpuhc drain-report`` (gpuhc/cli/report_cmd.py) shows a :class:`DrainReport`: the plain
text for pipes, the CSV, and the rich table on a terminal. Every cell is one printable line
(node names, users and reasons are Slurm's text, written by anyone who may set a reason).
``rich`` is imported only when a table goes to a terminal.
"""

from __future__ import annotations

import csv
import io
from datetime import datetime
from typing import IO

from gpuhc.text.logtext import escape
from gpuhc.slurm.report.build import DrainReport, compress, humanize_age
from gpuhc.slurm.report.fields import CSV_FIELDS, field_value

# The table on a terminal shows this many rows per cause unless --all-rows: a thousand
# distinct reasons would bury the summary the admin came for. JSON, CSV and plain text
# (pipes, grep) always carry every row.
TABLE_ROWS_PER_CAUSE = 15
PLAIN_MAX_WIDTH = 32
COLUMNS = ("CAUSE", "OWNER", "COUNT", "STATE", "NODES", "SINCE", "AGE", "SET BY", "REASON")


def _when(ts: float | None) -> str:
    try:
        return datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M") if ts else "-"
    except (OverflowError, OSError, ValueError):  # a time no calendar can show
        return "-"


def _rows(report: DrainReport):
    """(cause, owner, count, kind, nodes, since, age, users, reason, first-row-of-group, group),
    every cell one printable line (node names and users are Slurm's text too)."""
    for g in report.groups:
        for i, r in enumerate(g.rows):
            yield tuple(map(escape, (g.cause, r.owner, str(r.count), r.kind, r.hostlist, _when(r.since),
                                     humanize_age(r.age_s), ",".join(r.users) or "-", reason_cell(r)))), i, g


def reason_cell(row) -> str:
    """The reason as Slurm gave it, and, when it may not be these nodes' own, why (the owner
    is then `unknown`): the admin must not take a shared or missing reason at its word."""
    text = escape(row.reason) if row.reason else "-"  # a dump file is untrusted: no control characters reach the terminal
    if row.step:
        text = f"{text} ({row.step})"
    return f"{text} (note: {row.doubt})" if row.doubt else text


def headline(report: DrainReport) -> str:
    n = len(report.entries)
    kinds = ", ".join(f"{k} {c}" for k, c in report.by_kind.items())
    owners = ", ".join(f"{k} {c}" for k, c in report.by_owner.items())
    text = f"{n} of {report.total_nodes} nodes unavailable"
    if n:
        text += f" ({kinds}); reasons set by {owners}"
    return text


def render_plain(report: DrainReport, source: str, header: bool = True) -> str:
    """Aligned columns, one row per (cause, state, reason): friendly to grep, awk and mail.
    Without ``header``, only the rows (``-h``, like sinfo)."""
    rows = [row for row, _, _ in _rows(report)]
    # Align on typical widths; a rare huge value (a 500-node hostlist) overflows its own row
    # instead of pushing every other row's reason off the screen.
    head = [COLUMNS] if header else []
    widths = [min(PLAIN_MAX_WIDTH, max(len(r[i]) for r in head + rows)) for i in range(len(COLUMNS) - 1)] if rows else []
    fmt = "  ".join(f"{{:<{w}}}" for w in widths) + "  {}"
    if not header:
        return "".join(fmt.format(*r).rstrip() + "\n" for r in rows)
    lines = [f"gpuhc drain-report: {headline(report)}", f"source: {escape(source)}; at {_when(report.now)}", ""]
    if report.incidents:
        lines.extend(escape(i.summary) for i in report.incidents)
        lines.append("")
    if rows:
        lines.append(fmt.format(*COLUMNS).rstrip())
        lines.extend(fmt.format(*r).rstrip() for r in rows)
        lines.append("")
        lines.append(escape("by cause: " + ", ".join([f"switch {i.switch} {len(i.nodes)}" for i in report.incidents]
                                                     + [f"{g.cause} {g.count}" for g in report.groups])))
    if report.partitions:
        parts = {escape(p): v for p, v in report.partitions.items()}
        pw = max(len("PARTITION"), *(len(p) for p in parts))
        lines.append("")
        lines.append(f"{'PARTITION':<{pw}}  UNAVAILABLE  TOTAL")
        for p, (u, t) in parts.items():
            lines.append(f"{p:<{pw}}  {u:<11}  {t}")
    return "\n".join(lines) + "\n"


def render_csv(report: DrainReport, header: bool = True) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    if header:
        w.writerow(CSV_FIELDS)
    for e in report.entries:
        w.writerow([field_value(e, f) for f in CSV_FIELDS])
    return buf.getvalue()


def render_rich(report: DrainReport, source: str, all_rows: bool, stream: IO[str], width: int | None = None) -> None:
    """A terminal table. Fewer, denser columns than the plain text (owner and user share one,
    the date gives way to the age) so that it still reads on an 80-column terminal."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    console = Console(file=stream, width=width)
    table = Table(title=f"gpuhc drain-report: {headline(report)}", caption=_escape(f"source: {source}; at {_when(report.now)}"),
                  box=box.SIMPLE_HEAD, pad_edge=False, header_style="bold")
    table.add_column("CAUSE", overflow="fold", max_width=20)
    table.add_column("N", no_wrap=True, justify="right")
    table.add_column("NODES", overflow="fold", min_width=8, max_width=40)
    table.add_column("STATE", no_wrap=True)
    table.add_column("AGE", no_wrap=True)
    table.add_column("BY", overflow="fold", max_width=14)
    table.add_column("REASON", overflow="fold", ratio=1, min_width=12)
    owner_style = {"gpuhc": "cyan", "slurm": "yellow", "admin": "magenta"}
    kind_style = {"down": "red", "fail": "red", "draining": "yellow", "drained": "white", "out": "white"}  # every word kind_of says
    for i, inc in enumerate(report.incidents):  # before the causes: one switch, not N node failures
        table.add_row(f"[bold red]suspect switch[/] {_escape(inc.switch)}", str(len(inc.nodes)),
                      _escape(compress(inc.nodes)), "", humanize_age(max(0.0, report.now - inc.first)), "[cyan]gpuhc[/]",
                      _escape(escape(f"{inc.check} failed on {len(inc.nodes)} nodes under it within "
                                     f"{inc.last - inc.first:.0f}s")), end_section=i == len(report.incidents) - 1)
    for g in report.groups:
        limit = len(g.rows) if all_rows else TABLE_ROWS_PER_CAUSE
        shown = g.rows[:limit]
        for i, r in enumerate(shown):
            by = r.owner + (f" ({', '.join(r.users)})" if r.users else "")
            table.add_row(
                f"[bold]{_escape(g.cause)}[/] ({g.count})" if i == 0 else "",
                str(r.count), _escape(r.hostlist), f"[{kind_style[r.kind]}]{r.kind}[/]", humanize_age(r.age_s),
                f"[{owner_style[r.owner]}]{_escape(by)}[/]", _escape(reason_cell(r)),
                end_section=i == len(shown) - 1 and len(g.rows) <= limit,
            )
        if len(g.rows) > limit:
            more = g.rows[limit:]
            table.add_row("", str(sum(r.count for r in more)), f"... {len(more)} more rows (--all-rows)",
                          "", "", "", "", end_section=True)
    console.print(table)
    if report.partitions:
        pt = Table(title="per partition", box=box.SIMPLE_HEAD, pad_edge=False, header_style="bold")
        pt.add_column("PARTITION")
        pt.add_column("UNAVAILABLE", justify="right")
        pt.add_column("TOTAL", justify="right")
        for p, (u, t) in report.partitions.items():
            pt.add_row(_escape(p), str(u), str(t))
        console.print(pt)


def _escape(text: str) -> str:
    """A cell of the terminal table: one printable line (:func:`gpuhc.text.logtext.escape`), and a
    ``[root]`` in a reason or a node name is text, not rich markup."""
    from rich.markup import escape as markup

    return markup(escape(text))
