"""Config section `active`: what the active checks run in each stage, and how hard.

Thresholds are not here: their defaults are declared with each check (gpuhc/active/registry.py),
the GPU profiles (gpuhc/data/profiles/<model>.yaml) set them per model, and a site overrides
them under ``checks.<id>.thresholds`` like every other check's. This section
holds the *workload*: which checks a stage runs, for how long, over how much memory.

The epilog form must end inside Slurm's epilog budget (30 s by default, shared with the passive
checks), so its defaults are a few seconds of burn-in, a small slice of HBM and 1 GiB
all-reduces; the bootstrap form (a node entering service) may take minutes.
"""

from __future__ import annotations

from typing import Any

from gpuhc.active.registry import DTYPES, IDS
from gpuhc.errors import ConfigError
from gpuhc.text.schema import Key, did_you_mean

ALL_CHECKS = list(IDS)


def _stage(checks: list[str], burnin_s: float, memtest_fraction: float, hbm_mib: int, nccl_mib: int,
           dcgm_level: int) -> dict:
    return {
        "checks": Key(list, checks, "checks this stage runs (ids: " + ", ".join(ALL_CHECKS) + ")", item=str),
        "burnin_s": Key(float, burnin_s, "seconds of sustained matmuls, split over the dtypes", min=0.5, max=7200),
        "memtest_fraction": Key(float, memtest_fraction, "fraction of free HBM the memory test covers",
                                min=0.001, max=0.95),
        "memtest_max_gib": Key(float, 256.0, "cap on the memory test's buffer per GPU", min=0.0625),
        "hbm_mib": Key(int, hbm_mib, "copy buffer for the HBM bandwidth test", min=16, max=65536),
        "nccl_mib": Key(int, nccl_mib, "all-reduce payload (busbw is judged at GiB sizes)", min=1, max=16384),
        "nccl_iters": Key(int, 20, "timed all-reduces", min=1, max=1000),
        "p2p_mib": Key(int, 256, "peer copy size per GPU pair", min=1, max=16384),
        "hostlink_mib": Key(int, 256, "pinned host<->GPU copy size", min=1, max=16384),
        "dcgm_level": Key(int, dcgm_level, "dcgmi diag -r level (0: do not run DCGM)", min=0, max=4),
    }


SCHEMA = {
    "enabled": Key(bool, True, "run the active checks in the epilog and bootstrap stages"),
    "matmul_n": Key(int, 8192, "square matrix size of the burn-in", min=256, max=32768),
    "dtypes": Key(list, ["bf16", "tf32"], "burn-in precisions, timed (gpu-speed): " + ", ".join(DTYPES), item=str),
    "check_dtypes": Key(list, ["fp16", "fp32", "fp64"], "burn-in correctness pass after the timed precisions: "
                        "the same hash, sibling and float64 checks, no speed verdict, so that the FMA and FP64 "
                        "units the timed ones leave idle cannot corrupt unseen; a precision also in dtypes is "
                        "timed only; null or []: off", item=str, nullable=True),
    "check_s": Key(float, 0.25, "seconds of the correctness pass per precision (about 0.5 s more each for inputs "
                   "and the reference block: ~2 s per epilog at the defaults); null or 0: off",
                   min=0.0, max=600.0, nullable=True),
    "check_n": Key(int, 4096, "square matrix size of the correctness pass (smaller than matmul_n: fp64 runs at "
                   "1/64 of the fp32 rate on GPUs without FP64 tensor cores)", min=256, max=32768),
    "seed": Key(int, 20261126, "seed of every generated input (same seed: same bits)", min=0),
    "hash_every": Key(int, 8, "hash the matmul result every N iterations", min=1, max=10000),
    "busy_gpu": Key(str, "skip", "a GPU with another process on it: skip it (the occupancy finding) or ignore",
                    choices=("skip", "ignore")),
    "startup_timeout_s": Key(float, 60.0, "worker start (CuPy import, CUDA init)", min=1.0, max=600.0),
    "env": Key(dict, {}, "extra environment for the worker process (e.g. NCCL_* variables)"),
    "dcgm_path": Key(str, None, "dcgmi executable; default: PATH, then /usr/bin and /usr/local/bin",
                     nullable=True),
    "epilog": _stage(["topology", "burn-in", "gpu-speed", "hbm", "memtest", "host-link", "p2p", "nccl-local"],
                     burnin_s=4.0, memtest_fraction=0.05, hbm_mib=1024, nccl_mib=1024, dcgm_level=0),
    "bootstrap": _stage(list(ALL_CHECKS), burnin_s=60.0, memtest_fraction=0.85, hbm_mib=2048, nccl_mib=2048,
                        dcgm_level=2),
}


def problems(section: Any) -> list[tuple[tuple, str]]:
    """What the flat schema cannot see in an ``active`` section: (key path, why) for check ids
    a stage names that no check has, and for precisions the burn-in does not know (timed or
    in its correctness pass)."""
    if not isinstance(section, dict):
        return []
    out: list[tuple[tuple, str]] = []
    for stage in ("epilog", "bootstrap"):
        checks = (section.get(stage) or {}).get("checks") if isinstance(section.get(stage), dict) else None
        for i, cid in enumerate(checks if isinstance(checks, list) else []):
            if cid not in IDS:
                out.append(((stage, "checks", i), f"unknown active check {cid!r}{did_you_mean(cid, IDS)} (known: {', '.join(IDS)})"))
    for key in ("dtypes", "check_dtypes"):
        names = section.get(key)
        if isinstance(names, list):
            out += [((key, i), f"unknown dtype {d!r}{did_you_mean(d, DTYPES)} (known: {', '.join(DTYPES)})")
                    for i, d in enumerate(names) if d not in DTYPES]
    if isinstance(section.get("dtypes"), list) and not section["dtypes"]:
        out.append((("dtypes",), f"must name at least one precision (known: {', '.join(DTYPES)})"))
    return out


def validate(section: Any, file: str | None = None, lines: dict | None = None, path: tuple = ("active",)) -> None:
    """The config loader's hook (gpuhc/config/load.py): refuse the first problem with file, line, key."""
    for where, why in problems(section):
        from gpuhc.text.yamlpos import line_of

        # the key names the list, not the item (as the config loader's own messages do)
        dotted = ".".join([*map(str, path), *(k for k in where if not isinstance(k, int))])
        raise ConfigError(why, file, line_of(lines or {}, path + where) if file else None, dotted)
