"""`gpuhc explain xid|sxid [CODE]`: what gpuhc knows about an Xid/SXid and what it will do.

Answers the on-call question "the node was drained for Xid 119, what does that mean?" from the
same catalog the checks use, so the explanation can never disagree with the verdict.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click


def _entries(kind: str, code: int | None) -> list[dict[str, Any]]:
    from gpuhc import xid_catalog as cat

    if kind == "xid":
        if code is None:
            return [i.to_dict() for i in cat.xid_table().values()]
        return [cat.xid_info(code).to_dict()]
    if code is None:
        return [i.to_dict() for i in cat.sxid_table().values()]
    return [cat.sxid_info(code).to_dict()]


def _verdict(kind: str, e: dict[str, Any]) -> str:
    if kind == "xid":
        if e["severity"] == "ignore":
            return "ignored"
        what = "FAIL" if e["severity"] == "fail" else "WARN"
        return f"{what}, action: {e['action']}" + (" (application error)" if e["app"] else "")
    return f"FAIL, action: {e['action']}" if e["fatal"] else "WARN (non-fatal), action: none"


def _plain(kind: str, entries: list[dict[str, Any]], single: bool) -> list[str]:
    label = "Xid" if kind == "xid" else "SXid"
    if not single:
        return [f"{label} {e[kind]:>5}  {_verdict(kind, e):<45}  {e['name']}" for e in entries]
    e = entries[0]
    lines = [f"{label} {e[kind]}: {e['name']}",
             f"  gpuhc:   {_verdict(kind, e)}",
             f"  meaning: {e['meaning']}"]
    if e.get("note"):
        lines.append(f"  note:    {e['note']}")
    return lines


def _rich(kind: str, entries: list[dict[str, Any]], single: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    label = "Xid" if kind == "xid" else "SXid"
    if single:
        e = entries[0]
        console.print(f"[bold]{label} {e[kind]}[/]: {e['name']}", highlight=False)
        console.print(f"  [bold]gpuhc[/]    {_verdict(kind, e)}", highlight=False)
        console.print(f"  [bold]meaning[/]  {e['meaning']}", highlight=False)
        if e.get("note"):
            console.print(f"  [bold]note[/]     {e['note']}", highlight=False)
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


@click.command()
@click.argument("kind", type=click.Choice(["xid", "sxid"], case_sensitive=False))
@click.argument("code", type=click.IntRange(min=0), required=False)
@click.option("--json", "json_mode", is_flag=True, help="Print JSON instead of text.")
def explain(kind: str, code: int | None, json_mode: bool) -> None:
    """Explain an Xid or NVSwitch SXid: its meaning and what gpuhc does about it.

    Without CODE, print the whole catalog. Unknown codes show the default verdict."""
    kind = kind.lower()
    entries = _entries(kind, code)
    if json_mode:
        click.echo(json.dumps(entries[0] if code is not None else entries, indent=2))
    elif sys.stdout.isatty():
        _rich(kind, entries, code is not None)
    else:
        for line in _plain(kind, entries, code is not None):
            click.echo(line)
