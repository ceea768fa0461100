"""Showing the fleet commands' results: rich tables for people, one PNG for ``stats --png``.

rich is imported with this module, which the CLI imports only when a table or a plot is asked
for (``--json`` never loads it); matplotlib only when a plot is drawn (:mod:`gpuhc.text.plot`).
"""

from __future__ import annotations

import os
import sys
import time
from typing import IO

from rich import box
from rich.console import Console
from rich.markup import escape as markup
from rich.table import Table

from gpuhc.text.logtext import escape
from gpuhc.text.plot import new_figure, save_figure
from gpuhc.slurm.report.build import compress


def _console(stream: IO[str] | None):
    """A terminal gets its own width; a pipe or a cron mail gets $COLUMNS when set, else 120
    columns rather than rich's 80, so that the tables keep one row per line."""
    out = stream or sys.stdout
    tty = hasattr(out, "isatty") and out.isatty()
    columns = os.environ.get("COLUMNS", "")
    width = int(columns) if columns.isdigit() and 40 <= int(columns) <= 10000 else 120
    return Console(file=stream, highlight=False, width=None if tty else width)


def _table(title: str, *columns: str, caption: str | None = None, wrap_last: bool = False):
    """Columns never wrap (a node name or a time cut in two is misread), except, with
    ``wrap_last``, the last one (free text: evidence), which then folds first when the table is
    wider than the screen, instead of the node and time columns being cut."""
    t = Table(title=title, caption=caption, box=box.SIMPLE_HEAD, header_style="bold", pad_edge=False, padding=(0, 1))
    for i, c in enumerate(columns):
        last = wrap_last and i == len(columns) - 1
        t.add_column(c, justify="left" if i == 0 or last else "right", no_wrap=not last,
                     overflow="fold" if last else "ellipsis", ratio=1 if last else None)
    return t


def _h(hours: float | None) -> str:
    if hours is None:
        return "-"
    if hours >= 48:
        return f"{hours / 24:.1f}d"
    return f"{hours:.1f}h"


def _esc(text: str) -> str:
    """Node names, partitions, causes and evidence come from Slurm and event logs others can
    write: one printable line each (gpuhc.text.logtext), and brackets are text, not rich markup."""
    return markup(escape(text))


def _day(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t))


def render_stats(stats, stream: IO[str] | None = None, top_nodes: int = 20) -> None:
    console = _console(stream)
    # The notes first: without Slurm's accounting the numbers below are gpuhc's own view (an
    # admin's resume or another tool's drain is not in its event logs), and a reader must know
    # that before reading them, not after.
    for note in stats.notes:
        console.print(f"[yellow]note:[/] {_esc(note)}")
    if any("node events unavailable" in n for n in stats.notes):
        console.print("[yellow]note:[/] from gpuhc's event logs only: a node an admin resumed still counts as "
                      "open, and drains gpuhc did not make are missing (docs/repair.md, \"Fleet statistics\")")
    cols = ("", "nodes", "drains", "MTBF", "MTTR", "open", "retired", "trend", "halves", "p")
    for kind, title in (("fleet", "fleet"), ("partition", "per partition"), ("cause", "per cause"),
                        ("node", f"per node (the {top_nodes} with most drains)")):
        rows = stats.of(kind)
        if kind == "node":
            rows = sorted(rows, key=lambda r: (-r.drains, r.key))[:top_nodes]
        if not rows:
            continue
        caption = f"{_day(stats.start)} .. {_day(stats.end)}" if kind == "fleet" else None
        t = _table(f"gpuhc fleet stats: {title}", *cols, caption=caption)
        for r in rows:
            t.add_row(_esc(r.key), str(r.nodes), str(r.drains), _h(r.mtbf_h), _h(r.mttr_h), str(r.open),
                      str(r.retired), r.trend, f"{r.first_half}/{r.second_half}", f"{r.trend_p:.2g}")
        console.print(t)


def render_risk(risk, scaling: list[tuple[int, float]], stream: IO[str] | None = None) -> None:
    console = _console(stream)
    d = risk.to_dict()
    t = _table(f"gpuhc fleet risk: {risk.gpus} GPUs for {risk.hours:g} h", "", "value")
    t.add_row("rate per GPU-hour", f"{risk.rate:.3g} ({_esc(risk.source)})")
    t.add_row("P(interrupted)", f"{d['interruption_probability']:.1%}")
    t.add_row("expected failures", f"{d['expected_failures']:.2f}")
    t.add_row("job MTBF", _h(d["job_mtbf_hours"]))
    if d["expected_lost_gpu_hours"] is not None:
        t.add_row(f"lost GPU-hours (checkpoint every {risk.checkpoint_min:g} min, restart {risk.restart_min:g} min)",
                  f"{d['expected_lost_gpu_hours']:.0f} ({d['expected_lost_fraction']:.1%} of the job)")
    if d["young_interval_min"] is not None:
        t.add_row(f"best checkpoint interval (Young, cost {risk.checkpoint_cost_min:g} min)",
                  f"{d['young_interval_min']:.0f} min")
    console.print(t)
    s = _table("same job at other sizes", "GPUs", "P(interrupted)")
    for n, p in scaling:
        s.add_row(f"{n}{' (this job)' if n == risk.gpus else ''}", f"{p:.1%}")
    console.print(s)


def render_suspects(records, show_all: bool, stream: IO[str] | None = None) -> None:
    console = _console(stream)
    rows = [r for r in records if r.suspect or show_all]
    if not rows:
        console.print(f"no suspect node: no node's jobs ended badly significantly more often than its partition's "
                      f"({len(records)} node-partition pairs with finished jobs)")
        return
    t = _table("gpuhc fleet suspects", "node", "partition", "jobs", "bad", "rate", "rest of partition", "p-value",
               "bad jobs (by state)", "suspect")
    for r in rows:
        states = ", ".join(f"{k} {v}" for k, v in sorted(r.by_state.items()))
        jobs = ",".join(r.bad_jobs[:5]) + (" ..." if r.bad > 5 else "")
        t.add_row(_esc(r.node), _esc(r.partition), str(r.jobs), str(r.bad), f"{r.rate:.1%}", f"{r.rest_rate:.1%}",
                  f"{r.p_value:.2g}", _esc(f"{jobs} ({states})" if r.bad else "-"), "YES" if r.suspect else "")
    console.print(t)


def render_incidents(incidents, rest, stream: IO[str] | None = None) -> None:
    console = _console(stream)
    if incidents:
        t = _table("gpuhc fleet incidents: suspect switches", "switch", "check", "nodes", "first", "last")
        for inc in incidents:
            t.add_row(_esc(inc.switch), _esc(inc.check), _esc(compress(inc.nodes)), _day(inc.first), _day(inc.last))
        console.print(t)
    else:
        console.print("no switch-level incident")
    if rest:
        t = _table("node failures in no incident", "node", "check", "since", "evidence", wrap_last=True)
        for f in rest:
            t.add_row(_esc(f.node), _esc(f.check), _day(f.time), _esc(f.detail))
        console.print(t)


def write_png(stats, path: str) -> None:
    """Drains per day, stacked by cause, with the fleet's MTBF in the title."""
    plt, fig, ax = new_figure(9)
    days = max((len(v) for v in stats.daily.values()), default=0)
    bottom = [0] * days
    for cause in sorted(stats.daily, key=lambda c: -sum(stats.daily[c]))[:12]:
        counts = stats.daily[cause]
        ax.bar(range(days), counts, bottom=bottom, label=cause)
        bottom = [b + c for b, c in zip(bottom, counts)]
    fleet = stats.of("fleet")[0]
    ax.set_xlabel(f"day since {time.strftime('%Y-%m-%d', time.localtime(stats.start))}")
    ax.set_ylabel("drains")
    ax.set_title(f"drains per day: {fleet.drains} in all, fleet MTBF {_h(fleet.mtbf_h)}, MTTR {_h(fleet.mttr_h)}, "
                 f"trend {fleet.trend}")
    ax.grid(True, axis="y", alpha=0.3)
    if stats.daily:
        ax.legend(fontsize=7)
    save_figure(plt, fig, path)
