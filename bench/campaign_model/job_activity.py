"""What gpuhc's jobs check reads on a node whose job hangs, and what it says (docs/campaign.md,
"Jobs"): the scenario's ``activity`` section (gpuhc/sources/activity_io.py) while a job is hung,
from real samples. A link that stalls leaves every rank waiting in its collective, its GPU
spinning with no memory traffic (Llama 3, arXiv 2407.21783, section 3.3.4: NVLink failures show
as load/store operations stalled inside CUDA kernels): every GPU of the job copies the spinning
GPU of a real 4x H100 hang's recording (tests/helpers/jobs_scenario.py, gpu0 of its tick after
one rank stopped), the job's id, user and node count put in. A job that runs has no section, as
before (the health check of a busy node is sampled). Each health check's jobs verdict on a hang
is counted by whether it named a culprit GPU: gpuhc's repeat-culprit rule counts only named ones."""

from __future__ import annotations

import copy

from tests.helpers.jobs_scenario import recorded_hang

_RECORDED: dict = {}


def stalled(job, gpus: int) -> dict:
    """The ``activity`` section of a node whose GPUs all wait in ``job``'s hung collective."""
    if not _RECORDED:
        _RECORDED.update(recorded_hang())
    rec = copy.deepcopy(_RECORDED)
    jid = str(job.id)
    spin = rec["gpus"][0]
    rec["gpus"] = [dict(spin, index=i, jobs=[jid], via="cgroup", owners={jid: [job.uid]}) for i in range(gpus)]
    rec["job_nodes"] = {jid: job.size}
    return rec


def hang_views(results) -> list[str]:
    """The jobs check's verdicts on a hang in one run's ``results``: its status, and whether it
    named a culprit GPU."""
    return [f"{r.status.value}, culprit {'named' if r.value['culprits'] else 'none named'}" for r in results
            if r.check == "jobs" and isinstance(r.value, dict) and r.value.get("signature") == "hang"]
