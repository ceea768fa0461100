"""The NVLink DL counters (replay, recovery, crc) read on a rotating slice of the links
(gpuhc/checks/nvlink.py, ``dl_rotation``), through the real runner, state and NVML reader, with
the fake pynvml at the hardware boundary (tests/helpers/fake_pynvml.py records every field asked)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers.fake_pynvml import FakeNvml, live_with
from gpuhc.run import nvml_early
from gpuhc.checks.nvlink import CHECKS, dl_plan
from gpuhc.config.load import Config, defaults, schema
from gpuhc.model.result import Status
from gpuhc.run.runner import run_stage
from gpuhc.run.report import RunOptions
from gpuhc.sources import SourceSpec
from gpuhc.sources.nvml import NvmlLive
from gpuhc.sources.nvml_fields import keep_dl_slice
from gpuhc.sources.scenario import load_scenario
from gpuhc.state.node import StateStore
from tests.helpers.paths import REPO

ROOT = str(REPO)
DL = ("NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY", "NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY", "NVML_FI_DEV_NVLINK_ERROR_DL_CRC")
REPLAY = DL[0]
CHECK = CHECKS[0]


@pytest.fixture
def fake(monkeypatch):
    return live_with(monkeypatch)


def config(**thresholds) -> Config:
    data = defaults(schema())
    if thresholds:
        data["checks"] = {"nvlink": {"thresholds": thresholds}}
    return Config(data)


def run(tmp_path, stage: str = "passive", cfg: Config | None = None, gpus: list[int] | None = None):
    spec = SourceSpec(sysfs_root=str(tmp_path), kernel_log=str(tmp_path / "none.log"))
    opts = RunOptions(stage=stage, config=cfg or config(), sources=spec, state_dir=str(tmp_path / "state"),
                      hostname="gpu001", only=("nvlink",), gpus=gpus)
    return run_stage(opts)


def asked(fake: FakeNvml, gpu: int) -> dict[str, list[int]]:
    """The links each DL counter of one GPU was asked for (since ``fake.asked.clear()``)."""
    return {const: fake.asked_links(const, gpu) for const in DL}


def problems(report):
    return [r for r in report.results if r.status not in (Status.PASS, Status.NA)]


# ---------------------------------------------------------------------------- what is read


def test_the_driver_is_asked_for_the_dl_counters_of_exactly_the_slice(fake):
    reading = NvmlLive(clock_samples=1, module=fake, dl_rotation=3, dl_phases={0: 1}).read()
    assert asked(fake, 0) == {c: [1, 4, 7, 10, 13, 16] for c in DL}
    # the state and the cheap COUNT_* fields: every link, every run
    assert (reading.dl_rotation, reading.dl_phases) == (3, {0: 1, 1: 0})
    links = reading.gpus[0].nvlinks
    assert all(link.active for link in links) and len(links) == 18
    assert [link.link for link in links if "replay" in link.errors] == [1, 4, 7, 10, 13, 16]


def test_the_state_and_count_fields_are_read_on_every_link(fake):
    NvmlLive(clock_samples=1, module=fake, dl_rotation=3).read()
    assert fake.asked_links("NVML_FI_DEV_NVLINK_GET_STATE", 0) == list(range(18))
    assert fake.asked_links("NVML_FI_DEV_NVLINK_COUNT_RCV_ERRORS", 0) == list(range(18))


def test_over_dl_rotation_runs_every_link_is_read_exactly_once(fake, tmp_path):
    seen: dict[int, list[int]] = {0: [], 1: []}
    for _ in range(3):
        fake.asked.clear()
        assert run(tmp_path).status is Status.PASS
        for gpu in (0, 1):
            got = asked(fake, gpu)
            assert got[DL[0]] == got[DL[1]] == got[DL[2]]  # the three counters go together
            seen[gpu] += got[DL[0]]
    assert sorted(seen[0]) == sorted(seen[1]) == list(range(18))
    # and the fourth run starts the cycle again
    fake.asked.clear()
    run(tmp_path)
    assert asked(fake, 0)[REPLAY] == [0, 3, 6, 9, 12, 15]


def test_growth_is_judged_on_the_right_link_since_its_last_reading(fake, tmp_path):
    # Lifetime totals everywhere: never a finding, however many runs it takes to see every link.
    for gpu in fake.gpus:
        gpu.link_errors = {c: 5_000_000 for c in DL}
    for _ in range(6):
        assert not problems(run(tmp_path))
    # Link 4 of GPU 1 (slice 1) takes 150 replays; run 7 reads slice 0 and passes, run 8 sees it.
    fake.gpus[1].per_link_errors = {(4, REPLAY): 5_000_150}
    assert not problems(run(tmp_path))
    (w,) = problems(run(tmp_path))
    assert w.status is Status.WARN and w.subject == "gpu1" and w.value == {"4": 150}
    assert w.message == "gpu1 NVLink replay errors +150 since the link's last reading (link 4)"
    assert not problems(run(tmp_path))  # judged once: the next reading of link 4 is in 3 runs


def test_growth_between_two_readings_adds_up_to_the_delta(fake, tmp_path):
    for _ in range(3):
        run(tmp_path)
    # link 9 (slice 0) grows twice while other slices are read: one finding with both
    fake.gpus[0].per_link_errors = {(9, REPLAY): 60}
    assert not problems(run(tmp_path))  # slice 0 read: +60, under the warn level of 100
    fake.gpus[0].per_link_errors = {(9, REPLAY): 110}
    assert not problems(run(tmp_path)) and not problems(run(tmp_path))  # slices 1 and 2
    fake.gpus[0].per_link_errors = {(9, REPLAY): 260}
    (w,) = problems(run(tmp_path))
    assert w.value == {"9": 200}  # 260 - 60: since that link's last reading, nothing lost


def test_a_counter_reset_still_rebaselines(fake, tmp_path):
    fake.gpus[0].per_link_errors = {(3, REPLAY): 10_000}
    for _ in range(3):
        run(tmp_path)
    fake.gpus[0].per_link_errors = {(3, REPLAY): 20}  # driver reload: back near zero
    assert not problems(run(tmp_path))
    state = StateStore(str(tmp_path / "state")).read()["checks"]["nvlink"]
    assert state["GPU-0/3/replay"] == 20
    fake.gpus[0].per_link_errors = {(3, REPLAY): 220}
    for _ in range(2):
        assert not problems(run(tmp_path))
    (w,) = problems(run(tmp_path))
    assert w.value == {"3": 200}


def test_unread_counters_are_carried_over_not_dropped(fake, tmp_path):
    run(tmp_path)
    nvlink = StateStore(str(tmp_path / "state")).read()["checks"]["nvlink"]
    assert nvlink["dl_next"] == {"0": 1, "1": 1}
    run(tmp_path)
    nvlink = StateStore(str(tmp_path / "state")).read()["checks"]["nvlink"]
    assert {k for k in nvlink if k.startswith("GPU-0/") and k.endswith("/replay")} == \
        {f"GPU-0/{link}/replay" for link in (0, 1, 3, 4, 6, 7, 9, 10, 12, 13, 15, 16)}


@pytest.mark.parametrize("stage", ["epilog", "bootstrap"])
def test_epilog_and_bootstrap_read_every_link_and_keep_the_pointer(fake, tmp_path, stage):
    run(tmp_path)  # a passive run: slice 0, pointer to 1
    fake.asked.clear()
    run(tmp_path, stage=stage)
    assert asked(fake, 0) == asked(fake, 1) == {c: list(range(18)) for c in DL}
    nvlink = StateStore(str(tmp_path / "state")).read()["checks"]["nvlink"]
    assert nvlink["dl_next"] == {"0": 1, "1": 1}
    fake.asked.clear()
    run(tmp_path)
    assert asked(fake, 0)[REPLAY] == [1, 4, 7, 10, 13, 16]


def test_the_prolog_rotates_its_own_gpus_only(fake, tmp_path):
    run(tmp_path)  # both GPUs at slice 1 next
    fake.asked.clear()
    run(tmp_path, stage="prolog", gpus=[1])  # the job's GPU: its slice 1, and the pointer moves
    assert asked(fake, 0)[REPLAY] == [] and asked(fake, 1)[REPLAY] == [1, 4, 7, 10, 13, 16]
    nvlink = StateStore(str(tmp_path / "state")).read()["checks"]["nvlink"]
    assert nvlink["dl_next"] == {"0": 1, "1": 2}
    fake.asked.clear()
    run(tmp_path)  # so the health check covers GPU 0 and GPU 1 alike, whatever the prologs did
    assert asked(fake, 0)[REPLAY] == [1, 4, 7, 10, 13, 16] and asked(fake, 1)[REPLAY] == [2, 5, 8, 11, 14, 17]


def test_dl_rotation_1_reads_every_link_every_run_as_before(fake, tmp_path):
    cfg = config(dl_rotation=1)
    for _ in range(2):
        fake.asked.clear()
        run(tmp_path, cfg=cfg)
        assert asked(fake, 0) == {c: list(range(18)) for c in DL}
    nvlink = StateStore(str(tmp_path / "state")).read()["checks"]["nvlink"]
    assert "dl_next" not in nvlink and len(nvlink) == 2 * 18 * 3
    fake.gpus[0].per_link_errors = {(4, REPLAY): 150}
    (w,) = problems(run(tmp_path, cfg=cfg))
    assert w.message == "gpu0 NVLink replay errors +150 since last run (link 4)"


@pytest.mark.parametrize("stored", ["garbage", {"0": 7, "1": -1}, {"0": True}, {"x": 1}, [1, 2]])
def test_a_damaged_pointer_starts_at_slice_0(fake, tmp_path, stored):
    store = StateStore(str(tmp_path / "state"))
    with store.transaction() as doc:
        doc["checks"] = {"nvlink": {"dl_next": stored}}
    report = run(tmp_path)
    assert report.status is Status.PASS
    assert asked(fake, 0)[REPLAY] == [0, 3, 6, 9, 12, 15]


def test_the_early_read_is_still_adopted_in_a_passive_run(fake, tmp_path):
    nvml_early.start(["check"], env={})
    early = nvml_early._early
    spec = SourceSpec(sysfs_root=str(tmp_path), kernel_log=str(tmp_path / "none.log"))
    opts = RunOptions(stage="passive", config=config(), sources=spec, state_dir=str(tmp_path / "state"),
                      hostname="gpu001")
    report = run_stage(opts)
    assert nvml_early._early is None and early.released.is_set()  # adopted, topped up, let go
    # one read of everything but the DL counters, then the slice: no second full read
    assert fake.asked_links("NVML_FI_DEV_NVLINK_GET_STATE", 0) == list(range(18))
    assert asked(fake, 0) == {c: [0, 3, 6, 9, 12, 15] for c in DL}
    assert report.snapshot.nvml.dl_phases == {0: 0, 1: 0}
    assert [r.status for r in report.results if r.check == "nvlink"] == [Status.PASS, Status.PASS]


# ---------------------------------------------------------------------------- plan and replay


def test_the_plan_follows_the_stage_and_the_state():
    t = dict(CHECK.defaults)
    assert t["dl_rotation"] == 3
    prev = {"dl_next": {"0": 2, "3": 1}}
    assert dl_plan("passive", t, prev) == (3, {0: 2, 3: 1})
    assert dl_plan("prolog", t, None) == (3, {})
    assert dl_plan("epilog", t, prev) == (1, {}) and dl_plan("bootstrap", t, prev) == (1, {})
    assert dl_plan("passive", {**t, "dl_rotation": 1}, prev) == (1, {})
    assert dl_plan("passive", {**t, "dl_rotation": 2}, prev) == (2, {3: 1})  # 2 is past a rotation of 2


def test_a_replay_reads_the_slice_as_the_node_would():
    scenario = load_scenario(os.path.join(ROOT, "examples", "scenarios", "nvlink-errors-growing.yaml"), 2)
    reading = keep_dl_slice(scenario.nvml_source().read(), 3, {6: 0})
    gpu6 = reading.gpus[6]
    assert gpu6.nvlinks[9].errors == {"replay": 20250, "recovery": 6, "crc": 5200}
    assert gpu6.nvlinks[10].errors == {} and len(gpu6.nvlinks) == 18
    assert reading.dl_rotation == 3 and reading.dl_phases == {i: 0 for i in range(8)}
    assert keep_dl_slice(scenario.nvml_source().read(), 1, {}) == scenario.nvml  # rotation 1: all of it


def test_the_example_fails_on_run_4_with_the_default_and_run_3_with_rotation_1(tmp_path):
    path = os.path.join(ROOT, "examples", "scenarios", "nvlink-errors-growing.yaml")
    for rotation, want in ((3, [Status.PASS, Status.PASS, Status.PASS, Status.FAIL]),
                           (1, [Status.PASS, Status.WARN, Status.FAIL, Status.PASS])):
        opts = RunOptions(stage="passive", config=config(dl_rotation=rotation), sources=SourceSpec(nvml_scenario=path),
                          state_dir=str(tmp_path / f"state-{rotation}"), hostname="gpu001", only=("nvlink",))
        seen = [run_stage(opts) for _ in range(4)]
        assert [r.status for r in seen] == want
    msgs = [r.message for r in seen[2].results if r.status is Status.FAIL]
    assert "gpu6 NVLink replay errors +20000 since last run (link 9)" in msgs


# ---------------------------------------------------------------------------- config


@pytest.mark.parametrize("value, words", [
    ("0", "must be a whole number from 1 (every link every run) to 18, got 0"),
    ("19", "got 19"),
    ("2.5", "got 2.5"),
    ("true", "must be like the default 3, got True"),
    ("'3'", "must be like the default 3, got '3'"),
])
def test_config_validate_refuses_a_bad_rotation_with_file_and_line(tmp_path, value, words):
    cfg = tmp_path / "gpuhc.yaml"
    cfg.write_text(f"checks:\n  nvlink:\n    thresholds:\n      dl_rotation: {value}\n")
    p = gpuhc_cli("config", "validate", "--config", str(cfg))
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert f"{cfg}:4: checks.nvlink.thresholds.dl_rotation: " in p.stderr and words in p.stderr


def test_config_validate_refuses_a_misspelled_rotation(tmp_path):
    cfg = tmp_path / "gpuhc.yaml"
    cfg.write_text("checks:\n  nvlink:\n    thresholds:\n      dl_rotaton: 2\n")
    p = gpuhc_cli("config", "validate", "--config", str(cfg))
    assert p.returncode == 2 and f"{cfg}:4: checks.nvlink.thresholds.dl_rotaton: unknown threshold" in p.stderr


def gpuhc_cli(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("GPUHC_CONFIG", "GPUHC_DEBUG")}
    return subprocess.run([sys.executable, "-m", "gpuhc", *args], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env=env)


def test_config_checks_shows_the_rotation_a_run_uses(tmp_path):
    import json

    cfg = tmp_path / "gpuhc.yaml"
    cfg.write_text("checks:\n  nvlink:\n    thresholds:\n      dl_rotation: 1\n")
    for args, want in (((), 3), (("--config", str(cfg)), 1)):
        p = gpuhc_cli("config", "checks", "--json", *args)
        assert p.returncode == 0, p.stderr
        (row,) = [r for r in json.loads(p.stdout)["checks"] if r["id"] == "nvlink"]
        assert row["thresholds"]["dl_rotation"] == want
