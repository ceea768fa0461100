"""`gpuhc sweep ...`: multi-node all-reduce probes that find the node (or link) slowing the fabric.

Who runs what:

- ``submit`` and ``analyze`` run on an admin host from cron as a Slurm *operator* (``sbatch
  --priority`` and draining need it; root works too). ``analyze --apply`` is the only step that
  changes a node.
- ``run`` is the job side, started by the launcher inside each probe job; it runs as the job's
  (unprivileged) user and only writes its results file.
- ``report`` and ``simulate`` only read (simulate touches nothing outside a temporary directory).
"""

from __future__ import annotations

import json
import sys

import click

from gpuhc.cli import CONTEXT
from gpuhc.cli.params import Number
from gpuhc.errors import EXIT_INTERNAL, EXIT_UNHEALTHY
from gpuhc.sweep.simulate import MAX_GROUP_SIZE, MAX_NODES


@click.group(context_settings=CONTEXT)
def sweep() -> None:
    """Fabric probes: NCCL all-reduce sweeps across idle nodes, judged per payload size,
    with follow-up rounds that name the bad node.

    Cron, as a Slurm operator:  gpuhc sweep analyze --apply; gpuhc sweep submit
    """


def _config_options(fn):
    fn = click.option("--state-dir", type=click.Path(file_okay=False), help="State directory (default $GPUHC_STATE_DIR or config state_dir).")(fn)
    fn = click.option("--config", "config_path", type=click.Path(dir_okay=False), help="gpuhc.yaml (default $GPUHC_CONFIG or /etc/gpuhc/gpuhc.yaml).")(fn)
    return fn


def _context(config_path: str | None, state_dir: str | None):
    from gpuhc.config.load import load_config
    from gpuhc.state.node import default_state_dir
    from gpuhc.sweep.settings import sweep_section
    from gpuhc.sweep.store import SweepStore

    config = load_config(config_path)
    section = sweep_section(config)
    state = state_dir or default_state_dir(config.data.get("state_dir"))
    return config, section, SweepStore(state, section.get("results_dir"))


def _limited(name: str, kind: type = int):
    """A click type with the range the config schema has for this setting (one source:
    gpuhc.sweep.settings.RUN_LIMITS)."""
    from gpuhc.sweep.settings import RUN_LIMITS

    lo, hi = RUN_LIMITS[name]
    return Number(lo, hi) if kind is float else click.IntRange(lo, hi)


@sweep.command("run")
@click.option("--backend", type=click.Choice(["nccl", "mpi"]), default="nccl", show_default=True)
@click.option("--sweep-id", default="adhoc", show_default=True)
@click.option("--group-id", default="g0", show_default=True)
@click.option("--nodes", default="", help="The planned nodes, comma-separated (names ranks that never report).")
@click.option("--results-dir", type=click.Path(file_okay=False), help="Write <dir>/<sweep>/<group>.json.")
@click.option("--out", type=click.Path(dir_okay=False), help="Write the results to this file instead.")
@click.option("--min-bytes", type=_limited("min_bytes"), default=8, show_default=True)
@click.option("--max-bytes", type=_limited("max_bytes"), default=2 << 30, show_default=True)
@click.option("--factor", type=_limited("factor"), default=2, show_default=True)
@click.option("--warmup", type=_limited("warmup"), default=5, show_default=True)
@click.option("--iters", type=_limited("iters"), default=20, show_default=True, help="Timed iterations per bandwidth size.")
@click.option("--latency-iters", type=_limited("latency_iters"), default=100, show_default=True,
              help="Timed iterations per latency size, each timed alone.")
@click.option("--latency-max-bytes", type=_limited("latency_max_bytes"), default=1 << 20, show_default=True,
              help="Sizes up to this get per-iteration timing (p50/p95/p99).")
@click.option("--timeout-s", type=_limited("timeout_s", float), default=120.0, show_default=True,
              help="A collective slower than this is declared hung.")
@click.option("--table/--no-table", default=True, help="Rank 0 prints the size table when done.")
def run_cmd(**kw) -> None:
    """Job side: time all-reduce at every size with one rank per GPU (run it under srun/mpiexec)."""
    from gpuhc.sweep.stats import size_ladder
    from gpuhc.sweep.worker import RunSpec, run

    try:
        size_ladder(kw["min_bytes"], kw["max_bytes"], kw["factor"])
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--min-bytes/--max-bytes") from None
    table = kw.pop("table")
    nodes = [n for n in kw.pop("nodes").split(",") if n]
    spec = RunSpec(nodes=nodes, **kw)
    if not spec.out and not spec.results_dir:
        raise click.UsageError("give --results-dir or --out")
    code = run(spec)
    from mpi4py import MPI

    if code == 0 and table and spec.out and MPI.COMM_WORLD.Get_rank() == 0:
        from gpuhc.sweep.chart import size_table
        from gpuhc.sweep.store import read_json

        click.echo(size_table(read_json(spec.out) or {}))
    sys.exit(code)


@sweep.command("submit")
@_config_options
@click.option("--dry-run", is_flag=True, help="Plan and print the sbatch command lines; submit nothing, record nothing.")
@click.option("--test-fault", metavar="SPEC", help="TEST ONLY: give every job of this sweep GPUHC_SWEEP_FAULT=SPEC "
              "(otherwise the job scripts unset it). Never in production: it makes healthy nodes look bad.")
@click.option("--json", "json_mode", is_flag=True)
def submit_cmd(config_path, state_dir, dry_run, test_fault, json_mode) -> None:
    """Plan groups among idle nodes and submit one probe job per group (for cron; returns fast).

    Does nothing while the previous sweep still has jobs queued or running, or still needs
    analyzing. Needs Slurm operator rights when sweep.job.priority is set. Exit code 3 when
    sbatch refused a job (each refusal is printed), and, with a warning on stderr, when the
    previous sweep's finished jobs still wait for `analyze` at a second submit: analyze is
    failing or not running, and no sweep can start.
    """
    from gpuhc.fleet.gather import suspects_for_sweep
    from gpuhc.sweep.slurmcli import SlurmCli
    from gpuhc.sweep.submit import submit_sweep

    config, section, store = _context(config_path, state_dir)
    if not section.get("results_dir") and not dry_run:
        # Not an error (one host running its own probes works), but never silent: the jobs on
        # other nodes write where analyze cannot read (README, "systemd timer or cron").
        click.echo(f"gpuhc sweep submit: sweep.results_dir is not set: results go to {store.results_dir}, on this "
                   "host; probe jobs on other nodes write to their own disks unless it is shared storage "
                   "(`gpuhc doctor` on the admin host)", err=True)
    notes: list[str] = []
    out = submit_sweep(section, store, dry_run=dry_run, cli=SlurmCli.from_config(config), test_fault=test_fault,
                       suspects=suspects_for_sweep(config, notes.append))
    if out.get("suspects_first"):
        notes.append(f"probing first {len(out['suspects_first'])} suspect node(s) (`gpuhc fleet suspects`): "
                     + ", ".join(out["suspects_first"][:10]))
    out.setdefault("lines", []).extend(notes)
    _emit(out, json_mode)
    # A job sbatch refused is a sweep that did not happen: cron (or the timer) must see it fail.
    if out.get("stalled") or any(g.get("submit_error") for g in out.get("groups") or ()):
        sys.exit(EXIT_INTERNAL)


@sweep.command("analyze")
@_config_options
@click.option("--apply", is_flag=True, help="Drain the named culprit nodes through the Slurm drain policy (operator rights).")
@click.option("--no-submit", is_flag=True, help="Do not submit follow-up rounds even if configured to.")
@click.option("--allow-fault-hook", is_flag=True, help="TEST ONLY: let --apply drain on results made with the "
              "test-only fault hook (GPUHC_SWEEP_FAULT).")
@click.option("--json", "json_mode", is_flag=True)
def analyze_cmd(config_path, state_dir, apply, no_submit, allow_fault_hook, json_mode) -> None:
    """Judge finished probe jobs, submit follow-up rounds, name (and with --apply drain) culprits.

    The exit status says whether this call found and acted on a failure, whatever the state of
    the round: 1 when a culprit is named in the current sweep (also while a follow-up round still
    runs) or this call drained a node; 4 when the circuit breaker withheld a drain (retried next
    time); 3 when a Slurm command failed or a drain could not be verified (retried next time);
    0 when nothing is named and nothing was done (including "still running" and "no sweep").
    A results file that cannot be used (not JSON, wrong shape, a link, a FIFO, too big) is that
    group's error, said on stderr; the other groups are judged as usual.
    """
    from gpuhc.sweep.analyze import analyze_sweep, exit_status
    from gpuhc.sweep.slurmcli import SlurmCli

    config, section, store = _context(config_path, state_dir)
    out = analyze_sweep(section, store, apply=apply, submit=not no_submit, config=config,
                        cli=SlurmCli.from_config(config), allow_fault_hook=allow_fault_hook)
    _emit(out, json_mode)
    sys.exit(exit_status(out))


@sweep.command("report")
@_config_options
@click.option("--sweep-id", help="This sweep (default: the latest).")
@click.option("--node", "nodes", multiple=True, help="History of this node (repeatable).")
@click.option("--png", type=click.Path(dir_okay=False), help="Also draw the busbw curves to this PNG (needs the plot extra).")
@click.option("--json", "json_mode", is_flag=True)
def report_cmd(config_path, state_dir, sweep_id, nodes, png, json_mode) -> None:
    """History per node and per group, and the busbw-vs-size curves of a sweep."""
    from gpuhc.sweep.report import build_report, render_report

    config, section, store = _context(config_path, state_dir)
    rep = build_report(store, section, sweep_id, list(nodes))
    if png:
        from gpuhc.sweep.chart import write_png

        write_png(rep["curves"], png, title=f"sweep {rep.get('sweep_id')}")
        rep["png"] = png
    if json_mode:
        click.echo(json.dumps(rep, indent=1, default=str))
    else:
        render_report(rep)
        if png:
            click.echo(f"wrote {png}")
    _warn(rep.get("warnings", []))


@sweep.command("simulate")
@click.option("--nodes", "n_nodes", type=click.IntRange(2, MAX_NODES), default=1024, show_default=True,
              help=f"Nodes in the synthetic cluster (2 to {MAX_NODES}).")
@click.option("--bad", type=click.IntRange(0), default=3, show_default=True, help="Bad nodes to hide (at most --nodes).")
@click.option("--bad-links", type=click.IntRange(0), default=0, show_default=True,
              help="Bad node pairs (links) to hide (at most one per first-round group).")
@click.option("--group-size", type=click.IntRange(2, MAX_GROUP_SIZE), default=2, show_default=True,
              help="Nodes per probe job (at most --nodes).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--noise", type=Number(0, 0.5), default=0.03, show_default=True, help="Relative measurement noise (sigma).")
@click.option("--glitch-rate", type=Number(0, 1), default=0.002, show_default=True,
              help="Chance that a healthy group's run is disturbed (a transient).")
@click.option("--strategy", type=click.Choice(["auto", "isolate", "bisect"]), default="auto", show_default=True)
@click.option("--max-rounds", type=click.IntRange(1, 20), default=4, show_default=True)
@click.option("--kinds", default="slow,laggy,broken", show_default=True,
              help="Fault kinds the bad nodes are drawn from (comma-separated: slow, laggy, broken).")
@click.option("--slow-bw", default="0.35,0.6", show_default=True, metavar="LO,HI",
              help="A slow node's bandwidth as a fraction of healthy, drawn from LO..HI (0.75,0.85: 15-25 % slow).")
@click.option("--gpu", default="", help="NVML name the simulated ranks report (default an H100): picks the GPU "
              "profile, e.g. 'NVIDIA A100-SXM4-80GB' for fleet-only judging.")
@click.option("--threshold", "thresholds", multiple=True, metavar="KEY=VALUE",
              help="Set sweep.thresholds.nccl.default.KEY (repeatable; 'null' switches a bound off).")
@click.option("--json", "json_mode", is_flag=True)
def simulate_cmd(json_mode, **kw) -> None:
    """Run the real planner, judge and localizer against a synthetic cluster with hidden bad nodes."""
    from gpuhc.errors import GpuhcError
    from gpuhc.sweep.simulate import SimSpec, check_spec, simulate

    spec = SimSpec(nodes=kw["n_nodes"], bad=kw["bad"], bad_links=kw["bad_links"], group_size=kw["group_size"],
                           seed=kw["seed"], noise=kw["noise"], glitch_rate=kw["glitch_rate"],
                           strategy=kw["strategy"], max_rounds=kw["max_rounds"], kinds=_kinds(kw["kinds"]),
                           slow_bw=_fraction_range(kw["slow_bw"]), gpu=kw["gpu"],
                           thresholds=_threshold_pairs(kw["thresholds"]))
    try:
        check_spec(spec)
    except GpuhcError as e:
        raise click.UsageError(str(e)) from None
    out = simulate(spec)
    if json_mode:
        click.echo(json.dumps(out, indent=1))
    else:
        click.echo(
            f"{out['nodes']} nodes, {len(out['bad_nodes'])} bad ({', '.join(out['bad_nodes']) or '-'}): "
            f"{out['rounds']} rounds, {out['jobs']} jobs; found {len(out['found'])}, missed {len(out['missed'])}, "
            f"false accusations {len(out['false_accusations'])}"
        )
        for r in out["per_round"]:
            click.echo(f"  round {r['round']}: {r['groups']} groups, {r['failed']} failed")
    sys.exit(0 if out["ok"] else EXIT_UNHEALTHY)


def _kinds(text: str) -> tuple[str, ...]:
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    bad = [k for k in kinds if k not in ("slow", "laggy", "broken")]
    if not kinds or bad:
        raise click.BadParameter(f"unknown fault kind {', '.join(bad) or '(none)'} (known: slow, laggy, broken)",
                                 param_hint="--kinds")
    return kinds


def _fraction_range(text: str) -> tuple[float, float]:
    try:
        lo, hi = (float(x) for x in text.split(","))
    except ValueError:
        raise click.BadParameter(f"expected LO,HI (two numbers), got {text!r}", param_hint="--slow-bw") from None
    if not 0.0 < lo <= hi <= 1.0:
        raise click.BadParameter(f"need 0 < LO <= HI <= 1, got {text!r}", param_hint="--slow-bw")
    return lo, hi


def _threshold_pairs(items: tuple[str, ...]) -> dict:
    from gpuhc.errors import ConfigError
    from gpuhc.sweep.settings import validate_thresholds

    out: dict = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq:
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="--threshold")
        try:
            out[key.strip()] = None if value.strip() == "null" else (int(value) if value.strip().isdigit() else float(value))
        except ValueError:
            raise click.BadParameter(f"not a number: {item!r}", param_hint="--threshold") from None
    try:
        validate_thresholds({"nccl": {"default": out}}, path=("sweep", "thresholds"))
    except ConfigError as e:
        raise click.BadParameter(str(e), param_hint="--threshold") from None
    return out


def _emit(out: dict, json_mode: bool) -> None:
    """Lines to stdout (or the whole answer as JSON); warnings also to stderr, whatever the
    mode, so that cron mails them."""
    if json_mode:
        click.echo(json.dumps(out, indent=1, default=str))
    else:
        from gpuhc.text.logtext import escape

        # Node names and errors in these lines come from files probe jobs wrote: every line
        # that reaches the cron log is escaped, so a planted "\r" or "\n" cannot forge one.
        for line in out.get("lines", []):
            for part in str(line).split("\n"):
                click.echo(escape(part))
    _warn(out.get("warnings", []))


def _warn(lines: list[str]) -> None:
    from gpuhc.text.logtext import escape

    for line in lines:
        click.echo(f"gpuhc: warning: {escape(line)}", err=True)
