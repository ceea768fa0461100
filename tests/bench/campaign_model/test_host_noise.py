"""The campaign's host (bench/campaign_model/host_noise.py, docs/campaign.md "Host"): every
modelled node has the node around its GPUs, its noise reaches gpuhc's host checks, and the
verdicts that harden with time alone are run until they settle. Each test can fail: one shows
the false drain a one-sighting rule would make, one the timer rule the settled shortcut hid."""

from __future__ import annotations

import sys
from dataclasses import replace

import pytest
from tests.helpers.paths import REPO

sys.path.insert(0, str(REPO / "bench"))

from campaign_model import host_noise as H  # noqa: E402
from campaign_model import noise as N  # noqa: E402
from campaign_model import sim  # noqa: E402
from campaign_model.metrics import compute  # noqa: E402
from campaign_model.node import Node  # noqa: E402
from campaign_model.policies import config_for  # noqa: E402
from gpuhc.slurm.policy.reason import parse_reason  # noqa: E402

HOST_NOISE = [k.name for k in H.HOST_KINDS]


def campaign(tmp_path, noise, extra=None, nodes=2, days=0.5, **kw):
    jobs = [(600 + 3600 * k, 1, 3000.0, ("gpu001",)) for k in range(int(days * 24))]
    tmp_path.mkdir(parents=True, exist_ok=True)
    return sim.Campaign(config_for("shipped", tmp_path, extra), tmp_path, nodes=nodes, days=days, seed=3, inject=[],
                        load=0.0, jobs=jobs, noise=True, noise_inject=noise, **kw).run()


def drains(c, name=None):
    return [r for _, n, w, r in c.slurm.events if w == "drain" and (name is None or n == name)]


def test_every_node_has_a_host_that_gpuhcs_host_checks_judge(tmp_path):
    from gpuhc.model.result import Status
    from gpuhc.run.runner import run_stage
    from campaign_model.slurm import ModelSlurm

    node = Node("gpu001", tmp_path)
    node.write(sim.T0, {}, {"host": H.host_at([], None, sim.T0, 1.0)})
    flow = node.flow("passive", config_for("shipped", tmp_path), ModelSlurm(["gpu001"], lambda: sim.T0), sim.T0)
    results = run_stage(flow.opts).results
    got = {r.check: r.status for r in results}
    for check in ("host", "services", "machine-check", "pcie-aer", "storage", "kernel-health", "firmware", "ipoib"):
        assert got.get(check) is Status.PASS, (check, got.get(check))
    # a healthy node warns of nothing, the node around its GPUs included: no drain bought by a check
    assert [(r.check, r.message) for r in results if r.status not in (Status.PASS, Status.NA)] == []


def test_host_noise_never_drains_and_never_makes_a_lemon(tmp_path):
    noise = [(900 + 1200 * k, kind, "gpu001") for k, kind in enumerate(HOST_NOISE)]
    c = campaign(tmp_path, noise, days=0.6)
    m = compute(c)
    assert sorted(c.stats.noise) == sorted(HOST_NOISE)
    assert drains(c) == [] and m["false_drains"]["total"] == 0
    assert c.stats.runs["real"] > len(HOST_NOISE)  # the held findings were run again while they lasted


def test_a_site_that_drains_on_one_sighting_drains_for_an_nfs_hiccup(tmp_path):
    # The measurement can fail: with host evidence acting at its first sighting (the rule before
    # evidence was held), a 10-minute silence of the NFS server drains the node, a false drain.
    hiccup = replace(N.BY_NAME["nfs-hiccup"], lasts_s=(600.0, 600.0))
    kinds = {**N.BY_NAME, hiccup.name: hiccup}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(N, "BY_NAME", kinds)
        eager = campaign(tmp_path / "eager", [(900, "nfs-hiccup", "gpu001")],
                         extra={"evidence": {"host": {"runs": 1, "span_s": 0.0}}})
        held = campaign(tmp_path / "held", [(900, "nfs-hiccup", "gpu001")])
    assert [parse_reason(r).check for r in drains(eager)] == ["host"]
    assert compute(eager)["false_drains"]["total"] == 1
    assert drains(held) == []


# A process stuck in the GPU driver with a GPU's device open, no progress: a wedged driver. Not
# noise: the one input it changes is present from the start, and only the runs between can see
# that it stays (checks/host_stuck.py: WARN after dstate_warn_s, FAIL after dstate_fail_s, held).
WEDGED = N.NoiseClass("driver-wedged", lasts_s=(7200.0, 7200.0),
                      host={"dstate": [{"pid": 7001, "start": 88001, "comm": "python", "wchan": "os_acquire_rwlock_read",
                                        "wait": "gpu-driver", "cpu": 40, "switches": 900, "holds_gpu": True}]})


@pytest.fixture
def wedged(monkeypatch):
    monkeypatch.setitem(N.BY_NAME, WEDGED.name, WEDGED)


def test_a_timer_rule_fires_because_the_node_is_run_until_it_settles(tmp_path, wedged, monkeypatch):
    c = campaign(tmp_path / "runs", [(900, WEDGED.name, "gpu002")], days=0.2)
    got = [(t, r) for t, n, w, r in c.slurm.events if w == "drain" and n == "gpu002"]
    assert got and "stuck" in got[0][1]
    # no sooner than dstate_fail_s and the evidence's hold; within a few slots of both
    assert 600.0 + 900.0 <= got[0][0] - (sim.T0 + 900.0) <= 600.0 + 900.0 + 4 * 300.0
    # The old shortcut settled the node after its first run (no change of inputs): never drained.
    monkeypatch.setattr(sim.Campaign, "_pending", lambda self, node, stage, key, remembered: False)
    c = campaign(tmp_path / "settled", [(900, WEDGED.name, "gpu002")], days=0.2)
    assert drains(c, "gpu002") == []


def test_the_settled_shortcut_with_pending_verdicts_gives_the_acts_of_running_every_check(tmp_path, wedged,
                                                                                          monkeypatch):
    noise = [(600, "nfs-hiccup", "gpu001"), (900, WEDGED.name, "gpu002"), (1200, "dcgm-slow", "gpu001"),
             (1500, "nfs-reader", "gpu002")]
    a = campaign(tmp_path / "a", noise, days=0.2)
    monkeypatch.setattr(sim.Campaign, "_attention", lambda self, name, stage="passive": not self.nodes[name].off)
    b = campaign(tmp_path / "b", noise, days=0.2)
    assert b.stats.runs["real"] > a.stats.runs["real"] + 20  # the shortcut skipped runs
    assert [e[1:] for e in a.slurm.events] == [e[1:] for e in b.slurm.events] and drains(a, "gpu002")


def test_a_host_whose_disk_fails_first_is_drained_before_it_dies(tmp_path, monkeypatch):
    # A failing SSD errs for hours before the host stops answering: gpuhc's storage check
    # drains the node at its I/O errors, so no job is on it when it dies (hard rows hurt, and
    # the model shows what gpuhc saves); a host part that dies at once is host-down as before.
    from campaign_model import faults as F

    disk = replace(F.BY_NAME["host-disk-failing"], dies_after_s=(4 * 3600.0, 4 * 3600.0))
    monkeypatch.setitem(F.BY_NAME, disk.name, disk)
    jobs = [(600 + 1800 * k, 1, 1500.0, ("gpu001",)) for k in range(12)]
    c = sim.Campaign(config_for("shipped", tmp_path), tmp_path, nodes=1, days=0.3, seed=3, noise=False, load=0.0,
                     inject=[(900, disk.name, "gpu001", False)], jobs=jobs).run()
    acts = [(round(t - sim.T0), w, (r or "").split(":")[1].split()[0] if w == "drain" else r)
            for t, n, w, r in c.slurm.events]
    assert acts[0][1:] == ("drain", "storage") and acts[0][0] < 900 + 600
    assert ("down" in [w for _, w, _ in acts]) and compute(c)["escapes"]["total"] == 0
    assert [f.how for f in c.faults if f.cls.name == disk.name] == ["the host died"]
