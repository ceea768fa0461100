"""Bad input to the node-side commands: a clear one-line message naming what and where, the
documented exit code, never a traceback, never a wrong verdict, never lost state.

Each test here is the regression test of one bug found by trying the installed CLI with broken
configs, scenarios, baselines, state files and kernel logs. They run ``python -m gpuhc`` in a
subprocess, as an admin or Slurm would, so the exit code is the real one.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.cli import ROOT, gpuhc, one_line_error
from tests.helpers.trusted import trusted_copy

SCENARIOS = ROOT / "examples" / "scenarios"
HEALTHY = str(SCENARIOS / "healthy-8xh100.yaml")
XID79 = str(SCENARIOS / "xid79-fallen-off-bus.yaml")


def check_json(*args: str) -> tuple[subprocess.CompletedProcess, dict]:
    p = gpuhc("check", "--json", *args)
    assert "Traceback" not in p.stderr, p.stderr
    return p, json.loads(p.stdout)


def write(path: Path, text: str | bytes) -> str:
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return str(path)


def scenario(tmp_path: Path, body: str, name: str = "s.yaml") -> str:
    """A fault scenario on top of the shipped healthy node."""
    return write(tmp_path / name, f"extends: {HEALTHY}\n{body}")


# ---------------------------------------------------------------------------- scenarios


def test_non_utf8_scenario_is_named_not_an_internal_error(tmp_path):
    path = write(tmp_path / "bin.yaml", b"\xff\xfe\x00 not text")
    err = one_line_error(gpuhc("check", "--nvml-scenario", path, "--state-dir", str(tmp_path / "st")))
    assert f"{path}: cannot read scenario: not UTF-8 text" in err


def test_empty_scenario_is_rejected_not_judged_as_a_gpu_less_node(tmp_path):
    path = write(tmp_path / "empty.yaml", "# truncated copy\n")
    err = one_line_error(gpuhc("check", "--nvml-scenario", path, "--state-dir", str(tmp_path / "st")))
    assert "the scenario is empty" in err


@pytest.mark.parametrize("args", [
    ["check", "--nvml-scenario", "/dev/zero"], ["baseline", "show", "/dev/zero"], ["config", "show", "--config", "/dev/zero"],
])
def test_an_endless_yaml_file_is_refused_not_read_into_memory(tmp_path, args):
    # Before: MemoryError (exit 3) after filling the node's memory. (As root, /dev/zero is refused
    # as a config for being world-writable even before it is read; either way, exit 2.)
    err = one_line_error(gpuhc(*args, "--state-dir", str(tmp_path)) if args[0] == "check" else gpuhc(*args))
    assert "/dev/zero" in err


@pytest.mark.parametrize("body, where", [
    ("gpus: {0: {power_limit_w: .nan}}\n", "s.yaml:2: gpus.0.power_limit_w: must be a finite number"),
    ("gpus: {0: {ecc_volatile_uncorrected: -5}}\n", "s.yaml:2: gpus.0.ecc_volatile_uncorrected: must not be negative"),
    ("gpus: {0: {pcie_width: -16}}\n", "s.yaml:2: gpus.0.pcie_width: must not be negative"),
    ("time: .nan\n", "s.yaml:2: time: must be a finite number"),
    ("ib_ports: [{device: mlx5_0, port: 1, counters: {link_downed: -1}}]\n",
     "s.yaml:2: ib_ports.0.counters.link_downed: counter values must be non-negative"),
])
def test_scenario_numbers_that_would_fake_a_verdict_are_rejected(tmp_path, body, where):
    # Before: a NaN power limit passed the power check, a negative width drained the node.
    err = one_line_error(gpuhc("check", "--nvml-scenario", scenario(tmp_path, body), "--state-dir", str(tmp_path / "st")))
    assert where in err


# ---------------------------------------------------------------------------- state


def _state(tmp_path: Path, scenario_path: str = HEALTHY) -> Path:
    """A state directory after one clean run of ``scenario_path``."""
    d = tmp_path / "state"
    assert gpuhc("check", "--nvml-scenario", scenario_path, "--state-dir", str(d)).returncode in (0, 1)
    return d


@pytest.mark.parametrize("damage", [
    {"runner": "x"},
    {"checks": 5},
    {"checks": [1], "runner": {"scenario_steps": [1]}},
])
def test_state_sections_of_the_wrong_shape_are_rebuilt(tmp_path, damage):
    # Before: AttributeError, exit 3, on every run for good.
    d = _state(tmp_path)
    doc = json.loads((d / "state.json").read_text())
    doc.update(damage)
    (d / "state.json").write_text(json.dumps(doc))
    p, report = check_json("--nvml-scenario", HEALTHY, "--state-dir", str(d))
    assert p.returncode == 0 and report["status"] == "pass"
    healed = json.loads((d / "state.json").read_text())
    assert isinstance(healed["checks"], dict) and isinstance(healed["runner"], dict)


def test_a_bad_remembered_scenario_step_restarts_the_scenario(tmp_path):
    d = _state(tmp_path)
    doc = json.loads((d / "state.json").read_text())
    doc["runner"]["scenario_steps"][HEALTHY] = "x"
    (d / "state.json").write_text(json.dumps(doc))
    p, report = check_json("--nvml-scenario", HEALTHY, "--state-dir", str(d))
    assert p.returncode == 0
    assert any("not a step number" in n for n in report["notes"])


@pytest.mark.parametrize("slice_", ["garbage", [1, 2], {"cursor": "x", "held": "y", "cleared_at": {}}])
def test_a_damaged_check_state_is_rebuilt_and_the_verdict_stands(tmp_path, slice_):
    # Before: "internal error in check" (ERROR, exit 3) on every run, the Xid never judged again.
    d = _state(tmp_path, XID79)
    doc = json.loads((d / "state.json").read_text())
    doc["checks"]["xid"] = slice_
    (d / "state.json").write_text(json.dumps(doc))
    p, report = check_json("--nvml-scenario", XID79, "--state-dir", str(d))
    assert p.returncode == 1
    xid = [r for r in report["results"] if r["check"] == "xid"]
    assert [(r["status"], r["subject"]) for r in xid] == [("fail", "gpu3")]
    assert any("state of check xid" in n and "rebuilt from empty" in n for n in report["notes"])
    # ...and the next run finds a healthy state again
    p, report = check_json("--nvml-scenario", XID79, "--state-dir", str(d))
    assert p.returncode == 1 and not any("state of check" in n for n in report["notes"])


def test_a_state_file_that_cannot_be_opened_is_kept_not_rebuilt(tmp_path, monkeypatch):
    # An unreadable file is not a corrupt one: moving it aside would forget held Xids and drain
    # counts. (EIO injected at the read: root cannot be given EACCES, and a link is no longer
    # followed at all, see the next test.)
    import errno

    import gpuhc.files.untrusted as untrusted
    from gpuhc.state.node import StateError, StateStore

    d = tmp_path / "state"
    d.mkdir(mode=0o700)
    (d / "state.json").write_text('{"held": 1}')

    def eio(path, limit, what="file", dir_fd=None, shown=None):
        raise untrusted.UntrustedInputError(f"{what} {path}: cannot open: Input/output error", errno.EIO)

    monkeypatch.setattr(untrusted, "read_bounded", eio)
    store = StateStore(str(d))
    assert store.read() == {} and "judged without it" in store.problem
    with pytest.raises(StateError, match="cannot read state"):
        with store.transaction():
            pass
    monkeypatch.undo()
    assert (d / "state.json").read_text() == '{"held": 1}'
    assert not [n for n in os.listdir(d) if "corrupt" in n]


def test_a_state_file_that_is_a_link_is_never_followed(tmp_path):
    # Root never follows a link it did not make (docs/security.md): a link in place of the
    # state (a loop here; /dev/zero or a FIFO elsewhere) is set aside and the state rebuilt.
    d = tmp_path / "state"
    d.mkdir()
    os.symlink("state.json", d / "state.json")
    p, report = check_json("--nvml-scenario", HEALTHY, "--state-dir", str(d))
    assert p.returncode == 0, report
    assert any("symbolic link" in n and "rebuilt" in n for n in report["notes"]), report["notes"]
    assert not os.path.islink(d / "state.json")


def test_a_state_locked_by_a_stuck_process_still_gives_a_verdict(tmp_path):
    # Before: exit 2 ("usage or config error") and no report at all.
    import fcntl

    d = _state(tmp_path, XID79)
    with open(d / "state.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        before = (d / "state.json").read_bytes()
        p, report = check_json("--nvml-scenario", XID79, "--state-dir", str(d))
    assert p.returncode == 1  # the Xid 79 in the log still fails the node
    assert any(r["check"] == "state" and r["status"] == "error" and "locked" in r["message"] for r in report["results"])
    assert (d / "state.json").read_bytes() == before


# ---------------------------------------------------------------------------- kernel log


def test_a_fifo_as_recorded_kernel_log_is_refused_at_once(tmp_path):
    # Before: the runner waited for a recorded log up to the stage budget (here 30 s) to learn
    # "now" from its last line; then the checks timed out on it. Now a FIFO is no regular file
    # and is refused when opened: nothing waits on it.
    fifo = tmp_path / "kern.fifo"
    os.mkfifo(fifo)
    cfg = write(tmp_path / "gpuhc.yaml", "budget_s: {passive: 30}\nchecks:\n"
                + "".join(f"  {c}: {{timeout_s: 1}}\n" for c in ("xid", "infiniband", "nvswitch")))
    p = gpuhc("check", "--json", "--config", cfg, "--nvml-scenario", HEALTHY, "--kernel-log", str(fifo),
              "--state-dir", str(tmp_path / "st"))
    report = json.loads(p.stdout)
    assert p.returncode == 3
    errors = {r["check"]: r["message"] for r in report["results"] if r["status"] == "error"}
    assert set(errors) >= {"xid", "nvswitch"} and all("not a regular file" in m for m in errors.values())
    assert report["duration_s"] < 15


def test_an_endless_kernel_log_stream_is_refused_not_read_into_memory(tmp_path):
    p, report = check_json("--nvml-scenario", HEALTHY, "--kernel-log", "/dev/zero", "--state-dir", str(tmp_path / "st"))
    assert p.returncode == 3
    xid = next(r for r in report["results"] if r["check"] == "xid")
    assert xid["status"] == "error" and "not a regular file" in xid["message"]


def test_a_huge_kernel_log_file_is_read_from_its_end(tmp_path):
    from gpuhc.sources.kernel_log import recorded_tail

    path = tmp_path / "kern.log"
    path.write_bytes(b"old line one\n" * 100 + b"NVRM: Xid (PCI:0000:5d:00): 79, newest\n")
    tail = recorded_tail(str(path), limit=200)
    assert tail.endswith(b"79, newest\n") and len(tail) <= 200
    assert tail.startswith(b"old line one\n")  # whole lines only


@pytest.mark.parametrize("args, message", [
    (["--kernel-log", "/nonexistent/kern.log"], "--kernel-log: /nonexistent/kern.log: no such file"),
    (["--sysfs-root", "/nonexistent/root"], "--sysfs-root: /nonexistent/root: no such directory"),
])
def test_a_mistyped_replay_path_is_a_usage_error_not_a_healthy_node(tmp_path, args, message):
    # Before: a missing sysfs root listed no IB ports and the node passed; a missing log gave
    # three ERROR lines and exit 3.
    err = one_line_error(gpuhc("check", "--nvml-scenario", HEALTHY, *args, "--state-dir", str(tmp_path / "st")))
    assert message in err


def test_a_kernel_log_directory_is_a_usage_error(tmp_path):
    err = one_line_error(gpuhc("check", "--nvml-scenario", HEALTHY, "--kernel-log", str(tmp_path),
                               "--state-dir", str(tmp_path / "st")))
    assert "is a directory" in err


@pytest.mark.parametrize("key, message", [
    ("kernel_log", "no such file"), ("sysfs_root", "no such directory"), ("nvml_scenario", "no such file"),
])
def test_a_missing_replay_path_in_the_config_names_file_line_and_key(tmp_path, key, message):
    cfg = write(tmp_path / "gpuhc.yaml", f"sources:\n  clock_samples: 3\n  {key}: /nonexistent/x\n")
    err = one_line_error(gpuhc("check", "--config", cfg, "--state-dir", str(tmp_path / "st")))
    assert f"{cfg}:3: sources.{key}: /nonexistent/x: {message}" in err


# ---------------------------------------------------------------------------- options


@pytest.mark.parametrize("gpus", ["abc", "5-2", "-1", ",", "0-", "\u0663", "0-\u00b2"])  # Arabic-Indic 3, superscript 2
def test_bad_gpu_lists_are_usage_errors(tmp_path, gpus):
    # Before: "abc" and "-1" were internal errors (exit 3); "5-2" judged no GPU and passed.
    err = one_line_error(gpuhc("check", "--nvml-scenario", HEALTHY, f"--gpus={gpus}", "--state-dir", str(tmp_path)))
    assert "--gpus" in err


def test_gpus_no_gres_conf_has_are_usage_errors_not_a_drain(tmp_path):
    # Before: `--gpus 8,9` on an 8-GPU node failed gpu-count with drain + reboot, and so did a
    # prolog given SLURM_JOB_GPUS=12 on a MIG node (Slurm's index, not NVML's: issue 31).
    # Without a gres.conf Slurm has no device 8: gpuhc cannot tell what is meant, and says so.
    p = gpuhc("check", "--nvml-scenario", HEALTHY, "--gpus", "7-9", "--state-dir", str(tmp_path))
    assert p.returncode == 2 and "this node has no GPU 8: it has 8 GPUs, numbered 0-7 (no gres.conf at " in p.stderr
    assert "SLURM_JOB_GPUS" not in p.stderr  # the prolog's variable: not what the person typed


@pytest.mark.parametrize("now", ["nan", "inf", "-5", "1e400"])
def test_times_that_are_not_times_are_usage_errors(tmp_path, now):
    # Before: --now nan judged the Xid 79 node healthy (every window comparison was false).
    err = one_line_error(gpuhc("check", "--nvml-scenario", XID79, f"--now={now}", "--state-dir", str(tmp_path)))
    assert "--now" in err


def test_a_prolog_given_a_bad_replay_option_fails_open(tmp_path):
    # A prolog that exits non-zero drains the node in Slurm; gpuhc's own usage errors must not.
    for args in (["--kernel-log", "/nonexistent/kern.log"], ["--now", "nan"]):
        p = gpuhc("prolog", "--nvml-scenario", HEALTHY, *args, "--state-dir", str(tmp_path / "st"), "--node", "gpu001")
        assert p.returncode == 0 and "error: --" in p.stderr, p.stderr


def test_now_zero_is_used_not_replaced_by_the_clock(tmp_path):
    p, report = check_json("--nvml-scenario", XID79, "--now", "0", "--state-dir", str(tmp_path))
    # at epoch 0 the 2025 Xid lies in the future, which the window counts (clock skew)
    assert p.returncode == 1 and any(r["check"] == "xid" and r["status"] == "fail" for r in report["results"])


def test_an_unknown_only_check_is_a_usage_error_not_a_pass(tmp_path):
    # Before: "--only nvlinks" ran nothing and exited 0, "PASS (no checks)".
    err = one_line_error(gpuhc("check", "--nvml-scenario", HEALTHY, "--only", "nvlinks", "--state-dir", str(tmp_path)))
    assert "no check 'nvlinks' in stage passive" in err


@pytest.mark.parametrize("command", [["snapshot"], ["baseline", "capture"]])
def test_an_unwritable_output_is_named(tmp_path, command):
    out = tmp_path / "missing-dir" / "out.yaml"
    err = one_line_error(gpuhc(*command, "--nvml-scenario", HEALTHY, "-o", str(out)))
    assert f"cannot write {out}: No such file or directory" in err


# ---------------------------------------------------------------------------- baseline files


@pytest.mark.parametrize("text, where", [
    (b"\xff\xfe", "cannot read baseline: not UTF-8 text"),
    ("version: 1\ngpus: {'0000:18:00.0': {pcie_width_max: -16}}\n",
     ":2: gpus.0000:18:00.0.pcie_width_max: must be a finite number >= 0"),
    ("version: 1\nib: {mlx5_0/1: {rate_gbps: .nan}}\n", ":2: ib.mlx5_0/1.rate_gbps: must be a finite number >= 0"),
    ("version: 1\ngpu_count: 8\nhostname: [1]\n", ":3: hostname: must be a string"),
])
def test_broken_baseline_files_are_named(tmp_path, text, where):
    path = write(tmp_path / "baseline.yaml", text)
    err = one_line_error(gpuhc("baseline", "show", path))
    assert where in err and path in err


# ---------------------------------------------------------------------------- config


@pytest.mark.parametrize("text, where", [
    ("budget_s:\n  passive: .nan\n", ":2: budget_s.passive: must be a finite number"),
    ("checks:\n  xid:\n    thresholds:\n      window_s: -100\n", ":4: checks.xid.thresholds.window_s: must not be negative"),
    ("checks:\n  nvswitch:\n    thresholds:\n      window_s: 0\n", ":4: checks.nvswitch.thresholds.window_s: must be > 0"),
    ("checks:\n  xid:\n    thresholds:\n      window_s: .nan\n", ":4: checks.xid.thresholds.window_s: must be a finite"),
    ("checks:\n  power:\n    thresholds:\n      expected_limit_w: '700'\n",
     ":4: checks.power.thresholds.expected_limit_w: must be a number or null"),
    ("checks:\n  gpu-count:\n    thresholds:\n      expected: 2025-01-01\n", ":4: checks.gpu-count.thresholds.expected: must be"),
    ("checks:\n  xid:\n    thresholds:\n      unknown: banana\n", ":4: checks.xid.thresholds.unknown: must be warn or fail"),
    ("checks:\n  xid:\n    thresholds:\n      severity_overrides: {79: banana}\n",
     ":4: checks.xid.thresholds.severity_overrides.79: want an Xid number"),
    ("checks:\n  clocks:\n    thresholds:\n      fail_on: [hw_slowdwn]\n",
     ":4: checks.clocks.thresholds.fail_on: unknown reason(s) hw_slowdwn"),
    ("checks:\n  infiniband:\n    thresholds:\n      ethernet: maybe\n", ":4: checks.infiniband.thresholds.ethernet:"),
    ("node:\n  profile: h100-nvl\n", ":2: node.profile: unknown GPU profile 'h100-nvl'"),
    ("node:\n  profile: h100-smx\n", ":2: node.profile: unknown GPU profile 'h100-smx': did you mean 'h100-sxm'?"),
    ("hosts:\n  - match: gpu001\n    node: {profile: h100}\n", ":3: hosts.0.node.profile: unknown GPU profile"),
])
def test_config_values_that_would_give_a_wrong_verdict_are_rejected_up_front(tmp_path, text, where):
    # Before: `gpuhc config validate` said "valid" to all of these; a run then passed an Xid 79
    # node (negative window), crashed `config show --json` (a date), or failed without a line.
    cfg = write(tmp_path / "gpuhc.yaml", text)
    assert f"{cfg}{where}" in one_line_error(gpuhc("config", "validate", "--config", cfg))
    assert f"{cfg}{where}" in one_line_error(gpuhc("config", "show", "--json", "--config", cfg))
    assert f"{cfg}{where}" in one_line_error(gpuhc("check", "--config", cfg, "--nvml-scenario", XID79,
                                                   "--node", "gpu001", "--state-dir", str(tmp_path / "st")))


@pytest.mark.parametrize("text, message", [
    ("node: " + "[" * 30000 + "]" * 30000 + "\n", "nested more than 100 levels deep"),  # was: segfault
    ("node:\n  " + "- " * 30000 + "x\n", "nested more than 100 levels deep"),  # was: segfault
    ("node: " + "[" * 2000 + "]" * 2000 + "\n", "nested more than 100 levels deep"),  # was: RecursionError, exit 3
    ("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
     + "".join(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 9))
     + "node: *a8\n", "aliases expanding without end"),  # was: minutes of CPU and gigabytes
])
def test_pathological_yaml_is_a_named_error(tmp_path, text, message):
    # gpuhc's own promise, whatever the YAML library's limits and wording: exit 2, one line that
    # names the file and says what is wrong in gpuhc's words.
    cfg = write(tmp_path / "gpuhc.yaml", text)
    for p in (gpuhc("config", "validate", "--config", cfg),
              gpuhc("check", "--nvml-scenario", cfg, "--state-dir", str(tmp_path / "st"))):
        err = one_line_error(p).strip()
        assert len(err.splitlines()) == 1 and err.startswith("gpuhc: error: ") and cfg in err and message in err, err


def test_an_empty_gpuhc_config_variable_means_unset(tmp_path):
    env = dict(os.environ, GPUHC_CONFIG="")
    p = subprocess.run([sys.executable, "-m", "gpuhc", "config", "validate"], capture_output=True, text=True,
                       timeout=60, cwd=ROOT, env=env)
    assert "config file not found" not in p.stderr  # before: the empty name counted as asked for
    if not os.path.exists("/etc/gpuhc/gpuhc.yaml"):
        assert p.returncode == 0 and "built-in defaults" in p.stdout


def test_config_validate_reads_the_configured_baseline(tmp_path):
    # A run only notes a broken baseline and judges against the profile; validate must say so.
    base = write(tmp_path / "baseline.yaml", "version: 1\ngpus: {'0000:18:00.0': {pcie_width_max: -16}}\n")
    cfg = write(tmp_path / "gpuhc.yaml", f"node:\n  baseline: {base}\n")
    err = one_line_error(gpuhc("config", "validate", "--config", cfg))
    assert f"{cfg}:2: node.baseline: {base}:2: gpus.0000:18:00.0.pcie_width_max" in err
    missing = write(tmp_path / "gpuhc2.yaml", f"node:\n  baseline: {tmp_path}/none.yaml\n")
    assert "node.baseline: " in one_line_error(gpuhc("config", "validate", "--config", missing))


def test_shipped_configs_still_validate(tmp_path):
    # As root a config others could write is refused: validate copies with root's modes, so the
    # checkout's own modes do not decide (tests/helpers/trusted.py).
    for path in ("etc/gpuhc.yaml", "examples/sweep/gpuhc-sweep.yaml"):
        copy = trusted_copy(ROOT / path, tmp_path / Path(path).name)
        p = gpuhc("config", "validate", "--config", str(copy))
        assert p.returncode == 0, p.stderr


# ---------------------------------------------------------------------------- output


def _with_closed_stdout(*args: str) -> tuple[int, str]:
    """Run gpuhc with a reader that left before the first byte, as `gpuhc ... | head` can."""
    p = subprocess.Popen([sys.executable, "-m", "gpuhc", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         cwd=ROOT, text=True)
    p.stdout.close()
    err = p.stderr.read()
    return p.wait(timeout=120), err


@pytest.mark.parametrize("scenario_path, code", [(HEALTHY, 0), (XID79, 1)])
def test_a_closed_stdout_does_not_change_the_verdict(tmp_path, scenario_path, code):
    # Before: click turned the EPIPE into exit 1 ("unhealthy") for a healthy node.
    rc, err = _with_closed_stdout("check", "-v", "--nvml-scenario", scenario_path, "--state-dir", str(tmp_path))
    assert rc == code and "Traceback" not in err
    rc, err = _with_closed_stdout("explain", "xid")
    assert rc == 0 and "Traceback" not in err


def _report_with(tmp_path: Path, kernel_line: str, state_dir: Path):
    from gpuhc.cli.common import SourceArgs, run_options_from
    from gpuhc.run.runner import run_stage

    path = scenario(tmp_path, f"kernel_log: [{json.dumps(kernel_line)}]\n")
    src = SourceArgs(nvml_scenario=path, state_dir=str(state_dir), hostname="gpu001")
    os.environ.pop("GPUHC_CONFIG", None)
    return run_stage(run_options_from(src, "passive"))


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_square_brackets_in_kernel_lines_and_paths_are_text_on_a_terminal(tmp_path):
    # Before: rich read "[/evil]" from an Xid line's process name (anyone's to choose) as
    # markup and the table crashed: MarkupError, exit 3. The state path had the same effect.
    from gpuhc.export.output import render_report

    state = tmp_path / "st[/x]"  # a directory "x]" inside "st[": the path reads st[/x]
    state.mkdir(parents=True)
    (state / "state.json").write_text("garbage")  # a note that quotes the path
    report = _report_with(tmp_path, "2025-03-04T10:03:12,448120+00:00 NVRM: Xid (PCI:0000:5d:00): 999, "
                                    "pid=1, name=[/evil] [bold]x", state)
    out = _Tty()
    render_report(report, stream=out)
    text = re.sub(r"\x1b\[[0-9;]*m", "", out.getvalue())  # rich's colours
    assert "WARN" in text and "st[/x]" in text


def test_plain_output_keeps_one_result_per_line(tmp_path):
    from gpuhc.export.output import plain_lines

    report = _report_with(tmp_path, "2025-03-04T10:03:12,448120+00:00 NVRM: Xid (PCI:0000:5d:00): 79", tmp_path / "st")
    report.results[0] = dataclasses.replace(report.results[0], message="two\nlines\x1b[31m")
    lines = plain_lines(report, verbose=True)
    assert all("\n" not in line and "\x1b" not in line for line in lines)
    assert any(r"two\x0alines\x1b[31m" in line for line in lines)  # escaped: visible, inert
