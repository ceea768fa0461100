"""The infiniband check through the real runner: sysfs tree + kernel-log file + config + state.

Proves the pieces fit: the config loader accepts the check's thresholds, the runner hands the
state back on the next run (counter growth needs it), and the exporters take the report.
"""

from __future__ import annotations

import json

from prometheus_client.parser import text_string_to_metric_families

from gpuhc.config.load import load_config
from gpuhc.export.eventlog import append_event
from gpuhc.export.prometheus import write_textfile
from gpuhc.model.result import Status
from gpuhc.run.runner import run_stage
from gpuhc.run.report import RunOptions
from gpuhc.sources import SourceSpec

from tests.helpers.sysfs_tree import write_port

T0 = 1731578400.0  # 2024-11-14T10:00:00Z


def setup(tmp_path, symbol_error: int, log_lines: list[str]):
    root = tmp_path / "root"
    write_port(root, "mlx5_0", 1, counters={"symbol_error": symbol_error}, pci="0000:0c:00.0")
    write_port(root, "mlx5_9", 1, state="1: DOWN", phys="3: Disabled")
    (tmp_path / "kern.log").write_text("".join(line + "\n" for line in log_lines))
    cfg = tmp_path / "gpuhc.yaml"
    cfg.write_text("checks:\n  infiniband:\n    thresholds:\n      ignore: [mlx5_9/1]\n"
                   "      counters: {symbol_error: [5, 50]}\n      expected_rate_gbps: 400\n")
    return root, load_config(str(cfg))


def run(tmp_path, root, config, now):
    spec = SourceSpec(sysfs_root=str(root), kernel_log=str(tmp_path / "kern.log"))
    opts = RunOptions(stage="passive", config=config, sources=spec, state_dir=str(tmp_path / "state"),
                      now=now, hostname="gpu001", only=("infiniband",))
    return run_stage(opts)


def by_subject(report):
    return {r.subject: r for r in report.results}


def test_two_runs_see_counter_growth_and_an_outage(tmp_path):
    root, config = setup(tmp_path, 0, [])
    first = by_subject(run(tmp_path, root, config, T0 - 3600))
    assert first["mlx5_0/1"].status is Status.PASS and first["mlx5_9/1"].status is Status.NA

    # an hour later: 60 symbol errors more and a 12.5 s outage in the log
    root, config = setup(tmp_path, 60, [
        "2024-11-14T09:59:00,000000+00:00 mlx5_core 0000:0c:00.0 mlx5_0: Port: 1 Link DOWN",
        "2024-11-14T09:59:12,500000+00:00 mlx5_core 0000:0c:00.0 mlx5_0: Port: 1 Link ACTIVE",
    ])
    report = run(tmp_path, root, config, T0)
    r = by_subject(report)["mlx5_0/1"]
    assert r.status is Status.FAIL and r.action.drains
    assert "symbol_error +60 since last run (limit 50)" in r.message
    assert "down 12.5 s in last 600 s (limit 7 s)" in r.message
    assert report.exit_code == 1

    # the exporters take the runner's report as it is
    doc = report.to_dict()
    assert append_event(str(tmp_path / "log" / "events.jsonl"), doc) is None
    assert json.loads((tmp_path / "log" / "events.jsonl").read_text())["status"] == "fail"
    prom = write_textfile(str(tmp_path / "prom" / "gpuhc.prom"), doc)
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for fam in text_string_to_metric_families(open(prom).read()) for s in fam.samples}
    assert samples[("gpuhc_check_status", (("check", "infiniband"), ("stage", "passive"), ("subject", "mlx5_0/1")))] == 3
    assert samples[("gpuhc_node_healthy", (("stage", "passive"),))] == 0
