"""`gpuhc baseline capture|show`: record a known-good node's hardware layout, and read it back."""

from __future__ import annotations

import json
import sys

import click

from gpuhc.cli import CONTEXT
from gpuhc.cli.common import (
    SourceArgs,
    node_name,
    replay_scope,
    run_options_from,
    source_options,
    write_output,
)
from gpuhc.cli.params import Seconds
from gpuhc.text.limits import MAX_WAIT_S
from gpuhc.text.logtext import escape


@click.group(context_settings=CONTEXT)
def baseline() -> None:
    """Record this node's known-good hardware layout, to judge later runs against it.

    Capture on a node that just passed burn-in, keep the file on the node and point
    `node.baseline` in gpuhc.yaml at it.
    """


@baseline.command()
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write here instead of stdout.")
@click.option("--timeout", type=Seconds(), default=30.0, show_default=True,
              help=f"Seconds to wait for the sources (0.1 to {MAX_WAIT_S:g}).")
@click.option("--topology/--no-topology", default=None,
              help="Also record GPU/NIC topology through the active checks (default: on a live node only).")
@click.option("--force", is_flag=True, help="Write even when the node does not look healthy.")
@source_options
def capture(src: SourceArgs, output: str | None, timeout: float, topology: bool | None, force: bool) -> None:
    """Read this node (or a scenario) and write its baseline.

    Refused when the node fails (or gpuhc cannot judge) its passive checks, or looks doubtful
    (mixed models, links below their maximum): a baseline would make that look normal. --force
    writes it anyway and records in it that it was forced, and why.
    """
    from gpuhc.state.baseline import capture as capture_doc
    from gpuhc.state.baseline import doubts
    from gpuhc.errors import GpuhcError
    from gpuhc.run.runner import read_snapshot, run_stage

    with replay_scope(src) as (src, _):
        opts = run_options_from(src, "passive")
        report = run_stage(opts)  # the same verdict `gpuhc check` gives this node
    spec = opts.sources
    snap = read_snapshot(spec, node_name(src.hostname), timeout, src.step)
    problems = [f"{r.check} {r.subject}: {r.status.value}: {r.message}" for r in report.results
                if r.status.value in ("fail", "error")] + doubts(snap)
    for p in problems:
        click.echo(f"gpuhc: warning: {escape(p)}", err=True)
    if problems and not force:
        raise GpuhcError(f"node does not look healthy ({len(problems)} problem(s) above); a baseline would make "
                         "them look normal. Fix the node, or pass --force")
    doc = capture_doc(snap)
    if problems:
        doc["forced"] = {"problems": problems}

    want_topology = topology if topology is not None else not spec.nvml_scenario
    if want_topology:
        try:
            from gpuhc.active import capture_topology

            doc["topology"] = capture_topology(timeout_s=max(10.0, timeout))
        except Exception as e:  # optional unless asked for: the rest of the baseline still helps
            if topology:
                raise GpuhcError(f"could not record the topology: {e}") from None
            click.echo(f"gpuhc: warning: topology not recorded: {e}", err=True)

    text = _render_doc(doc, src.json_mode)
    if output:
        write_output(output, text, "baseline")
        click.echo(f"wrote {output} ({doc['gpu_count']} GPUs, {len(doc.get('ib') or {})} IB ports)", err=True)
    else:
        sys.stdout.write(text)


@baseline.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--json", "json_mode", is_flag=True, help="Print the checked document as JSON.")
def show(file: str, json_mode: bool) -> None:
    """Check a baseline file and print it."""
    from gpuhc.state.baseline import load, render

    doc = load(file)
    if json_mode:
        click.echo(json.dumps(doc, indent=2, sort_keys=False))
    else:
        click.echo(render(doc))


def _render_doc(doc: dict, json_mode: bool) -> str:
    if json_mode:
        return json.dumps(doc, indent=2) + "\n"
    import yaml

    header = "# gpuhc baseline: this node's known-good layout; `gpuhc baseline show FILE` to read it\n"
    return header + yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=110)
