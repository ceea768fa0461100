"""The fabric check: NVML's fabric health mask and summary, sibling cliques, NVLink-C2C error
growth and the IMEX daemon -- and no alarm where the hardware says "not supported"."""

from __future__ import annotations

import pytest

from gpuhc.checks import fabric
from gpuhc.model.host import ImexStatus
from gpuhc.model.result import Action, Status
from tests.helpers.snapshots import context, healthy_node, idle_node, later, no_nvml, with_gpu

CHECK, IMEX = fabric.CHECKS

# Every 2-bit field "false" (2), configuration "none" (1), partition assigned (1), global fabric
# manager connected (1): a fully healthy mask, built from NVML's field layout.
HEALTHY_MASK = (2 << 0) | (2 << 2) | (2 << 4) | (2 << 6) | (1 << 8) | (1 << 12) | (1 << 14)
# The GB200 tray gpud's maintainers recorded (leptonai/gpud PR 1106): registered, every health
# field "Not Supported" -- a mask of 0 and no summary.
GB200 = dict(name="NVIDIA GB200", fabric_clique_id=4026, fabric_cluster_uuid="9c6f5af3-53bf-49b5-a436-b66766c413c3",
             fabric_health_mask=0, fabric_health_summary=None)


def gb200(**changes):
    return healthy_node(4, **{**GB200, **changes})


def judge(snap, prev=None, gpus=None, **thresholds):
    return CHECK.judge(snap, context(CHECK, prev=prev, gpus=gpus, **thresholds))


def brief(out):
    return [(r.status, r.action, r.subject) for r in out.results]


def set_field(mask: int, shift: int, width: int, value: int) -> int:
    return (mask & ~(width << shift)) | (value << shift)


# ---------------------------------------------------------------------- no false alarm


@pytest.mark.parametrize("snap", [healthy_node(), idle_node(), gb200(), gb200(fabric_health_mask=HEALTHY_MASK)],
                         ids=["h100", "h100-idle", "gb200-not-supported", "gb200-all-healthy"])
def test_healthy_nodes_pass(snap):
    out = judge(snap)
    assert [r.status for r in out.results] == [Status.PASS]
    assert f"fabric healthy on {len(snap.nvml.gpus)} GPU(s)" in out.results[0].message


def test_gpus_without_fabric_or_c2c_are_not_applicable():
    snap = healthy_node(fabric_state=None, fabric_status=None)
    assert brief(judge(snap)) == [(Status.NA, Action.NONE, "node")]
    assert judge(no_nvml()).results[0].status is Status.NA


def test_mask_is_not_judged_before_registration_completes():
    """Registration is the nvswitch check's; a mask read mid-registration means nothing."""
    bad = set_field(HEALTHY_MASK, 4, 0x3, 1)
    snap = with_gpu(gb200(), 1, fabric_state="in progress", fabric_status="not ready", fabric_health_mask=bad)
    assert [r.status for r in judge(snap).results] == [Status.PASS]


# ---------------------------------------------------------------------- health mask


@pytest.mark.parametrize("name,shift,width,what,status,action", fabric.MASK_FIELDS)
def test_each_mask_field_true_is_its_finding(name, shift, width, what, status, action):
    snap = with_gpu(gb200(fabric_health_mask=HEALTHY_MASK), 2, fabric_health_mask=set_field(HEALTHY_MASK, shift, width, 1))
    out = judge(snap)
    assert brief(out) == [(status, action, "gpu2")]
    assert what in out.results[0].message
    assert out.results[0].action.drains == (status is Status.FAIL)


@pytest.mark.parametrize("code,words", sorted(fabric.CONFIG_PROBLEMS.items()))
def test_incorrect_configuration_fails_with_a_ticket(code, words):
    snap = with_gpu(gb200(fabric_health_mask=HEALTHY_MASK), 0, fabric_health_mask=set_field(HEALTHY_MASK, 8, 0xF, code))
    out = judge(snap)
    assert brief(out) == [(Status.FAIL, Action.DRAIN_TICKET, "gpu0")]
    assert words in out.results[0].message


def test_an_unknown_configuration_code_warns_and_never_drains():
    snap = with_gpu(gb200(fabric_health_mask=HEALTHY_MASK), 0, fabric_health_mask=set_field(HEALTHY_MASK, 8, 0xF, 12))
    out = judge(snap)
    assert brief(out) == [(Status.WARN, Action.NONE, "gpu0")] and "code 12 (unknown to gpuhc)" in out.results[0].message


@pytest.mark.parametrize("shift,value,words", [(12, 2, "no fabric partition"), (14, 2, "global fabric manager disconnected")])
def test_partition_and_fabric_manager_warn_only(shift, value, words):
    snap = with_gpu(gb200(fabric_health_mask=HEALTHY_MASK), 3, fabric_health_mask=set_field(HEALTHY_MASK, shift, 0x3, value))
    out = judge(snap)
    assert brief(out) == [(Status.WARN, Action.NONE, "gpu3")] and words in out.results[0].message


def test_several_findings_on_one_gpu_take_the_worst_and_name_all():
    mask = set_field(set_field(HEALTHY_MASK, 0, 0x3, 1), 4, 0x3, 1)  # degraded bandwidth + route unhealthy
    out = judge(with_gpu(gb200(), 1, fabric_health_mask=mask))
    assert brief(out) == [(Status.FAIL, Action.DRAIN_REBOOT, "gpu1")]
    assert "route unhealthy" in out.results[0].message and "bandwidth degraded" in out.results[0].message
    assert out.results[0].value["health_mask"] == hex(mask)


def test_summary_unhealthy_fails_even_with_bandwidth_full():
    """kubernetes-sigs/dra-driver-nvidia-gpu issue 626: a registered GB200 GPU, "Summary:
    Unhealthy", "Bandwidth: Full"."""
    mask = HEALTHY_MASK  # bandwidth full (degraded = false), nothing else set
    snap = with_gpu(gb200(fabric_health_mask=HEALTHY_MASK, fabric_health_summary="healthy"), 0,
                    fabric_health_mask=mask, fabric_health_summary="unhealthy", fabric_clique_id=4026)
    out = judge(snap)
    assert brief(out) == [(Status.FAIL, Action.DRAIN_REBOOT, "gpu0")]
    assert "summary: unhealthy" in out.results[0].message


def test_summary_limited_capacity_warns():
    snap = with_gpu(gb200(), 2, fabric_health_summary="limited capacity")
    assert brief(judge(snap)) == [(Status.WARN, Action.NONE, "gpu2")]


def test_prolog_judges_the_jobs_gpus_only():
    snap = with_gpu(gb200(), 3, fabric_health_mask=set_field(HEALTHY_MASK, 4, 0x3, 1))
    assert [r.status for r in judge(snap, gpus=[0, 1]).results] == [Status.PASS]
    assert [r.status for r in judge(snap, gpus=[3]).results] == [Status.FAIL]


# ---------------------------------------------------------------------- siblings


def test_gpu_in_another_clique_than_its_siblings_warns():
    out = judge(with_gpu(gb200(), 2, fabric_clique_id=4027))
    assert brief(out) == [(Status.WARN, Action.NONE, "gpu2")]
    assert "clique 4027" in out.results[0].message and "clique 4026" in out.results[0].message


def test_cluster_uuid_differs_warns():
    out = judge(with_gpu(gb200(), 0, fabric_cluster_uuid="dc6e40c4-d722-4357-9ba6-5291dd461278"))
    assert brief(out) == [(Status.WARN, Action.NONE, "gpu0")]


# ---------------------------------------------------------------------- C2C


def c2c(snap):
    for g in snap.nvml.gpus:
        g.c2c_errors = {"crc": 0, "replay": 0, "replay_b2b": 0}
    return snap


def test_c2c_first_sight_records_then_growth_is_judged():
    first = c2c(gb200())
    out = judge(first)
    assert [r.status for r in out.results] == [Status.PASS]
    assert "NVLink-C2C quiet on 4 GPU(s)" in out.results[0].message
    prev = out.state
    quiet = judge(later(first), prev=prev)
    assert [r.status for r in quiet.results] == [Status.PASS]
    grown = later(first)
    grown.nvml.gpus[1].c2c_errors = {"crc": 150, "replay": 3, "replay_b2b": 0}
    out = judge(grown, prev=prev)
    assert brief(out) == [(Status.WARN, Action.NONE, "gpu1")]
    assert out.results[0].value == {"crc": 150}
    assert out.state["c2c"][grown.nvml.gpus[1].uuid]["crc"] == 150


@pytest.mark.parametrize("counts,want", [
    ({"crc": 20000}, (Status.FAIL, Action.DRAIN_TICKET)),
    ({"replay": 100}, (Status.WARN, Action.NONE)),
    ({"replay_b2b": 1}, (Status.WARN, Action.NONE)),
    ({"replay_b2b": 100}, (Status.FAIL, Action.DRAIN_TICKET)),
])
def test_c2c_levels(counts, want):
    base = c2c(gb200())
    prev = judge(base).state
    grown = later(base)
    grown.nvml.gpus[0].c2c_errors = {**grown.nvml.gpus[0].c2c_errors, **counts}
    assert brief(judge(grown, prev=prev)) == [(*want, "gpu0")]


def test_c2c_counter_that_went_down_is_re_recorded_and_zero_disables_a_level():
    base = c2c(gb200())
    base.nvml.gpus[0].c2c_errors["crc"] = 5000
    prev = judge(base).state
    reset = later(base)
    reset.nvml.gpus[0].c2c_errors["crc"] = 10  # driver reloaded
    out = judge(reset, prev=prev)
    assert [r.status for r in out.results] == [Status.PASS]
    assert out.state["c2c"][reset.nvml.gpus[0].uuid]["crc"] == 10
    grown = later(reset)
    grown.nvml.gpus[0].c2c_errors["crc"] = 50000
    assert [r.status for r in judge(grown, prev=out.state, c2c_warn=0, c2c_fail=0).results] == [Status.PASS]


def test_c2c_state_of_a_swapped_gpu_goes_and_the_prolog_keeps_the_others():
    base = c2c(gb200())
    prev = {"c2c": {"GPU-gone": {"crc": 1}}}
    assert "GPU-gone" not in judge(base, prev=prev).state["c2c"]
    kept = judge(base, prev=prev, gpus=[0]).state["c2c"]
    assert set(kept) == {"GPU-gone", base.nvml.gpus[0].uuid}


def test_damaged_c2c_state_is_rebuilt_not_a_crash():
    base = c2c(gb200())
    out = judge(base, prev={"c2c": {base.nvml.gpus[0].uuid: "junk"}, "other": 1})
    assert [r.status for r in out.results] == [Status.PASS]
    assert out.state["c2c"][base.nvml.gpus[0].uuid] == {"crc": 0, "replay": 0, "replay_b2b": 0}
    assert judge(base, prev={"c2c": ["junk"]}).results[0].status is Status.PASS


# ---------------------------------------------------------------------- IMEX


def imex(**kw):
    return ImexStatus(installed=True, **kw)


@pytest.mark.parametrize("status,required,want", [
    (None, False, (Status.NA, Action.NONE)),
    (ImexStatus(installed=False), True, (Status.NA, Action.NONE)),
    (imex(error="nvidia-imex-ctl -q: exit 1: 'connection refused'"), False, (Status.PASS, Action.NONE)),
    (imex(error="nvidia-imex-ctl -q: exit 1: 'connection refused'"), True, (Status.FAIL, Action.DRAIN_REBOOT)),
    (imex(daemon="UNAVAILABLE"), False, (Status.PASS, Action.NONE)),
    (imex(daemon="UNAVAILABLE"), True, (Status.FAIL, Action.DRAIN_REBOOT)),
    (imex(daemon="WAITING_FOR_PEERS"), False, (Status.WARN, Action.NONE)),
    (imex(daemon="WAITING_FOR_PEERS"), True, (Status.FAIL, Action.DRAIN_REBOOT)),
    (imex(daemon="READY", domain="DOWN"), False, (Status.WARN, Action.NONE)),
    (imex(daemon="READY", domain="DOWN"), True, (Status.FAIL, Action.DRAIN_REBOOT)),
    (imex(daemon="READY", domain="DEGRADED", nodes={"10.0.0.1": "READY", "10.0.0.2": "UNAVAILABLE"}), True,
     (Status.WARN, Action.NONE)),
    (imex(daemon="READY", domain="UP", nodes={"10.0.0.1": "READY"}), True, (Status.PASS, Action.NONE)),
    (imex(daemon="READY", error="nvidia-imex-ctl -N: no answer within 3s"), False, (Status.WARN, Action.NONE)),
])
def test_imex(status, required, want):
    snap = gb200()
    snap.imex = status
    out = IMEX.judge(snap, context(IMEX, imex_required=required))
    assert [(r.status, r.action, r.check) for r in out.results] == [(*want, "imex")]
    if status is not None and status.domain == "DEGRADED":
        assert "not ready 10.0.0.2" in out.results[0].message  # the other node is named, not drained


def test_imex_stays_off_the_prolog():
    assert IMEX.stages == ("passive", "bootstrap") and "prolog" in CHECK.stages


# ---------------------------------------------------------------------- config


def test_validate_names_bad_thresholds():
    errors = fabric.validate({**fabric.DEFAULTS, "c2c_warn": -1, "c2c_b2b_fail": "many"})
    assert [e.split(":")[0] for e in errors] == ["c2c_warn", "c2c_b2b_fail"]
    assert fabric.validate(dict(fabric.DEFAULTS)) == []
    assert fabric.validate_imex({"imex_required": "yes"})[0].startswith("imex_required: must be true or false")
    assert fabric.validate_imex({"imex_required": False}) == []
