"""This node's GPUs in a job hang, for the real-Slurm job tests: activity recorded on a real 4x
H100 hang (tests/fixtures/jobs/), with the job ids (and how they were found) put in."""

from __future__ import annotations

import json
import os
from pathlib import Path

import yaml

from tests.helpers.paths import FIXTURES
from tests.helpers.slurm_flows import HEALTHY

FIXTURE = FIXTURES / "jobs" / "h100x4-device.jsonl"


def recorded_hang() -> dict:
    """The hang run's tick 55 s after rank 3 stopped: gpu0-2 spin, gpu3 idle (real samples)."""
    ticks = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    return next(t for t in ticks if t["run"] == "hang" and t["time"] > 1795697810)["activity"]


def write_scenario(path: Path, job: int | str, gpus: str, via: str = "cgroup", owner: int | None = None) -> None:
    """This node's GPUs as the recording shows them, the job's id put in. ``gpus``: "recorded"
    (gpu0-2 spin, gpu3 idle: the stalled rank's), "spin" (all four like the recording's gpu0),
    "idle" (all four like its gpu3: the node whose ranks stopped). The processes' owner is
    ``owner``, by default the uid the tests submit their jobs as (this process's): the job's user."""
    act = recorded_hang()
    for g in act["gpus"]:
        g["jobs"] = [str(job)]
        g["via"] = via
        g["owners"] = {str(job): [os.getuid() if owner is None else owner]}
    if gpus != "recorded":
        like = act["gpus"][0 if gpus == "spin" else 3]
        act["gpus"] = [dict(like, index=i) for i in range(4)]
    path.write_text(yaml.safe_dump({"extends": str(HEALTHY), "activity": act}))
