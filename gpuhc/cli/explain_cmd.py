"""`gpuhc explain xid|sxid|signal|check|evidence [CODE]`: what gpuhc knows about an Xid, an SXid or a driver
message without an Xid ("signal"), and what it will do.

Answers the on-call question "the node was drained for Xid 119, what does that mean?" from the
same catalog the checks use, so the explanation can never disagree with the verdict.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from gpuhc.cli import CONTEXT
from gpuhc.cli.tables import Table, asked, table_options


LABELS = {"xid": "Xid", "sxid": "SXid", "signal": "Driver signal"}


def _entries(kind: str, code: int | str | None) -> list[dict[str, Any]]:
    from gpuhc.catalog import xid as cat

    if kind == "signal":
        table = cat.signal_table()
        if code is None:
            return [dict(i.to_dict(), signal=name) for name, i in table.items()]
        return [dict(table[str(code)].to_dict(), signal=str(code))]
    if kind == "xid":
        if code is None:
            return [i.to_dict() for i in cat.xid_table().values()]
        from gpuhc.catalog.xid_subcodes import table

        subcodes = table(int(code))  # Xid 144-150: judged by sub-code, not by the number
        return [dict(cat.xid_info(code).to_dict(), **({"subcodes": subcodes} if subcodes else {}))]
    if code is None:
        return [i.to_dict() for i in cat.sxid_table().values()]
    return [cat.sxid_info(code).to_dict()]


def _verdict(kind: str, e: dict[str, Any]) -> str:
    if kind in ("xid", "signal"):
        if e["severity"] == "ignore":
            return "ignored"
        what = "FAIL" if e["severity"] == "fail" else "WARN"
        if e.get("drain_after", 1) > 1:
            what = f"WARN; FAIL at {e['drain_after']} on one GPU in the window"
        return f"{what}, action: {e['action']}" + (" (application error)" if e["app"] else "")
    return f"FAIL, action: {e['action']}" if e["fatal"] else "WARN (non-fatal), action: none"


def _this_install(entry: dict[str, Any]) -> None:
    """Beside what gpuhc recommends, what this install's config makes of it (gpuhc/catalog/acts.py):
    "recommended: drain + reboot; this config: drain (remediation off)". A config that does not
    load says nothing here: explain describes the catalog, and `config validate` names the error."""
    if entry.get("action") in (None, "none") or entry.get("severity") == "ignore":
        return
    from gpuhc.catalog.acts import recommended, this_config
    from gpuhc.config.load import load_config
    from gpuhc.errors import ConfigError

    try:
        config = load_config()
    except ConfigError:
        return
    if this_config(entry["action"], config):
        entry["this_config"] = recommended(entry["action"], config) + f" ({config.path or 'built-in defaults'})"


def _plain(kind: str, entries: list[dict[str, Any]], single: bool) -> list[str]:
    label = LABELS[kind]
    if not single:
        # codes right-aligned like numbers, signal names left-aligned like words
        width = max(len(str(e[kind])) for e in entries)
        align = "<" if kind == "signal" else ">"
        return [f"{label} {str(e[kind]):{align}{max(width, 5)}}  {_verdict(kind, e):<45}  {e['name']}" for e in entries]
    e = entries[0]
    lines = [f"{label} {e[kind]}: {e['name']}",
             f"  gpuhc:   {_verdict(kind, e)}",
             *([f"  here:    {e['this_config']}"] if e.get("this_config") else []),
             f"  meaning: {e['meaning']}"]
    if e.get("note"):
        lines.append(f"  note:    {e['note']}")
    if e.get("differs"):
        lines.append(f"  differs from NVIDIA: {e['differs']}")
    lines.extend(_subcode_lines(e))
    return lines


def _subcode_lines(e: dict[str, Any]) -> list[str]:
    """The sub-code table of an Xid 144-150, one row per unit and error status."""
    rows = e.get("subcodes") or []
    if not rows:
        return []
    out = ["  sub-codes (the line's unit and error status decide; NVIDIA's 144-150 decode):"]
    width = max(len(r["unit"]) for r in rows)
    for r in rows:
        what = "FAIL, action: " + r["action"] if r["severity"] == "fail" else "WARN, action: none"
        out.append(f"    {r['unit']:<{width}}  {r['status'] or 'any status':<10}  {r['nvidia']:<12}  {what}")
    return out


def _rich(kind: str, entries: list[dict[str, Any]], single: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    label = LABELS[kind]
    if single:
        e = entries[0]
        console.print(f"[bold]{label} {e[kind]}[/]: {e['name']}", highlight=False)
        console.print(f"  [bold]gpuhc[/]    {_verdict(kind, e)}", highlight=False)
        if e.get("this_config"):
            console.print(f"  [bold]here[/]     {e['this_config']}", highlight=False)
        console.print(f"  [bold]meaning[/]  {e['meaning']}", highlight=False)
        if e.get("note"):
            console.print(f"  [bold]note[/]     {e['note']}", highlight=False)
        if e.get("differs"):
            console.print(f"  [bold]differs from NVIDIA[/]  {e['differs']}", highlight=False)
        for line in _subcode_lines(e):
            console.print(line, highlight=False, markup=False)
        return
    table = Table(title=f"gpuhc {label} catalog")
    table.add_column(label, justify="right")
    table.add_column("gpuhc does")
    table.add_column("name")
    styles = {"fail": "red", "warn": "yellow", "ignore": "dim"}
    for e in entries:
        sev = e.get("severity") or ("fail" if e.get("fatal") else "warn")
        table.add_row(str(e[kind]), f"[{styles[sev]}]{_verdict(kind, e)}[/]", e["name"])
    console.print(table)


def _code(kind: str, code: str | None) -> int | str | None:
    """CODE as the kind wants it: a number for Xids and SXids, a known name for signals."""
    if code is None:
        return None
    if kind == "signal":
        from gpuhc.catalog.xid import signal_table

        if code not in signal_table():
            raise click.BadParameter(f"{code!r} is no driver signal (known: {', '.join(signal_table())})",
                                     param_hint="CODE")
        return code
    if not (code.isascii() and code.isdigit()):
        raise click.BadParameter(f"{code!r} is not a {LABELS[kind]} number (a whole number >= 0)", param_hint="CODE")
    return int(code)


def _check_lines(code: str | None) -> list[str]:
    """``explain check [ID]``: a check's one line, stages, sources and default thresholds, from
    the registry the runner uses (so it cannot disagree with a run)."""
    from gpuhc.checks import all_checks

    checks = {c.id: c for c in all_checks()}
    if code is None:
        return [f"{c.id:<16} {getattr(c, 'doc', '') or ''}" for c in checks.values()]
    if code not in checks:
        raise click.BadParameter(f"{code!r} is no check (known: {', '.join(checks)})", param_hint="CODE")
    c = checks[code]
    lines = [f"check {c.id}: {getattr(c, 'doc', '') or ''}",
             f"  stages:     {', '.join(c.stages)}",
             f"  reads:      {', '.join((*c.needs, *getattr(c, 'optional', ()))) or 'nothing'}",
             "  thresholds (defaults; a profile and checks.<id>.thresholds override them):"]
    lines += [f"    {k}: {json.dumps(v)}" for k, v in c.defaults.items()]
    lines.append("  details: docs/checks.md")
    return lines


def _evidence(code: str | None, json_mode: bool) -> None:
    """``explain evidence [CLASS]``: what each class of evidence buys, from the table the
    runner and the lemon rule read (gpuhc/catalog/evidence.py), so it cannot disagree with a run."""
    from gpuhc.catalog.evidence import HOLDS, TABLE, by_id

    if code is not None and code not in {e.id for e in TABLE}:
        raise click.BadParameter(f"{code!r} is no class of evidence (known: {', '.join(e.id for e in TABLE)})",
                                 param_hint="CODE")
    rows = [by_id(code)] if code is not None else list(TABLE)
    if json_mode:
        docs = [e.to_dict() for e in rows]
        click.echo(json.dumps(docs[0] if code is not None else docs, indent=2))
        return
    for e in rows:
        click.echo(f"{e.id:<18} {e.kind:<8} {e.what}")
        click.echo(f"{'':<18} WARN: {e.warn}; drain: {e.drain_text()}; reboot: {e.reboot}; ticket: {e.ticket}; "
                   f"lemon: {'yes' if e.lemon else 'no'}")
    click.echo("held: consecutive runs that saw it, spanning the time (defaults; the config's evidence section "
               "sets them): " + ", ".join(f"{n} {h.runs} runs over {h.span_s:g} s" for n, h in HOLDS.items()))


# The catalogs' table for -o/--parsable/--noheader: code is the Xid, the SXid or the signal's name
CATALOG = Table({"code": 8, "severity": 8, "action": 14, "does": 45, "name": 0}, default=("code", "does", "name"))


def _catalog_row(kind: str, e: dict[str, Any]) -> dict[str, Any]:
    return {"code": e[kind], "severity": e.get("severity") or ("fail" if e.get("fatal") else "warn"),
            "action": e.get("action"), "does": _verdict(kind, e), "name": e["name"]}


@click.command(context_settings=CONTEXT)
@click.argument("kind", type=click.Choice(["xid", "sxid", "signal", "check", "evidence"], case_sensitive=False))
@click.argument("code", required=False)
@click.option("--json", "json_mode", is_flag=True, help="Print JSON instead of text.")
@table_options(CATALOG)
def explain(kind: str, code: str | None, json_mode: bool, fmt: str | None, parsable: bool, noheader: bool) -> None:
    """Explain an Xid, an NVSwitch SXid, a driver message without an Xid (signal: e.g.
    reset_required), a check (check: e.g. pcie-aer), or a class of evidence (evidence: e.g. service,
    what it buys: WARN, drain, reboot, ticket, lemon): its meaning and what gpuhc does about it.

    Without CODE, print the whole catalog. Unknown Xid codes show the default verdict. -o,
    --parsable and --noheader print the xid, sxid and signal catalogs (or one entry) as a table."""
    kind = kind.lower()
    if asked(fmt, parsable, noheader) and kind in ("check", "evidence"):
        raise click.UsageError("-o, --parsable and --noheader print the xid, sxid and signal catalogs")
    if kind == "evidence":  # what each class of evidence buys: WARN, drain, reboot, ticket, lemon
        _evidence(code, json_mode)
        return
    if kind == "check":  # a check of the node around the GPUs (or any other) by its id
        for line in _check_lines(code):
            click.echo(line)
        return
    code = _code(kind, code)
    entries = _entries(kind, code)
    if code is not None:
        _this_install(entries[0])
    if json_mode:
        click.echo(json.dumps(entries[0] if code is not None else entries, indent=2))
    elif asked(fmt, parsable, noheader):
        for line in CATALOG.lines([_catalog_row(kind, e) for e in entries], fmt, parsable, noheader):
            click.echo(line)
    elif sys.stdout.isatty():
        _rich(kind, entries, code is not None)
    else:
        for line in _plain(kind, entries, code is not None):
            click.echo(line)
