"""`gpuhc healthcheck`, `gpuhc prolog`, `gpuhc epilog`: what Slurm runs (through slurm/*.sh).

They take the same replay options as `gpuhc check`, so a test (or an admin) can run the real
flow against a scenario. Exit codes: 0 healthy (or gpuhc broke in a prolog/epilog: fail open),
1 unhealthy, 2 usage/config error (health check), 3 gpuhc could not judge or Slurm did not
answer, 4 circuit breaker open (health check).
"""

from __future__ import annotations

import click

from gpuhc.cli import CONTEXT
from gpuhc.cli.common import SourceArgs, source_options
from gpuhc.cli.slurm_run import run


@click.command(context_settings=CONTEXT)
@source_options
def healthcheck(src: SourceArgs) -> None:
    """Slurm HealthCheckProgram: passive checks, then drain/resume this node.

    Drains on failure with a `gpuhc:` reason; resumes only nodes it drained, after
    slurm.resume_after clean runs and the cool-down; never touches a reason it did not set.
    Asks Slurm nothing when the node is healthy and not held by gpuhc.
    """
    run(src, "passive", "healthcheck")


@click.command(context_settings=CONTEXT)
@source_options
def prolog(src: SourceArgs) -> None:
    """Slurm Prolog: fast checks of the job's GPUs (SLURM_JOB_GPUS / CUDA_VISIBLE_DEVICES).

    On a failure: drain with gpuhc's reason, then exit 1 so Slurm requeues the job. Healthy:
    exit 0 without a single Slurm call. gpuhc's own errors: exit 0 with a loud log line.
    """
    run(src, "prolog", "prolog")


@click.command(context_settings=CONTEXT)
@source_options
def epilog(src: SourceArgs) -> None:
    """Slurm Epilog: checks after the job; a post-mortem bundle when the job failed
    (SLURM_JOB_EXIT_CODE non-zero); drains on failure."""
    run(src, "epilog", "epilog")
