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


def test_writing_a_textfile_never_loads_prometheus_client(tmp_path):
    # About 75 ms to import, more than judging a node (issue 10): the hot path writes the text itself.
    code = ("import sys; from gpuhc.export.prometheus import write_textfile, write_breaker_metric; "
            f"write_textfile({str(tmp_path / 'g.prom')!r}, {report()!r}); "
            f"write_breaker_metric({str(tmp_path / 'b.prom')!r}, True, 1, 2); "
            "print('prometheus_client' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False"
    assert val(parse(tmp_path / "g-passive.prom"), "gpuhc_node_status", stage="passive") == 3


def families(text: str) -> dict:
    return {f.name: (f.documentation, f.type, sorted((s.name, tuple(sorted(s.labels.items())), repr(s.value))
                                                     for s in f.samples))
            for f in text_string_to_metric_families(text)}


def test_same_families_as_prometheus_client_renders():
    """What prometheus_client itself would write for these samples, read back by its parser."""
    from prometheus_client import CollectorRegistry, Gauge, generate_latest

    samples = report_samples(report()) + [Sample("gpuhc_breaker_cap", 10)]
    reg = CollectorRegistry(auto_describe=False)
    gauges = {}
    for s in samples:
        if s.name not in gauges:
            gauges[s.name] = Gauge(s.name, HELP[s.name], labelnames=sorted(s.labels), registry=reg)
        (gauges[s.name].labels(**s.labels) if s.labels else gauges[s.name]).set(s.value)
    assert families(render(samples).decode()) == families(generate_latest(reg).decode())


def test_escaping_and_odd_values_read_back_exactly():
    helps = {"gpuhc_x": 'back\\slash "quoted" and\nnewline'}
    text = render([Sample("gpuhc_x", float("inf"), {"a": 'q"\\\n'}), Sample("gpuhc_x", float("-inf"), {"a": "b"}),
                   Sample("gpuhc_x", float("nan"), {"a": "c"}), Sample("gpuhc_x", 1e21, {"a": "d"}),
                   Sample("gpuhc_x", -0.5, {"a": "e"}), Sample("gpuhc_x", 7, {"a": "b"})], helps).decode()
    (fam,) = text_string_to_metric_families(text)
    assert fam.documentation == helps["gpuhc_x"] and fam.type == "gauge"
    got = {s.labels["a"]: s.value for s in fam.samples}
    assert got['q"\\\n'] == float("inf") and got["d"] == 1e21 and got["e"] == -0.5 and got["c"] != got["c"]
    assert got["b"] == 7  # a series given twice keeps its last value, once
    assert text.count('a="b"') == 1


def test_names_prometheus_would_refuse_are_refused():
    with pytest.raises(ValueError, match="metric name"):
        render([Sample("gpuhc-bad", 1)], {"gpuhc-bad": "x"})
    with pytest.raises(ValueError, match="label name"):
        render([Sample("gpuhc_x", 1, {"0bad": "v"})], {"gpuhc_x": "x"})


def test_breaker_metric_carries_the_retirements_alert(tmp_path):
    """Issue 30: the breaker's retirement cap said ALERT only in a log line; the gauge lets the
    shipped rule (GpuhcRetirementsAtCap) fire on it."""
    path = str(tmp_path / "gpuhc-breaker.prom")
    write_breaker_metric(path, False, 1, 5, now=1.0, retired=2, retired_cap=2)
    m = parse(path)
    assert (val(m, "gpuhc_breaker_retired_nodes"), val(m, "gpuhc_breaker_retired_cap"),
            val(m, "gpuhc_breaker_retired_alert")) == (2, 2, 1)
    write_breaker_metric(path, False, 1, 5, now=1.0, retired=1, retired_cap=2)
    assert val(parse(path), "gpuhc_breaker_retired_alert") == 0
    write_breaker_metric(path, False, 1, 5, now=1.0, retired=0, retired_cap=0)  # a cap of 0: no alert
    assert val(parse(path), "gpuhc_breaker_retired_alert") == 0
    write_breaker_metric(path, False, 1, 5, now=1.0)  # no retirement count known: no such series
    assert not any(k[0].startswith("gpuhc_breaker_retired") for k in parse(path))
