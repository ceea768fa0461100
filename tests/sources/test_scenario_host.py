"""A scenario's `host:` section (gpuhc/sources/host.py's reading): replayed as the node's host,
round-tripped by `gpuhc snapshot`, and refused with its place when it is not one."""

from __future__ import annotations

import pytest

from gpuhc.errors import SourceError
from gpuhc.model.host import HostReading
from gpuhc.sources.scenario import load_scenario
from gpuhc.sources.snapshot_format import dump_snapshot
from tests.helpers.paths import SCENARIOS


def write(tmp_path, text: str):
    p = tmp_path / "s.yaml"
    p.write_text(f"extends: {SCENARIOS / 'healthy-8xh100.yaml'}\n{text}")
    return str(p)


def test_the_host_section_is_the_replayed_host(tmp_path):
    path = write(tmp_path, "host:\n  cpus_online: 224\n  mounts: {/home: {ok: false, seconds: 5.0, error: hung}}\n"
                           "steps:\n  - host: {cpus_online: 223}\n")
    first = load_scenario(path, 0)
    assert first.host_source().read() == HostReading(cpus_online=224, mounts={"/home": {"ok": False, "seconds": 5.0,
                                                                                       "error": "hung"}})
    assert load_scenario(path, 1).host_source().read() == HostReading(cpus_online=223)  # a step replaces it whole


def test_a_scenario_without_one_has_no_host():
    assert load_scenario(str(SCENARIOS / "healthy-8xh100.yaml")).host_source().read() is None


def test_a_snapshot_writes_it_back_as_it_reads(tmp_path):
    scen = load_scenario(str(SCENARIOS / "fabric-manager-down.yaml"))
    from gpuhc.model.snapshot import Snapshot

    doc = dump_snapshot(Snapshot(hostname="n", time=1.0, nvml=scen.nvml, host=scen.host))
    assert doc["host"] == {"services": scen.host.services}


@pytest.mark.parametrize("text, words", [
    ("host: [1, 2]", "host must be a mapping"),
    ("host: {cpus: 4}", "unknown host field 'cpus'"),
    ("host: {cpus_online: many}", "host cpus_online must be int or null"),
])
def test_a_bad_host_section_names_its_place(tmp_path, text, words):
    with pytest.raises(SourceError) as e:
        load_scenario(write(tmp_path, text + "\n"))
    assert words in str(e.value) and "s.yaml" in str(e.value)
