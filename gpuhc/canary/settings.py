"""The ``canary`` section of gpuhc.yaml: what the known-answer canary computes, how often every
GPU must run it, and how its low-priority jobs are submitted.

The admin side (``gpuhc canary submit``/``status``, cron on an admin host) reads all of it; a
node's run (``gpuhc canary run``, in a canary job or the epilog's slice) reads ``cases``,
``repeats`` and ``max_seconds`` from the same file, or gets them on its command line.
"""

from __future__ import annotations

from typing import Any

from gpuhc.active.registry import DTYPES
from gpuhc.text.schema import Key

# Precisions and the engine each exercises (docs/canary.md, "What it computes"). tf32, bf16 and
# fp16 run on the tensor cores; fp32 with strict fp32 compute runs cuBLAS's SIMT (FFMA) kernels
# on the plain SM cores; fp64 runs DMMA tensor cores on H100/A100 and the FP64 units elsewhere.
PRECISIONS = DTYPES  # the burn-in's: one table of cuBLAS types serves both (gpuhc/active/gemm_types.py)

# A case is "<precision>-<kind>-<n>": an n x n x n product. kind "exact" draws small integers, so
# the fp32/fp64 accumulation never rounds and the answer is known on the CPU whatever the GPU's
# summation order; kind "random" draws full-mantissa values, so the rounding paths work too and
# the answer is the one identical GPUs with identical software agree on.
CASE_PATTERN = "(" + "|".join(PRECISIONS) + r")-(exact|random)-([1-9][0-9]{1,4})"
DEFAULT_CASES = ["bf16-exact-2048", "bf16-random-8192", "fp16-random-8192", "tf32-random-8192",
                 "fp32-random-4096", "fp64-random-4096"]

SCHEMA: dict[str, Any] = {
    "partitions": Key(list, [], "partitions whose idle nodes get canary jobs (empty: all)", item=str),
    "cases": Key(list, DEFAULT_CASES, "products the canary computes: <precision>-<exact|random>-<n>",
                 item=str, pattern=CASE_PATTERN),
    "repeats": Key(int, 500, "times each product is computed and hashed per run (sustained tensor-core load)",
                   min=1, max=100000),
    "seed": Key(int, 20261207, "seed of the inputs: changing it changes every known answer", min=0),
    "memtest_fraction": Key(float, 0.5, "share of each GPU's free HBM the memory pattern pass covers (0: none)",
                            min=0.0, max=0.95),
    "memtest_max_gib": Key(float, 32.0, "the pattern pass's limit per GPU", min=0.0),
    "max_seconds": Key(float, 300.0, "a run's limit on one node; the canary job's --time is this plus a margin",
                       min=5.0, max=3600.0),
    "period_h": Key(float, 24.0, "every GPU runs the canary at least this often; older is overdue", min=0.1),
    "suspect_period_h": Key(float, 2.0, "cadence of a GPU with an unconfirmed mismatch", min=0.05),
    "suspect_days": Key(float, 7.0, "how long one unconfirmed mismatch keeps the short cadence", min=0.0),
    "min_voters": Key(int, 3, "GPUs of one model and software that must agree before their answer is the "
                              "fleet's known answer", min=2, max=100000),
    "results_dir": Key(str, None, "where canary jobs write results: shared, writable by the job user; "
                                  "default <state_dir>/canary/results", nullable=True),
    "epilog": {
        "enabled": Key(bool, True, "a node the scheduler never leaves idle gets a slice in the epilog when overdue"),
        "max_seconds": Key(float, 60.0, "the epilog slice's limit", min=5.0, max=600.0),
        "cases": Key(list, ["bf16-exact-2048", "bf16-random-4096", "fp32-random-2048", "fp64-random-2048"],
                     "the (shorter) products of the epilog slice", item=str, pattern=CASE_PATTERN),
    },
    "job": {
        "name_prefix": Key(str, "gpuhc-canary", "job names start with this; squeue finds queued canaries by it",
                           pattern=r"[A-Za-z0-9._-]{1,40}"),
        "partition": Key(str, None, "sbatch --partition: a low-tier partition over the GPU nodes", nullable=True),
        "qos": Key(str, None, "sbatch --qos: a preemptable QOS (slurm.conf PreemptType=preempt/qos)", nullable=True),
        "account": Key(str, None, "sbatch --account", nullable=True),
        "nice": Key(int, 10000, "sbatch --nice: lower priority than any user job", min=0, max=2147483645),
        "gpus_per_node": Key(int, None, "sbatch --gres=gpu:N; null: no GRES request (--exclusive)", nullable=True, min=1),
        "max_jobs": Key(int, 64, "canary jobs queued at once at most", min=1, max=100000),
        "extra_args": Key(list, [], "more sbatch arguments, one per item", item=str),
        "command": Key(str, "gpuhc", "how the job starts gpuhc on the node (split like a shell would, never run by one)"),
    },
}
