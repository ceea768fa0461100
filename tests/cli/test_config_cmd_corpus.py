"""`gpuhc config validate` accepts exactly what a run accepts (issue 50, point 4): a corpus of
bad configs, each walked through `config validate` (text and --json) and `gpuhc check`, which
must refuse it alike, with the same file:line messages."""

from __future__ import annotations

import json

import pytest

from tests.helpers.cli import gpuhc

# name -> (the file's text, with {d} the test's directory; an error line both must print)
CORPUS = {
    "dangling test_scenario link": ("sources:\n  test_scenario: {d}/link.yaml\n",
                                    "{f}:2: sources.test_scenario: {d}/link.yaml: no such file"),
    "missing kernel log": ("sources:\n  kernel_log: {d}/nope.log\n", "{f}:2: sources.kernel_log: {d}/nope.log: no such file"),
    "kernel log a directory": ("sources:\n  kernel_log: {d}\n", "{f}:2: sources.kernel_log: {d}: is a directory"),
    "sysfs root a file": ("sources:\n  sysfs_root: {f}\n", "{f}:2: sources.sysfs_root: {f}: not a directory"),
    "unknown top-level key": ("sweeep: {{}}\n", "{f}:1: sweeep: unknown key: did you mean 'sweep'?"),
    "unknown slurm key": ("slurm:\n  resume_aftr: 3\n", "{f}:2: slurm.resume_aftr: unknown key: did you mean 'resume_after'?"),
    "unknown check": ("checks:\n  xidd: {{}}\n", "{f}:2: checks.xidd: unknown check: did you mean 'xid'?"),
    "two letters swapped in a hosts entry's check": ("hosts:\n  - match: n1\n    checks:\n      xdi: {{}}\n",
                                                     "{f}:4: hosts.0.checks.xdi: unknown check: did you mean 'xid'?"),
    "two letters swapped in a threshold": ("checks:\n  xid:\n    thresholds:\n      widnow_s: 5\n",
                                           "{f}:4: checks.xid.thresholds.widnow_s: unknown threshold: did you mean "
                                           "'window_s'?"),
    "unknown sweep threshold": ("sweep:\n  thresholds:\n    nccl:\n      default:\n        large_busbw_gsb: 5\n",
                                "{f}:5: sweep.thresholds.nccl.default.large_busbw_gsb: unknown threshold: did you mean "
                                "'large_busbw_gbs'?"),
    "unknown sweep backend": ("sweep:\n  thresholds:\n    ncl: {{}}\n",
                              "{f}:3: sweep.thresholds.ncl: unknown backend: did you mean 'nccl'?"),
    "unknown active check": ("active:\n  epilog:\n    checks: [burnin]\n",
                             "{f}:3: active.epilog.checks: unknown active check 'burnin': did you mean 'burn-in'?"),
    "unknown burn-in precision": ("active:\n  check_dtypes: [pf64]\n",
                                  "{f}:2: active.check_dtypes: unknown dtype 'pf64': did you mean 'fp64'?"),
    "no suggestion for a name far from every other": ("checks:\n  zzz: {{}}\n", "{f}:2: checks.zzz: unknown check (known:"),
    "wrong type": ("slurm:\n  resume_after: many\n", "{f}:2: slurm.resume_after:"),
    "bad mode": ("slurm:\n  mode: loud\n", "{f}:2: slurm.mode:"),
    "tab indentation": ("slurm:\n  resume_after: 3\n\tcooldown_s: 5\n", "{f}:3: indented with a tab"),
    "tab on the first key": ("slurm:\n\tresume_after: 3\n", "{f}:2: indented with a tab"),
    "duplicate key": ("slurm:\n  resume_after: 3\n  resume_after: 4\n", "{f}:3: slurm.resume_after: duplicate key"),
    "not YAML": ("slurm: [\n", "{f}:2: not valid YAML"),
    "top level a list": ("- 1\n", "{f}:1: the top level must be a mapping"),
    "hosts entry source": ("hosts:\n  - match: n1\n    sources:\n      nvml_scenario: {d}/gone.yaml\n",
                           "{f}:4: hosts.0.sources.nvml_scenario: {d}/gone.yaml: no such file"),
}


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_validate_and_a_run_refuse_each_bad_config_alike(tmp_path, name):
    text, want = CORPUS[name]
    path = tmp_path / "gpuhc.yaml"
    (tmp_path / "link.yaml").symlink_to(tmp_path / "gone-target.yaml")
    path.write_text(text.format(d=tmp_path, f=path))
    want = want.format(d=tmp_path, f=path)
    val = gpuhc("config", "validate", "--config", str(path))
    # the run: a check of this node, and the node's name matching the hosts: entry
    run = gpuhc("check", "--config", str(path), "--node", "n1", "--state-dir", str(tmp_path / "st"))
    for cp in (val, run):
        assert cp.returncode == 2 and "Traceback" not in cp.stderr, (cp.args, cp.returncode, cp.stderr)
        assert f"gpuhc: error: {want}" in cp.stderr, (cp.args, cp.stderr)
    errors = {line for line in run.stderr.splitlines() if line.startswith(f"gpuhc: error: {path}:")}
    assert errors <= set(val.stderr.splitlines()), (errors, val.stderr)
    doc = json.loads(gpuhc("config", "validate", "--config", str(path), "--json").stdout)
    assert doc["valid"] is False and any(f"{e['file']}:{e['line']}:" in want for e in doc["errors"]), doc


def test_json_says_valid_for_the_shipped_config():
    from tests.helpers.paths import REPO

    cp = gpuhc("config", "validate", "--config", str(REPO / "etc" / "gpuhc.yaml"), "--json")
    assert cp.returncode == 0 and json.loads(cp.stdout) == {"file": str(REPO / "etc" / "gpuhc.yaml"), "valid": True,
                                                            "errors": []}
