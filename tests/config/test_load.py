"""Config: validated before anything runs; errors name file, line and key."""

from __future__ import annotations

import os
import re

import pytest
import yaml

from gpuhc.config.load import load_config
from gpuhc.config.hosts import host_matches
from gpuhc.errors import ConfigError
from tests.helpers.paths import REPO


def write(tmp_path, text: str) -> str:
    path = tmp_path / "gpuhc.yaml"
    path.write_text(text)
    os.chmod(path, 0o644)
    return str(path)


def test_missing_default_file_gives_defaults(monkeypatch, tmp_path):
    monkeypatch.delenv("GPUHC_CONFIG", raising=False)
    monkeypatch.setattr("gpuhc.config.load.DEFAULT_PATH", str(tmp_path / "nope.yaml"))
    cfg = load_config(None, "n1")
    assert cfg.path is None
    assert cfg.section("budget_s")["passive"] == 45.0
    assert cfg.section("budget_s")["prolog"] == 5.0


def test_missing_named_file_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(str(tmp_path / "nope.yaml"))


def test_valid_file_merges_over_defaults(tmp_path):
    cfg = load_config(write(tmp_path, "node:\n  expected_gpus: 8\nbudget_s:\n  prolog: 3\n"), "n1")
    assert cfg.section("node")["expected_gpus"] == 8
    assert cfg.section("budget_s")["prolog"] == 3.0
    assert cfg.section("budget_s")["passive"] == 45.0


@pytest.mark.parametrize(
    "text, line, key, words",
    [
        ("node:\n  expected_gpu: 8\n", 2, "node.expected_gpu", "unknown key"),
        ("node:\n  expected_gpus: eight\n", 2, "node.expected_gpus", "must be an integer"),
        ("budget_s:\n  passive: 900\n", 2, "budget_s.passive", "<= 600"),
        ("nodes: {}\n", 1, "nodes", "unknown key"),
        ("sources:\n  clock_samples: true\n", 2, "sources.clock_samples", "boolean"),
        ("budget_s:\n  prolog: 1\n  prolog: 2\n", 3, "budget_s.prolog", "duplicate"),
    ],
)
def test_errors_name_file_line_and_key(tmp_path, text, line, key, words):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_config(path, "n1")
    msg = str(err.value)
    assert msg.startswith(f"{path}:{line}: {key}: "), msg
    assert words in msg


def test_broken_yaml_names_the_line(tmp_path):
    path = write(tmp_path, "node:\n  expected_gpus: [8\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert f"{path}:" in str(err.value) and "not valid YAML" in str(err.value)


def test_top_level_must_be_a_mapping(tmp_path):
    with pytest.raises(ConfigError, match="top level"):
        load_config(write(tmp_path, "- a\n- b\n"))


def test_per_host_overrides_apply_in_order(tmp_path):
    text = (
        "node:\n  expected_gpus: 8\n"
        "hosts:\n"
        "  - match: gpu[001-004]\n    node:\n      expected_gpus: 4\n"
        "  - match: gpu00*\n    budget_s:\n      prolog: 2\n"
    )
    path = write(tmp_path, text)
    assert load_config(path, "gpu003").section("node")["expected_gpus"] == 4
    assert load_config(path, "gpu003").section("budget_s")["prolog"] == 2.0
    assert load_config(path, "gpu005").section("node")["expected_gpus"] == 8
    assert load_config(path, "gpu005.cluster.local").section("budget_s")["prolog"] == 2.0
    assert load_config(path, "cpu001").section("budget_s")["prolog"] == 5.0


def test_host_override_errors_name_the_entry(tmp_path):
    path = write(tmp_path, "hosts:\n  - match: gpu[1-2]\n    node:\n      expectd_gpus: 1\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, "gpu1")
    assert ":4: hosts.0.node.expectd_gpus: unknown key" in str(err.value)


def test_bad_hostlist_is_rejected(tmp_path):
    with pytest.raises(ConfigError, match="bad hostlist"):
        load_config(write(tmp_path, "hosts:\n  - match: gpu[1-\n    node: {}\n"), "gpu1")


def test_a_later_host_entry_wins_and_entries_do_not_nest(tmp_path):
    path = write(tmp_path, "hosts:\n  - match: gpu*\n    budget_s: {prolog: 2}\n"
                           "  - match: gpu[1-2]\n    budget_s: {prolog: 3}\n")
    assert load_config(path, "gpu1").section("budget_s")["prolog"] == 3.0
    assert load_config(path, "gpu7").section("budget_s")["prolog"] == 2.0
    with pytest.raises(ConfigError, match=":3: hosts.0.hosts: hosts entries cannot nest"):
        load_config(write(tmp_path, "hosts:\n  - match: gpu1\n    hosts: []\n"), "gpu1")


def test_node_profile_help_names_the_shipped_profile_files():
    """Before: a hand list of four, long after B200, GB200 and H100 PCIe files shipped."""
    from gpuhc.config.load import CORE_SCHEMA
    from gpuhc.config.profiles import profile_names

    names = re.search(r": ([\w, -]+) \(gpuhc/data/profiles/", CORE_SCHEMA["node"]["profile"].help).group(1)
    assert names.split(", ") == profile_names()


def test_host_matches():
    assert host_matches("n3", "n[1-4]")
    assert not host_matches("n5", "n[1-4]")
    assert host_matches("gpu12.example", "gpu*")


@pytest.mark.skipif(os.geteuid() != 0, reason="ownership rules apply when running as root")
def test_root_refuses_world_writable_config(tmp_path):
    path = write(tmp_path, "node: {}\n")
    os.chmod(path, 0o666)
    with pytest.raises(ConfigError, match="writable by group or others"):
        load_config(path)


@pytest.mark.skipif(os.geteuid() != 0, reason="ownership rules apply when running as root")
def test_root_refuses_config_owned_by_someone_else(tmp_path):
    path = write(tmp_path, "node: {}\n")
    os.chown(path, 65534, 65534)
    with pytest.raises(ConfigError, match="owned by uid 65534"):
        load_config(path)


def test_shipped_example_config_is_valid(tmp_path):
    """etc/gpuhc.yaml is what admins copy: it must load, and its host overrides must apply."""
    import shutil

    src = os.path.join(REPO, "etc", "gpuhc.yaml")
    path = tmp_path / "gpuhc.yaml"
    shutil.copy(src, path)
    os.chmod(path, 0o644)
    # No fleet-wide GPU count: a node's comes from slurm.conf (docs/slurm.md, "Expected GPUs"), so a
    # CPU node of any name is never held to 8; the example hosts: entries are commented out.
    assert load_config(str(path), "gpu903").section("node").get("expected_gpus") is None
    assert load_config(str(path), "login1").section("node").get("expected_gpus") is None
    assert yaml.safe_load(path.read_text())["hosts"] is None
    assert "#   node:\n  #     expected_gpus: 4" in path.read_text()
    assert load_config(str(path), "gpu100").check_settings("xid")["thresholds"]["window_s"] == 86400


def test_subsystem_rules_run_at_load(tmp_path):
    """A section rule the flat schema cannot express (here: the sweep's size ladder) is
    enforced by `gpuhc config validate`, not first by the command that uses it."""
    path = write(tmp_path, "sweep:\n  sizes:\n    min_bytes: 4096\n    max_bytes: 8\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, "n1")
    assert f"{path}:" in str(err.value) and "sweep.sizes" in str(err.value)


@pytest.mark.skipif(os.geteuid() != 0, reason="ownership rules apply when running as root")
def test_root_refuses_a_config_dir_inside_a_directory_someone_else_owns(tmp_path):
    """/srv/theirs/gpuhc/gpuhc.yaml: root's file in root's directory, but the owner of
    /srv/theirs can rename `gpuhc` away and put their own directory in its place."""
    theirs = tmp_path / "theirs"
    (theirs / "gpuhc").mkdir(parents=True)
    path = theirs / "gpuhc" / "gpuhc.yaml"
    path.write_text("node: {}\n")
    os.chown(theirs, 65534, 65534)
    with pytest.raises(ConfigError) as e:
        load_config(str(path))
    assert str(e.value) == (f"{path}: refusing config file (in {theirs}, a directory above it): {theirs} is owned "
                            "by uid 65534, not root")


BROKEN = """\
node:
  expected_gpus: -3
  profile: nosuch
budget_s:
  passive: abc
bogus: 1
checks:
  nope: {}
  ecc:
    thresholds:
      zzz: 1
hosts:
  - match: "gpu[1-"
    state_dir: 5
"""


def test_every_error_is_listed_with_file_line_and_key(tmp_path):
    """Before: the first error only, so fixing a file took one run per mistake."""
    from gpuhc.errors import ConfigErrors

    path = write(tmp_path, BROKEN)
    with pytest.raises(ConfigErrors) as e:
        load_config(path)
    assert [(err.line, err.key) for err in e.value.errors] == [
        (2, "node.expected_gpus"), (3, "node.profile"), (5, "budget_s.passive"), (6, "bogus"), (8, "checks.nope"),
        (11, "checks.ecc.thresholds.zzz"), (13, "hosts.0.match"), (14, "hosts.0.state_dir"),
    ]
    assert all(str(err).startswith(f"{path}:{err.line}: {err.key}: ") for err in e.value.errors)


def test_config_validate_prints_every_error_one_per_line(tmp_path):
    import subprocess
    import sys

    path = write(tmp_path, BROKEN)
    p = subprocess.run([sys.executable, "-m", "gpuhc", "config", "validate", "--config", path],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    lines = p.stderr.splitlines()
    assert len(lines) == 9 and lines[-1] == f"gpuhc: error: {path}: 8 errors"
    assert lines[0] == f"gpuhc: error: {path}:2: node.expected_gpus: must be >= 0, got -3"
    assert all(line.startswith(f"gpuhc: error: {path}:") for line in lines)


def test_one_error_is_still_a_plain_config_error(tmp_path):
    path = write(tmp_path, "node: {expected_gpus: -1}\n")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert type(e.value) is ConfigError and (e.value.line, e.value.key) == (1, "node.expected_gpus")


def test_a_key_with_a_newline_is_named_on_one_line(tmp_path):
    path = write(tmp_path, 'node:\n  "a\\nb": 1\n')
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(e.value) == f"{path}:2: node.a\\x0ab: unknown key (known here: baseline, expected_gpus, gres_conf, profile)"


def test_a_default_that_clashes_with_a_value_set_is_named_only_when_that_value_is_fine(tmp_path):
    """min_fraction 1.5 is the mistake, not the default warn_fraction under it; but min_fraction
    0.95 is fine alone, and then the default warn_fraction (0.93) must be raised too."""
    head = "checks:\n  hbm:\n    thresholds:\n"
    with pytest.raises(ConfigError) as e:
        load_config(write(tmp_path, head + "      min_fraction: 1.5\n"))
    assert e.value.key == "checks.hbm.thresholds.min_fraction" and "warn_fraction" not in str(e.value)
    with pytest.raises(ConfigError) as e:
        load_config(write(tmp_path, head + "      min_fraction: 0.95\n"))
    assert (e.value.line, e.value.key) == (3, "checks.hbm.thresholds.warn_fraction")


@pytest.mark.parametrize("word, names, want", [
    ("xdi", ["ib", "xid", "nvlink"], "xid"),  # two neighbours swapped: difflib's ratio (0.67) missed it
    ("mdoe", ["mode", "cooldown_s"], "mode"),
    ("xidd", ["xid", "ecc"], "xid"),  # one letter added
    ("nvlnk", ["nvlink", "ib"], "nvlink"),  # one dropped
    ("pcie-aar", ["pcie-aer", "pcie"], "pcie-aer"),  # one changed
    ("resume_aftr", ["resume_after"], "resume_after"),
    ("ab", ["ba"], None),  # too short to guess at
    ("zzz", ["xid", "ecc"], None),
])
def test_did_you_mean_one_slip_away(word, names, want):
    from gpuhc.text.schema import did_you_mean

    assert did_you_mean(word, names) == (f": did you mean {want!r}?" if want else "")
