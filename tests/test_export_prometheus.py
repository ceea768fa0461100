"""node_exporter textfiles, parsed back with prometheus_client's own parser."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuhc.export.prometheus import (
    HELP, Sample, render, report_samples, textfile_path, write_breaker_metric, write_metrics, write_textfile,
)


def report(stage="passive", status="fail", exit_code=1, timed_out=("nvlink",)):
    def r(check, status, subject="node"):
        return {"check": check, "status": status, "subject": subject, "message": "m", "value": None,
                "threshold": None, "action": "none"}

    return {"node": "gpu001", "stage": stage, "started": 1700000000.5, "duration_s": 1.25,
            "status": status, "exit_code": exit_code, "timed_out": list(timed_out),
            "results": [r("ecc", "warn", "gpu3"), r("ecc", "fail", "gpu3"), r("ecc", "pass", "gpu0"),
                        r("infiniband", "n/a", "mlx5_4/1"), r("nvlink", "error"), r("pcie", "warn", 'we"ird\\sub\nject')]}


def parse(path) -> dict[tuple, float]:
    """{(name, frozenset(labels)): value} of every sample in the file."""
    out = {}
    with open(path) as f:
        for fam in text_string_to_metric_families(f.read()):
            for s in fam.samples:
                out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def val(samples, name, **labels):
    return samples[(name, frozenset(labels.items()))]


def test_run_metrics_round_trip(tmp_path):
    written = write_textfile(str(tmp_path / "gpuhc.prom"), report())
    assert written == str(tmp_path / "gpuhc-passive.prom")
    m = parse(written)
    st = {"stage": "passive"}
    assert val(m, "gpuhc_check_status", check="ecc", subject="gpu3", **st) == 3  # worst of warn and fail
    assert val(m, "gpuhc_check_status", check="ecc", subject="gpu0", **st) == 0
    assert val(m, "gpuhc_check_status", check="infiniband", subject="mlx5_4/1", **st) == 0  # n/a
    assert val(m, "gpuhc_check_status", check="nvlink", subject="node", **st) == 2
    assert val(m, "gpuhc_check_status", check="pcie", subject='we"ird\\sub\nject', **st) == 1
    assert val(m, "gpuhc_check_timed_out", check="nvlink", **st) == 1
    assert val(m, "gpuhc_check_timed_out", check="ecc", **st) == 0
    assert val(m, "gpuhc_node_healthy", **st) == 0
    assert val(m, "gpuhc_node_status", **st) == 3
    assert val(m, "gpuhc_run_exit_code", **st) == 1
    assert val(m, "gpuhc_run_duration_seconds", **st) == 1.25
    assert val(m, "gpuhc_run_timestamp_seconds", **st) == 1700000000.5
    assert len([k for k in m if k[0] == "gpuhc_check_status"]) == 5


def test_healthy_run(tmp_path):
    m = parse(write_textfile(str(tmp_path / "x-{stage}.prom"), report("prolog", "warn", 0, ())))
    assert val(m, "gpuhc_node_healthy", stage="prolog") == 1
    assert val(m, "gpuhc_node_status", stage="prolog") == 1
    assert val(m, "gpuhc_check_timed_out", check="nvlink", stage="prolog") == 0


def test_stages_write_their_own_files(tmp_path):
    assert textfile_path("/t/gpuhc-{stage}.prom", "epilog") == "/t/gpuhc-epilog.prom"
    assert textfile_path("/t/gpuhc.prom", "prolog") == "/t/gpuhc-prolog.prom"
    assert textfile_path("/t/gpuhc-prolog.prom", "prolog") == "/t/gpuhc-prolog.prom"
    for stage in ("passive", "prolog"):
        write_textfile(str(tmp_path / "gpuhc.prom"), report(stage))
    assert sorted(os.listdir(tmp_path)) == ["gpuhc-passive.prom", "gpuhc-prolog.prom"]  # no temporary left


def test_mode_is_readable_by_node_exporter_under_any_umask(tmp_path):
    old = os.umask(0o077)
    try:
        path = write_textfile(str(tmp_path / "new" / "gpuhc.prom"), report())
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o755


def test_replacement_is_atomic(tmp_path):
    """A reader holding the old file sees it whole; the name points at the new one."""
    path = write_textfile(str(tmp_path / "gpuhc.prom"), report(status="fail"))
    with open(path) as old:
        write_textfile(path, report(status="pass", exit_code=0))
        assert "gpuhc_node_healthy{stage=\"passive\"} 0.0" in old.read()
    assert val(parse(path), "gpuhc_node_healthy", stage="passive") == 1


def test_breaker_metric_in_its_own_file(tmp_path):
    path = str(tmp_path / "gpuhc-breaker.prom")
    write_breaker_metric(path, True, 12, 10, now=1700000100.0)
    m = parse(path)
    assert val(m, "gpuhc_breaker_open") == 1
    assert val(m, "gpuhc_breaker_drained_nodes") == 12
    assert val(m, "gpuhc_breaker_cap") == 10
    assert val(m, "gpuhc_breaker_timestamp_seconds") == 1700000100.0
    write_breaker_metric(path, False, 3, 10)
    assert val(parse(path), "gpuhc_breaker_open") == 0


def test_general_writer_for_other_subsystems(tmp_path):
    path = str(tmp_path / "gpuhc-sweep.prom")
    write_metrics(path, [Sample("gpuhc_sweep_busbw_gbps", 351.5, {"pair": "a,b"})],
                  helps={"gpuhc_sweep_busbw_gbps": "all-reduce bus bandwidth of the last sweep"})
    assert val(parse(path), "gpuhc_sweep_busbw_gbps", pair="a,b") == 351.5


def test_render_refuses_inconsistent_metrics():
    with pytest.raises(ValueError, match="no HELP"):
        render([Sample("gpuhc_made_up", 1)])
    with pytest.raises(ValueError, match="labels"):
        render([Sample("gpuhc_node_healthy", 1, {"stage": "a"}), Sample("gpuhc_node_healthy", 1, {"x": "b"})])


def test_unwritable_place_raises_oserror_naming_the_path(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(OSError, match="gpuhc-passive.prom"):
        write_textfile(str(tmp_path / "file" / "gpuhc.prom"), report())


def test_every_help_text_is_one_line():
    assert all("\n" not in text and text for text in HELP.values())
    assert {s.name for s in report_samples(report())} <= set(HELP)


def test_importing_the_exporters_does_not_load_prometheus_client():
    code = "import sys, gpuhc.export.prometheus, gpuhc.export.eventlog; print('prometheus_client' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False"
