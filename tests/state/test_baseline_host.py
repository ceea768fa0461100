"""The baseline records the host's CPUs and memory for the host check (gpuhc/state/baseline.py), and a
baseline with a wrong host entry is refused with its key."""

from __future__ import annotations

from dataclasses import replace

import pytest
import yaml

from gpuhc.state.baseline import capture, load
from gpuhc.checks import host
from gpuhc.errors import ConfigError
from gpuhc.model.host import HostReading
from gpuhc.model.result import Status
from tests.helpers.snapshots import context, healthy_node


def test_capture_records_cpus_and_memory_and_the_host_check_reads_them_back(tmp_path):
    snap = replace(healthy_node(2), host=HostReading(cpus_online=224, mem_total_kib=2_113_470_000))
    doc = capture(snap)
    assert doc["host"] == {"cpus_online": 224, "mem_total_kib": 2_113_470_000}
    path = tmp_path / "baseline.yaml"
    path.write_text(yaml.safe_dump(doc))
    path.chmod(0o600)
    base = load(str(path))
    check = host.CHECKS[0]
    lost = replace(snap, host=HostReading(cpus_online=112, mem_total_kib=2_113_470_000))
    out = check.judge(lost, context(check, baseline=base))
    assert [r.status for r in out.results] == [Status.FAIL]


def test_no_host_reading_no_host_entry():
    assert "host" not in capture(healthy_node(1))


def test_a_wrong_host_entry_is_refused_with_its_key(tmp_path):
    doc = capture(replace(healthy_node(1), host=HostReading(cpus_online=8)))
    doc["host"]["cpus_online"] = "eight"
    path = tmp_path / "baseline.yaml"
    path.write_text(yaml.safe_dump(doc))
    path.chmod(0o600)
    with pytest.raises(ConfigError) as e:
        load(str(path))
    assert "host.cpus_online" in str(e.value)
