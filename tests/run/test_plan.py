"""gpuhc/run/plan.py: the selected checks' declared source needs, merged into one SourceSpec by
each field's rule, with no check named."""

from __future__ import annotations

from gpuhc.checks.base import HOST, Check, CheckOutput, ReadContext, SourceNeeds, reads_host
from gpuhc.run.plan import Effective
from gpuhc.run.plan import plan_sources
from gpuhc.sources import SourceSpec


def check(id: str, needs=None, **declared) -> tuple[Check, Effective]:
    c = Check(id=id, needs=(), judge=lambda s, ctx: CheckOutput([]), source_needs=needs, **declared)
    return c, Effective(True, 7.0, {}, {"b": 2})


def plan(*checks, stage="passive", prev=None, spec=None):
    return plan_sources(spec or SourceSpec(clock_samples=5), list(checks), stage, prev or {}, [1], "job")


def test_nothing_asked_is_the_least_read():
    spec = plan(check("quiet"))
    assert (spec.clock_samples, spec.occupancy_wait_s, spec.occupancy_settle_mib) == (1, 0.0, None)
    assert (spec.dl_rotation, spec.dl_phases, spec.activity, spec.host) == (1, {}, None, None)
    assert (spec.gpus, spec.job) == ([1], "job")


def test_each_check_is_asked_with_its_stage_thresholds_timeout_and_state():
    seen: list[ReadContext] = []
    plan(check("a", lambda r: seen.append(r) or SourceNeeds(), defaults={"a": 1, "b": 1}),
         stage="epilog", prev={"a": {"p": 1}})
    assert seen == [ReadContext("epilog", {"a": 1, "b": 2}, 7.0, {"p": 1})]


def test_the_answers_merge_by_each_fields_rule():
    spec = plan(
        check("one", lambda r: SourceNeeds(clock_samples=True, occupancy_wait_s=2.0, occupancy_settle_mib=900,
                                           dl_slice=(3, {0: 1}), activity={"window_s": 5},
                                           occupancy_allowed=(("nv-hostengine", 0),))),
        check("two", lambda r: SourceNeeds(occupancy_wait_s=4.0, occupancy_settle_mib=1024, dl_slice=(2, {}),
                                           activity={"environ": True}, occupancy_allowed=(("dcgm-exporter", 998),))),
    )
    assert (spec.clock_samples, spec.occupancy_wait_s, spec.occupancy_settle_mib) == (5, 4.0, 900)
    assert spec.occupancy_allowed == (("dcgm-exporter", 998), ("nv-hostengine", 0))  # all of them
    assert (spec.dl_rotation, spec.dl_phases) == (3, {0: 1})
    assert spec.activity == {"window_s": 5, "environ": True}


def test_the_host_reader_reads_by_the_asking_checks_thresholds():
    spec = plan(check("pcie-aer", reads_host, optional=(HOST,)), check("quiet"))
    assert spec.host == {"pci_watch": True}  # gpuhc/sources/host.py settings_for, by check id
