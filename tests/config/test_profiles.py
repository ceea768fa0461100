"""GPU profiles: selection by NVML name, validation errors, and agreement with the checks."""

from __future__ import annotations

import os
import re

import pytest
from tests.helpers.realdata import ROOT as REALDATA_ROOT

from gpuhc.checks import all_checks, clocks, ecc, gpu_count, nvlink, pcie, power, thermal
from gpuhc.errors import ConfigError
from gpuhc.config.profiles import (
    GENERIC,
    all_profiles,
    effective_thresholds,
    load_profile_file,
    load_profiles,
    profile_names,
    select_profile,
    select_profile_for,
)

GPU_CHECKS = {c.id: c for m in (gpu_count, ecc, nvlink, pcie, clocks, thermal, power) for c in m.CHECKS}
ALL_CHECKS = {c.id: c for c in all_checks()}
REALDATA_SMI = str(REALDATA_ROOT / "nvidia-smi")


@pytest.mark.parametrize(
    "name, profile",
    [
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("NVIDIA H100 SXM5 80GB", "h100-sxm"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA H100 NVL", "generic"),
        ("NVIDIA H200", "h200-sxm"),
        ("NVIDIA H200 NVL", "generic"),
        ("NVIDIA GH200 480GB", "generic"),
        ("NVIDIA B200", "b200"),
        ("NVIDIA GB200", "gb200"),  # not b200: the superchip's trays are 4 GPUs, no PCIe slot
        ("NVIDIA A100-SXM4-80GB", "a100-sxm"),
        ("NVIDIA A100-SXM4-40GB", "a100-sxm"),
        ("NVIDIA A100 80GB PCIe", "generic"),
        ("Tesla V100-SXM2-32GB", "generic"),
        ("nvidia h100 80gb hbm3", "h100-sxm"),  # case does not matter
        ("", "generic"),
        (None, "generic"),
    ],
)
def test_select_profile_by_nvml_name(name, profile):
    assert select_profile(name).name == profile


def test_forced_profile_wins_over_the_name():
    assert select_profile("NVIDIA H100 80GB HBM3", forced="a100-sxm").name == "a100-sxm"


def test_unknown_forced_profile_is_a_clear_config_error():
    with pytest.raises(ConfigError) as e:
        select_profile("NVIDIA H100 80GB HBM3", forced="x100-sxm")
    assert "node.profile" in str(e.value) and "h100-sxm" in str(e.value)


def test_node_profile_skips_a_lost_first_gpu():
    names = ["unknown (NVML: GPU is lost)", "NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"]
    assert select_profile_for(names).name == "h100-sxm"
    assert select_profile_for(["unknown (NVML: GPU is lost)"]).name == "generic"
    assert select_profile_for([]).name == "generic"
    assert select_profile_for(names, forced="generic").name == "generic"


def test_shipped_profiles_and_model_facts():
    assert profile_names() == ["a100-sxm", "b200", "gb200", "generic", "h100-pcie", "h100-sxm", "h200-sxm"]
    h100, h200, a100 = (select_profile(None, forced=n) for n in ("h100-sxm", "h200-sxm", "a100-sxm"))
    assert h100.for_check("nvlink")["expected_active"] == 18 and h200.for_check("nvlink")["expected_active"] == 18
    assert a100.for_check("nvlink")["expected_active"] == 12
    assert [p.for_check("power")["expected_limit_w"] for p in (h100, h200, a100)] == [700, 700, 400]
    assert [p.for_check("pcie")["expected_gen"] for p in (h100, h200, a100)] == [5, 5, 4]
    assert all(p.for_check("pcie")["expected_width"] == 16 for p in (h100, h200, a100))
    for p in (h100, h200, a100):
        t = p.for_check("thermal")
        assert t["gpu_warn_c"] < t["gpu_fail_c"] and t["mem_warn_c"] < t["mem_fail_c"]
    b200, gb200, h100_pcie = (select_profile(None, forced=n) for n in ("b200", "gb200", "h100-pcie"))
    assert b200.for_check("nvlink")["expected_active"] == 18 and b200.for_check("power")["expected_limit_w"] == 1000
    assert gb200.for_check("nvlink")["expected_active"] == 18 and "pcie" not in gb200.thresholds
    assert "nvlink" not in h100_pcie.thresholds and h100_pcie.for_check("power")["expected_limit_w"] == 350


def test_generic_profile_states_no_model_facts():
    generic = select_profile(None)
    assert generic.match == ()
    facts = {("nvlink", "expected_active"), ("power", "expected_limit_w"), ("pcie", "expected_gen"),
             ("pcie", "expected_width")}
    assert not [f for f in facts if f[1] in generic.for_check(f[0])]


def test_every_profile_threshold_is_a_known_check_default():
    # A profile key the check does not read would silently do nothing; the check's defaults are
    # the list of what it reads.
    for prof in all_profiles():
        for cid, section in prof.thresholds.items():
            assert cid in ALL_CHECKS, f"{prof.name}: unknown check {cid}"
            unknown = set(section) - set(ALL_CHECKS[cid].defaults)
            assert not unknown, f"{prof.name}: {cid} has unknown thresholds {unknown}"


def test_shipped_model_profiles_do_not_overlap():
    names = ["NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA A100-SXM4-80GB", "NVIDIA B200", "NVIDIA GB200",
             "NVIDIA H100 PCIe"]
    for name in names:
        assert sum(p.matches(name) for p in all_profiles()) == 1


def test_effective_thresholds_layers_defaults_profile_then_config():
    check = power.CHECKS[0]
    prof = select_profile("NVIDIA H100 80GB HBM3")
    merged = effective_thresholds(check, prof, {"tolerance_pct": 10.0})
    assert merged["expected_limit_w"] == 700  # profile over the default None
    assert merged["tolerance_pct"] == 10.0  # config over the default
    assert merged["require_persistence"] is True  # default kept
    assert effective_thresholds(check, None)["expected_limit_w"] is None


# --------------------------------------------------------------------------- validation


def _write(tmp_path, name: str, text: str) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return str(path)


GOOD = "name: x100\nmatch: ['X100']\nthresholds:\n  power:\n    expected_limit_w: 500\n"


def test_a_valid_profile_file_loads(tmp_path):
    prof = load_profile_file(_write(tmp_path, "x100", GOOD))
    assert prof.name == "x100" and prof.matches("NVIDIA X100 SXM") and prof.for_check("power") == {"expected_limit_w": 500}


@pytest.mark.parametrize(
    "text, line, words",
    [
        ("name: x100\nmatch: ['X1[00']\n", 2, "bad regular expression"),
        ("name: x100\nmatch: ['X100']\ncolour: red\n", 3, "unknown key (known:"),
        ("name: x100\nmatch: ['X100']\nthersholds: {}\n", 3, "unknown key: did you mean 'thresholds'?"),
        ("name: y100\nmatch: ['X100']\n", 1, "must be the file name"),
        ("name: x100\nmatch: 'X100'\n", 2, "must be a list"),
        ("name: x100\n", None, "needs at least one match pattern"),
        ("name: x100\nmatch: ['X100']\nthresholds:\n  power: 700\n", 4, "must be a mapping"),
        ("name: x100\nmatch: ['X100']\nthresholds:\n  power:\n    limits: {a: 1}\n", 5, "must be a number"),
        ("- just\n- a list\n", 1, "must be a mapping"),
        ("name: x100\nmatch: ['X100']\nthresholds:\n  hmb:\n    gbps: 1\n", 4, "unknown check: did you mean 'hbm'?"),
        ("name: x100\nmatch: ['X100']\nthresholds:\n  hbm:\n    gbsp: 1\n", 5, "unknown threshold: did you mean 'gbps'?"),
        ("name: x100\nmatch: ['X100']\nthresholds:\n  hbm:\n    gbps: {a: 1}\n", 5, "must be a number"),
        ("name: x100\nmatch: ['X100']\nthresholds:\n  hbm:\n    min_fraction: 0\n", 5, "fraction above 0"),
        ("name: x100\nmatch: ['X100']\nthresholds:\n  gpu-speed:\n    tflops:\n      fp8: 900\n", 6,
         "unknown precision"),
        ("name: x100\nmatch: ['X100']\nsweep: [1]\n", 3, "must be a mapping"),
        ("name: x100\nmatch: ['X100']\nsweep:\n  large_busbw_gbs: fast\n", 4, "must be a number or null"),
        ("name: x100\nmatch: [X100\n", None, "not valid YAML"),
        # once loaded without a word, and the sweep ran on its defaults
        ("name: x100\nmatch: ['X100']\nsweep:\n  large_busbw_gsb: 5\n", 4,
         "unknown sweep threshold: did you mean 'large_busbw_gbs'?"),
    ],
)
def test_bad_profile_files_name_file_line_and_key(tmp_path, text, line, words):
    path = _write(tmp_path, "x100", text)
    with pytest.raises(ConfigError) as e:
        load_profile_file(path)
    msg = str(e.value)
    assert words in msg and path in msg
    if line is not None:
        assert e.value.line == line


def test_active_tables_and_the_sweep_section_load(tmp_path):
    text = GOOD + "  gpu-speed:\n    tflops: {bf16: 900}\nsweep:\n  large_busbw_gbs: 400\n"
    prof = load_profile_file(_write(tmp_path, "x100", text))
    assert prof.for_check("gpu-speed") == {"tflops": {"bf16": 900}} and prof.sweep == {"large_busbw_gbs": 400}


MARKS = re.compile(r"measured here|from public specs")


def _unmarked_values(path: str) -> list[str]:
    """Value lines under ``thresholds:`` and ``sweep:`` (null excepted: no expectation) whose own
    comment, or the last comment block above them in their section, does not say "measured
    here" or "from public specs"."""
    bad, section, said, in_block = [], None, "", False
    for n, line in enumerate(open(path, encoding="utf-8").read().splitlines(), 1):
        body, _, comment = line.partition("#")
        if line and not line.startswith((" ", "#")):
            section, said = line.split(":")[0], ""
        if section not in ("thresholds", "sweep") or not line.startswith(" "):
            in_block = False
            continue
        if not body.strip() and comment:  # a comment line speaks for the values below it
            said = f"{said} {comment}" if in_block else comment
            in_block = True
            continue
        in_block = False
        key, _, value = body.strip().partition(":")
        if section == "thresholds" and len(body) - len(body.lstrip()) == 2:
            said = comment  # a check id opens a new block
        elif value.strip() not in ("", "null") and not MARKS.search(comment) and not MARKS.search(said):
            bad.append(f"{path}:{n}: {body.strip()}")
    return bad


def test_every_shipped_profile_value_says_where_it_comes_from():
    """A reader must be able to tell a measurement from a datasheet figure, value by value."""
    for prof in all_profiles():
        assert not _unmarked_values(prof.path)


def test_the_provenance_rule_notices_a_bare_value(tmp_path):
    path = _write(tmp_path, "x100", GOOD)
    assert _unmarked_values(path) == [f"{path}:5: expected_limit_w: 500"]
    marked = _write(tmp_path, "x200", GOOD.replace("500", "500  # from public specs: datasheet"))
    assert _unmarked_values(marked) == []


def test_a_new_gpu_model_is_one_data_file(tmp_path, monkeypatch):
    """A model gpuhc has never heard of, added as one file in the profile directory: the passive
    checks, the active checks and the sweep all take its numbers, with no code change."""
    import shutil

    from gpuhc.config import profiles
    from gpuhc.active.thresholds import thresholds_for as active_thresholds
    from gpuhc.config.load import Config, defaults, schema
    from gpuhc.model.result import Status
    from gpuhc.run.runner import run_stage
    from gpuhc.run.report import RunOptions
    from gpuhc.sources import SourceSpec
    from gpuhc.sweep.settings import thresholds_for as sweep_thresholds

    pdir = tmp_path / "profiles"
    shutil.copytree(profiles.PROFILE_DIR, pdir)
    (pdir / "x300.yaml").write_text(
        "name: x300\nmatch: ['\\bX300\\b']\nthresholds:\n"
        "  power: {expected_limit_w: 900}   # from public specs: a datasheet\n"
        "  hbm: {gbps: 9000}               # measured here\n"
        "sweep: {large_busbw_gbs: 700}     # measured here\n")
    demo = os.path.join(os.path.dirname(profiles.PROFILE_DIR), "scenarios", "demo-8xh100.yaml")
    scenario = tmp_path / "x300-node.yaml"
    scenario.write_text(open(demo, encoding="utf-8").read().replace("NVIDIA H100 80GB HBM3", "NVIDIA X300"))

    def run(state):
        opts = RunOptions(stage="passive", config=Config(defaults(schema())),
                          sources=SourceSpec(nvml_scenario=str(scenario)), state_dir=str(tmp_path / state),
                          hostname="gpu001")
        return run_stage(opts)

    before = run("before")  # not yet known: generic, and the 700 W GPUs meet their own default limit
    assert before.profile == GENERIC and not [r for r in before.results if r.check == "power" and r.status is Status.FAIL]
    monkeypatch.setattr(profiles, "PROFILE_DIR", str(pdir))
    profiles._shipped.cache_clear()
    try:
        after = run("after")
        assert after.profile == "x300"
        assert {r.subject for r in after.results if r.check == "power" and r.status is Status.FAIL} == \
            {f"gpu{i}" for i in range(8)}  # 700 W against the model's 900 W
        assert active_thresholds("x300")["hbm"]["gbps"] == 9000
        assert sweep_thresholds({}, "nccl", "2x8", "", "x300")["large_busbw_gbs"] == 700
        assert sweep_thresholds({}, "nccl", "2x8", "", "x300")["small_p95_us"] == 250.0  # the nccl default beneath
    finally:
        profiles._shipped.cache_clear()


def test_generic_must_not_match_and_must_exist(tmp_path):
    with pytest.raises(ConfigError, match="fallback"):
        load_profile_file(_write(tmp_path, "generic", "name: generic\nmatch: ['.']\n"))
    only_model = tmp_path / "only-model"
    only_model.mkdir()
    _write(only_model, "x100", GOOD)
    with pytest.raises(ConfigError, match="no generic.yaml"):
        load_profiles(str(only_model))


def test_missing_profile_directory_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot list profiles"):
        load_profiles(str(tmp_path / "nope"))


# --------------------------------------------------------------------------- real-world names


def test_realdata_nvidia_smi_product_names_select_h100():
    """Reads /work/shared/realdata/nvidia-smi (real `nvidia-smi -q` captures of 8x H100 nodes);
    skips when that folder is absent (it is present in this project's CI)."""
    if not os.path.isdir(REALDATA_SMI):
        pytest.skip("realdata folder absent")
    names = set()
    for fname in sorted(os.listdir(REALDATA_SMI)):
        with open(os.path.join(REALDATA_SMI, fname), encoding="utf-8", errors="replace") as f:
            names |= set(re.findall(r"^\s*Product Name\s*:\s*(.+?)\s*$", f.read(), re.MULTILINE))
    assert names, "no Product Name lines found"
    h100 = {n for n in names if "H100" in n}
    assert h100, names
    assert {select_profile(n).name for n in h100} == {"h100-sxm"}
