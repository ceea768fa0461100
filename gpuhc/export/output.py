"""Show a run to a person (rich table on a TTY, plain lines in Slurm logs) or a machine (JSON),
and publish it to the event log and the Prometheus textfile when configured.

The JSON document is ``RunReport.to_dict()``; its schema is documented in docs/json-schema.md
and versioned by its ``schema`` field.
"""

from __future__ import annotations

import json
import sys
from typing import IO

from gpuhc.model.result import Status

_STYLE = {"pass": "green", "n/a": "dim", "warn": "yellow", "error": "magenta", "fail": "bold red"}


def render_report(report, json_mode: bool = False, verbose: bool = False, stream: IO[str] | None = None,
                  config=None) -> None:
    """``config``: the one the run used, so a finding's action reads "recommended: drain + reboot;
    this config: drain (remediation off)" where the config does less than gpuhc recommends."""
    stream = stream or sys.stdout
    if json_mode:
        json.dump(report.to_dict(), stream, indent=2, sort_keys=False)
        stream.write("\n")
        return
    if stream.isatty():
        _render_rich(report, verbose, stream, config)
    else:
        for line in plain_lines(report, verbose, config):
            stream.write(line + "\n")


def shown(report, verbose: bool):
    """Results worth a line: everything when verbose, otherwise what is not a plain pass."""
    return [r for r in report.results if verbose or r.status not in (Status.PASS, Status.NA)]


def summary(report) -> str:
    counts: dict[str, int] = {}
    for r in report.results:
        counts[r.status.value] = counts.get(r.status.value, 0) + 1
    parts = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    prof = f" profile={report.profile}" if report.profile else ""
    replay = f" (replay of {report.replay})" if getattr(report, "replay", None) else ""
    return (
        f"gpuhc {report.stage} {report.node}{replay}: {report.status.value.upper()} "
        f"({parts or 'no checks'}) in {report.duration_s * 1000:.0f} ms{prof}"
    )


def _clean(text: object) -> str:
    # Names and messages quote recorded or hand-written input: one result stays one line, and
    # a terminal must not obey what is in it.
    from gpuhc.text.logtext import escape

    return escape(text)


def message_of(result) -> str:
    """The message without a leading repeat of the subject, which the line already names
    ("ecc gpu0: no uncorrectable ECC errors", not "ecc gpu0: gpu0 no ..."), with the held note
    of a held finding. The message itself keeps the subject and has no note: a drain reason or
    a JSON reader sees the message alone."""
    msg, subject = str(result.message), str(result.subject)
    for lead in (subject + ": ", subject + " "):
        if subject != "node" and msg.startswith(lead):
            msg = msg[len(lead):]
            break
    # A held finding says so, and what releases it (the xid check's ``value.held``); kept out
    # of the message itself, which is the drain reason and must not change while it is held.
    held = result.value.get("held") if isinstance(result.value, dict) else None
    return f"{msg} ({held})" if isinstance(held, str) and held else msg


def action_text(action, config) -> str:
    """A finding's action as this install will take it (gpuhc/catalog/acts.py); '' for none."""
    if action.value == "none":
        return ""
    if config is None:
        return action.value
    from gpuhc.catalog.acts import recommended

    return recommended(action, config)


def plain_lines(report, verbose: bool = False, config=None) -> list[str]:
    lines = [_clean(summary(report))]
    for r in shown(report, verbose):
        act = f" [action: {action_text(r.action, config)}]" if r.action.value != "none" else ""
        lines.append(_clean(f"  {r.status.value.upper():5} {r.check} {r.subject}: {message_of(r)}{act}"))
    lines += [_clean(f"  note: {n}") for n in report.notes]
    return lines


def _render_rich(report, verbose: bool, stream: IO[str], config=None) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    def text(value: object) -> str:
        # Messages quote kernel log lines (an Xid's process name is the user's to choose) and
        # paths: square brackets in them are text, not rich markup.
        return escape(_clean(value))

    console = Console(file=stream)
    table = Table(title=text(summary(report)), title_justify="left", show_lines=False)
    for col in ("status", "check", "subject", "message", "value", "threshold", "action"):
        table.add_column(col, overflow="fold")
    rows = shown(report, verbose)
    for r in rows:
        style = _STYLE.get(r.status.value, "")
        table.add_row(
            f"[{style}]{r.status.value}[/]",
            text(r.check),
            text(r.subject),
            text(message_of(r)),
            "" if r.value is None else text(r.value),
            "" if r.threshold is None else text(r.threshold),
            action_text(r.action, config),
        )
    if rows:
        console.print(table)
    else:
        console.print(f"[green]{text(summary(report))}[/]")
        console.print(f"[dim]all {len(report.results)} results pass or n/a; --verbose shows them[/]")
    for note in report.notes:
        console.print(f"[yellow]note:[/] {text(note)}")


def publish(report, config) -> list[str]:
    """Append to the event log and write the Prometheus textfile, when configured.

    Returns problems as strings: a full disk must not change the verdict or the exit code.
    """
    out = config.section("output")
    problems: list[str] = []
    doc = None
    if out.get("event_log"):
        from gpuhc.export.eventlog import append_event

        doc = report.to_dict()
        err = append_event(out["event_log"], doc)
        if err:
            problems.append(err)
    if out.get("prometheus_textfile"):
        try:
            from gpuhc.export.prometheus import write_textfile

            write_textfile(out["prometheus_textfile"], doc or report.to_dict())
        except Exception as e:
            problems.append(f"prometheus textfile {out['prometheus_textfile']}: {e}")
    return problems
