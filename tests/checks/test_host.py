"""host: CPUs and memory against the baseline, mounts, scratch, stuck processes (gpuhc/checks/host.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuhc.checks import host
from gpuhc.model.host import HostReading
from gpuhc.model.result import Action, Status
from tests.helpers.snapshots import T0, context, healthy_node

CHECK = host.CHECKS[0]
BASE = {"host": {"cpus_online": 224, "mem_total_kib": 2_113_470_000}}


def judge(h: HostReading, prev=None, baseline=BASE, time=T0, **t):
    return CHECK.judge(replace(healthy_node(1, time=time), host=h), context(CHECK, prev=prev, baseline=baseline, **t))


def brief(out):
    return [(r.status, r.subject, r.action) for r in out.results]


def test_healthy_host_passes_with_an_answering_mount():
    h = HostReading(cpus_online=224, mem_total_kib=2_113_400_000, mounts={"/home": {"ok": True, "seconds": 0.003}},
                    scratch={"path": "/tmp", "free_bytes": 900 << 30, "total_bytes": 1000 << 30}, dstate=[])
    out = judge(h)
    assert brief(out) == [(Status.PASS, "node", Action.NONE)]
    assert out.results[0].message == "host as expected: 224 CPUs online, 2015 GiB memory, 1 mount(s) answering"


def test_a_cpu_taken_offline_and_a_lost_dimm_fail_with_a_ticket():
    out = judge(HostReading(cpus_online=223, mem_total_kib=1_980_000_000))
    assert [(r.status, r.action) for r in out.results] == [(Status.FAIL, Action.DRAIN_TICKET)] * 2
    assert out.results[0].message == "223 CPUs online < 224 in the baseline"


def test_without_a_baseline_cpus_and_memory_are_not_judged():
    assert brief(judge(HostReading(cpus_online=1, mem_total_kib=1), baseline=None)) == [(Status.PASS, "node", Action.NONE)]


def test_a_hung_or_missing_mount_fails_drain_reboot():
    h = HostReading(mounts={"/datasets": {"ok": False, "seconds": 5.0, "error": "no answer within 5s"},
                            "/home": {"ok": False, "seconds": 0.0, "error": "not mounted"}})
    out = judge(h)
    assert brief(out) == [(Status.FAIL, "/datasets", Action.DRAIN_TICKET), (Status.FAIL, "/home", Action.DRAIN_TICKET)]
    assert out.results[0].message == "mount /datasets: no answer within 5s"


def test_scratch_warns_then_fails():
    scratch = lambda free: HostReading(scratch={"path": "/tmp", "free_bytes": free << 30, "total_bytes": 100 << 30})  # noqa: E731
    assert brief(judge(scratch(5))) == [(Status.WARN, "/tmp", Action.NONE)]
    assert brief(judge(scratch(1))) == [(Status.FAIL, "/tmp", Action.DRAIN_TICKET)]
    assert brief(judge(scratch(1), scratch_fail_pct=None)) == [(Status.WARN, "/tmp", Action.NONE)]


def test_a_recording_without_the_host_is_not_applicable():
    out = CHECK.judge(healthy_node(1), context(CHECK))
    assert [r.status for r in out.results] == [Status.NA]


def test_bad_settings_are_named():
    errors = CHECK.validate({**CHECK.defaults, "mounts": ["home"], "scratch": 5, "dstate_warn_s": -1})
    assert errors == ["mounts: want a list of absolute paths, got ['home']",
                      "scratch: want an absolute path, or empty (off), got 5",
                      "dstate_warn_s: want a number >= 0 or null (off), got -1"]


def test_a_bad_host_setting_in_the_config_names_file_line_and_key(tmp_path):
    from gpuhc.config.load import load_config
    from gpuhc.errors import ConfigError

    cfg = tmp_path / "gpuhc.yaml"
    cfg.write_text("checks:\n  host:\n    thresholds:\n      mounts: [home]\n")
    cfg.chmod(0o600)
    with pytest.raises(ConfigError) as e:
        load_config(str(cfg))
    assert "gpuhc.yaml:4" in str(e.value) and "checks.host.thresholds.mounts: want a list of absolute paths" in str(e.value)
