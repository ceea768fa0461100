"""`gpuhc config checks` shows what a run would use: the runner's own resolution of each check's
settings (issue 10), for passive and active checks alike."""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner

from gpuhc.cli import cli


def config_checks(tmp_path, cfg: dict | None = None, *args: str) -> str:
    argv = ["config", "checks", *args]
    if cfg is not None:
        path = tmp_path / "gpuhc.yaml"
        path.write_text(yaml.safe_dump(cfg))
        argv += ["--config", str(path)]
    out = CliRunner().invoke(cli, argv, env={"GPUHC_CONFIG": "", "SLURMD_NODENAME": "gpu001"})
    assert out.exit_code == 0, out.output
    return out.output


def rows(tmp_path, cfg: dict | None = None, *args: str) -> dict[str, dict]:
    doc = json.loads(config_checks(tmp_path, cfg, "--json", *args))
    return {r["id"]: r for r in doc["checks"]}


def block(text: str, check_id: str) -> list[str]:
    """The lines of one check in the text listing: its line and its indented thresholds."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{check_id}:") or line.startswith(f"{check_id} ("))
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith("    ")), len(lines))
    return lines[start:end]


def test_active_checks_are_listed_under_their_own_header_with_a_workload_sized_timeout(tmp_path):
    """Before: "timeout 0s" for every active check, under a header that said "passive checks"."""
    text = config_checks(tmp_path)
    passive, active = text.split("# active checks", 1)
    assert "# passive checks" in passive and "burn-in:" not in passive
    assert block(active, "burn-in")[0] == "burn-in: stages epilog,bootstrap; timeout sized from the workload; needs cupy"
    assert "0s" not in active
    assert rows(tmp_path)["hbm"]["timeout_s"] is None


def test_a_configured_timeout_of_an_active_check_is_shown(tmp_path):
    cfg = {"checks": {"hbm": {"timeout_s": 120}}}
    assert "timeout 120s" in block(config_checks(tmp_path, cfg), "hbm")[0]
    assert rows(tmp_path, cfg)["hbm"]["timeout_s"] == 120.0


def test_a_nested_threshold_merges_key_by_key_as_in_a_run(tmp_path):
    """Before: one overridden precision dropped the profile's others (a shallow merge)."""
    from gpuhc.active.registry import CHECK
    from gpuhc.config.profiles import profile_named

    profile = profile_named("h100-sxm").for_check("gpu-speed")["tflops"]
    assert len(profile) >= 2  # the test needs a second precision to lose
    first, *others = profile
    cfg = {"checks": {"gpu-speed": {"thresholds": {"tflops": {first: 1.0}}}}}
    shown = rows(tmp_path, cfg, "--profile", "h100-sxm")["gpu-speed"]["thresholds"]
    assert shown["tflops"] == {**profile, first: 1.0}
    assert shown["min_fraction"] == CHECK["gpu-speed"].defaults["min_fraction"]
    lines = block(config_checks(tmp_path, cfg, "--profile", "h100-sxm"), "gpu-speed")
    assert f"    tflops.{first}: 1.0" in lines
    assert f"    tflops.{others[0]}: {json.dumps(profile[others[0]])}" in lines


def test_what_is_shown_is_what_the_runner_resolves(tmp_path):
    """Every check, passive and active: the same thresholds and timeout a run would get."""
    from gpuhc.checks import all_checks
    from gpuhc.config.load import load_config
    from gpuhc.config.profiles import profile_named
    from gpuhc.run.plan import resolve

    cfg = {"node": {"expected_gpus": 4},
           "checks": {"thermal": {"timeout_s": 3, "thresholds": {"gpu_warn_c": 80}},
                      "hbm": {"thresholds": {"min_fraction": 0.5}}}}
    shown = rows(tmp_path, cfg, "--profile", "h200-sxm")
    config = load_config(str(tmp_path / "gpuhc.yaml"), "gpu001")
    profile = profile_named("h200-sxm")
    for check in all_checks():
        eff = resolve(check, config)
        assert shown[check.id]["thresholds"] == json.loads(json.dumps(eff.thresholds(check, profile))), check.id
        assert shown[check.id]["timeout_s"] == (eff.timeout_s or None), check.id
    assert shown["gpu-count"]["thresholds"]["expected"] == 4  # node.expected_gpus, a core key it reads
    assert (shown["thermal"]["timeout_s"], shown["thermal"]["thresholds"]["gpu_warn_c"]) == (3.0, 80)
    assert shown["hbm"]["thresholds"]["min_fraction"] == 0.5


def test_an_active_checks_stages_are_those_its_plan_runs(tmp_path):
    """DCGM runs only where its level is above 0 (the bootstrap by default); a check left out of
    a stage's list, or turned off, runs nowhere; `active.enabled: false` turns them all off."""
    assert rows(tmp_path)["dcgm"]["stages"] == ["bootstrap"]
    cfg = {"active": {"epilog": {"checks": ["burn-in"]}}, "checks": {"memtest": {"enabled": False}}}
    shown = rows(tmp_path, cfg)
    assert shown["burn-in"]["stages"] == ["epilog", "bootstrap"]
    assert shown["hbm"]["stages"] == ["bootstrap"]
    assert (shown["memtest"]["enabled"], shown["memtest"]["stages"]) == (False, [])
    assert block(config_checks(tmp_path, cfg), "memtest")[0].startswith("memtest (disabled): stages none;")
    assert all(not r["stages"] for r in rows(tmp_path, {"active": {"enabled": False}}).values() if r["kind"] == "active")


def test_per_host_overrides_apply_with_node(tmp_path):
    cfg = {"hosts": [{"match": "gpu[001-002]", "checks": {"ecc": {"enabled": False}}}]}
    assert rows(tmp_path, cfg, "--node", "gpu001")["ecc"]["enabled"] is False
    assert rows(tmp_path, cfg, "--node", "gpu003")["ecc"]["enabled"] is True


@pytest.mark.parametrize("forced, says", [
    (None, "thresholds of profile generic (a run picks the profile from the GPUs' names"),
    ("h100-sxm", "thresholds of profile h100-sxm\n"),
])
def test_the_header_says_which_profile_and_whether_a_run_would_pick_another(tmp_path, forced, says):
    cfg = {"node": {"profile": forced}} if forced else {}
    assert says in config_checks(tmp_path, cfg).split("\n\n", 1)[0] + "\n"


def test_validate_names_a_missing_source_file_of_any_hosts_entry(tmp_path):
    """A `hosts:` entry's test_scenario that is not there: validate says so at that entry's line
    (it once said "valid", and the run then pointed at the top-level sources line)."""
    from tests.helpers.cli import gpuhc, one_line_error

    path = tmp_path / "gpuhc.yaml"
    path.write_text("node:\n  expected_gpus: 4\nhosts:\n  - match: cpu017\n    node:\n      expected_gpus: 8\n"
                    f"    sources:\n      test_scenario: {tmp_path}/test-scenario.yaml\n")
    err = one_line_error(gpuhc("config", "validate", "--config", str(path)))
    assert f"{path}:8: hosts.0.sources.test_scenario: {tmp_path}/test-scenario.yaml: no such file" in err, err
    # a link to nothing is what a run refuses too (it once said "valid" here: issue 50, point 4)
    (tmp_path / "test-scenario.yaml").symlink_to(tmp_path / "elsewhere.yaml")
    err = one_line_error(gpuhc("config", "validate", "--config", str(path)))
    assert f"{path}:8: hosts.0.sources.test_scenario: {tmp_path}/test-scenario.yaml: no such file" in err, err
    (tmp_path / "elsewhere.yaml").write_text("{}\n")  # the link points at a file: valid
    assert gpuhc("config", "validate", "--config", str(path)).returncode == 0


def test_check_names_the_hosts_entry_line_of_a_missing_source(tmp_path):
    from tests.helpers.cli import gpuhc, one_line_error

    path = tmp_path / "gpuhc.yaml"
    path.write_text("sources:\n  clock_samples: 3\nhosts:\n  - match: cpu017\n    sources:\n"
                    f"      test_scenario: {tmp_path}/t.yaml\n")
    err = one_line_error(gpuhc("check", "--config", str(path), "--node", "cpu017"))
    assert f"{path}:6: hosts.0.sources.test_scenario: {tmp_path}/t.yaml: no such file" in err, err
