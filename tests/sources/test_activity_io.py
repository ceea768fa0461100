"""The scenario format's `activity` section (issue 32's fields): a snapshot's activity written
and read back the same, and bad values refused with their place."""

from __future__ import annotations

import json

import pytest
import yaml

from gpuhc.errors import SourceError
from gpuhc.sources.scenario import load_scenario
from tests.helpers.paths import FIXTURES, SCENARIOS

TICK = next(json.loads(line) for line in (FIXTURES / "jobs" / "h100x4-device.jsonl").read_text().splitlines()
            if json.loads(line)["run"] == "hang" and json.loads(line)["time"] > 1795697810)


def write(tmp_path, act: dict):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"extends": str(SCENARIOS / "healthy-8xh100.yaml"), "activity": act}))
    return load_scenario(str(path))


def with_host(**over) -> dict:
    act = json.loads(json.dumps(TICK["activity"]))
    act["gpus"][3].update(pids=[5120], host_state="S", host_cpu_total_s=812.4, host_dt_s=0.5, host_cpu_s=0.0,
                          host_read_bytes=0.0, host_write_bytes=0.0)
    act.update(job_nodes={"4242": 1}, job_names={"4242": "llm"}, **over)
    return act


def test_the_host_fields_and_job_facts_read_back():
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        act = write(Path(d), with_host()).activity
    g3 = act.gpus[3]
    assert (g3.pids, g3.host_state, g3.host_cpu_total_s, g3.host_dt_s) == ([5120], "S", 812.4, 0.5)
    assert act.job_nodes == {"4242": 1} and act.job_names == {"4242": "llm"}
    assert act.gpus[0].pids == [] and act.gpus[0].host_state is None


def test_owners_read_back_and_are_empty_where_not_given(tmp_path):
    act = with_host()
    act["gpus"][3]["owners"] = {"4242": [1000, 0, 1000]}
    read = write(tmp_path, act).activity
    assert read.gpus[3].owners == {"4242": [0, 1000]} and read.gpus[0].owners == {}


@pytest.mark.parametrize("where,value,words", [
    (("gpus", 3, "host_state"), "Q", "must be one of"),
    (("gpus", 3, "pids"), [0], "positive integer"),
    (("gpus", 3, "pids"), "12", "list of at most"),
    (("gpus", 3, "host_cpu_s"), -1.0, "must not be negative"),
    (("job_nodes",), {"4242": 0}, "node count"),
    (("job_nodes",), {"x": 1}, "string of digits"),
    (("job_names",), {"4242": 7}, "job name"),
    # whose processes (issue 29): job ids and uids as the kernel gives them, a list per job
    (("gpus", 3, "owners"), {"4242": [-1]}, "a uid is an integer"),
    (("gpus", 3, "owners"), {"4242": 1000}, "list of 1 to"),
    (("gpus", 3, "owners"), {"4242": []}, "list of 1 to"),
    (("gpus", 3, "owners"), {"x": [1000]}, "string of digits"),
    (("gpus", 3, "owners"), [1000], "mapping of job id"),
])
def test_bad_values_are_refused_with_their_place(tmp_path, where, value, words):
    act = with_host()
    target = act
    for k in where[:-1]:
        target = target[k]
    target[where[-1]] = value
    with pytest.raises(SourceError) as e:
        write(tmp_path, act)
    assert words in str(e.value) and where[-1] in str(e.value)
