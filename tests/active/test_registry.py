"""The active checks' one declaration each (gpuhc/active/registry.py): everything else reads
it, and config validation covers their thresholds with file and line like a passive check's."""

from __future__ import annotations

import pytest

from gpuhc.active import ACTIVE_CHECK_IDS, plan, registry, settings, worker
from gpuhc.checks import all_checks, checks_for_stage
from gpuhc.config.load import load_config
from gpuhc.errors import ConfigError


def _config(tmp_path, text: str) -> str:
    path = tmp_path / "gpuhc.yaml"
    path.write_text(text)
    return str(path)


def test_an_active_threshold_typo_is_rejected_with_file_and_line(tmp_path):
    path = _config(tmp_path, "node:\n  expected_gpus: 8\nchecks:\n  hbm:\n    thresholds:\n      min_fracton: 0.5\n")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert e.value.file == path and e.value.line == 6 and e.value.key == "checks.hbm.thresholds.min_fracton"
    assert "unknown threshold" in str(e.value) and "min_fraction" in str(e.value)


@pytest.mark.parametrize("thresholds, line, key, words", [
    ("min_fraction: 1.5", 6, "checks.hbm.thresholds.min_fraction", "at most 1"),
    ("min_fraction: 0.9\n      warn_fraction: 0.8", 7, "checks.hbm.thresholds.warn_fraction", "below min_fraction"),
    ("gbps: 0", 6, "checks.hbm.thresholds.gbps", "above 0"),
    ("gbps: fast", 6, "checks.hbm.thresholds.gbps", "number"),
])
def test_active_threshold_values_are_judged_with_file_and_line(tmp_path, thresholds, line, key, words):
    path = _config(tmp_path, f"node:\n  expected_gpus: 8\nchecks:\n  hbm:\n    thresholds:\n      {thresholds}\n")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    # config validate lists every error (issue 8): the one asked for is among them, by file:line:key
    found = [(x.file, x.line, x.key) for x in getattr(e.value, "errors", [e.value]) if words in str(x)]
    assert (path, line, key) in found, str(e.value)


def test_per_precision_tables_name_known_precisions(tmp_path):
    path = _config(tmp_path, "checks:\n  gpu-speed:\n    thresholds:\n      tflops:\n        bf16: 600\n        fp8: 1500\n")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert e.value.line == 6 and "unknown precision" in str(e.value)
    ok = _config(tmp_path, "checks:\n  gpu-speed:\n    thresholds:\n      tflops: {bf16: 600}\n  memtest:\n"
                           "    thresholds: {max_bad_words: 2}\n  dcgm:\n    thresholds: {warn_is_fail: true}\n")
    assert load_config(ok).check_settings("gpu-speed")["thresholds"] == {"tflops": {"bf16": 600}}


def test_one_registry_lists_every_check_once():
    ids = [c.id for c in all_checks()]
    assert len(ids) == len(set(ids))
    assert set(ACTIVE_CHECK_IDS) <= set(ids) and settings.ALL_CHECKS == list(ACTIVE_CHECK_IDS)
    # the runner's passive stages never pick up an active declaration
    for stage in ("passive", "prolog", "epilog", "bootstrap"):
        assert not set(c.id for c in checks_for_stage(stage)) & set(ACTIVE_CHECK_IDS)


def test_every_declared_task_is_a_worker_task_and_every_check_task_is_declared():
    for check in registry.CHECKS:
        assert all(t in registry.TASK for t in check.tasks), check.id
        assert (check.judge is None) == (not check.tasks), check.id  # dcgm runs its own program
    for task in registry.TASKS:
        assert worker.TASKS[task.name] == task.module
    # the plan is built from the declarations: a stage of every check runs every task, in order
    p = plan.build("bootstrap", {})
    assert [t.name for t in p.tasks] == [t.name for t in registry.TASKS]
    assert {c for t in p.tasks for c in t.checks} == {c.id for c in registry.CHECKS if c.tasks}


@pytest.mark.parametrize("text, line, key, words", [
    ("active:\n  epilog:\n    checks:\n      - burn-in\n      - gpu-sped\n", 5, "active.epilog.checks", "gpu-sped"),
    ("active:\n  dtypes: [bf16, int8]\n", 2, "active.dtypes", "int8"),
    ("active:\n  dtypes: []\n", 2, "active.dtypes", "at least one"),
    # the burn-in's correctness pass (tests/active/test_burnin_precisions.py has the rest)
    ("active:\n  check_dtypes: [fp32, fp65]\n", 2, "active.check_dtypes", "unknown dtype 'fp65'"),
    ("active:\n  check_dtypes:\n    - fp16\n    - int8\n", 4, "active.check_dtypes", "unknown dtype 'int8'"),
    ("active:\n  check_dtypes: fp64\n", 2, "active.check_dtypes", "must be a list"),
    ("active:\n  check_s: -1\n", 2, "active.check_s", "must be >= 0"),
    ("active:\n  check_n: 64\n", 2, "active.check_n", "must be >= 256"),
    ("hosts:\n  - match: 'gpu*'\n    active:\n      bootstrap:\n        checks: [memtst]\n", 5,
     "hosts.0.active.bootstrap.checks", "memtst"),
])
def test_the_active_section_is_judged_when_the_config_loads(tmp_path, text, line, key, words):
    """A stage that names a check no one declared is refused by `gpuhc config validate`, not
    first by the epilog that would run nothing in its place."""
    path = _config(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        load_config(path)
    # config validate lists every error (issue 8): the one asked for is among them, by file:line:key
    found = [(x.file, x.line, x.key) for x in getattr(e.value, "errors", [e.value]) if words in str(x)]
    assert (path, line, key) in found, str(e.value)
