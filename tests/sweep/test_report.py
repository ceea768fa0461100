"""`gpuhc sweep report`: group and node history from the store, the terminal chart, the PNG."""

from __future__ import annotations

import io
import random

import pytest

from gpuhc.errors import GpuhcError
from gpuhc.text.schema import defaults
from gpuhc.sweep.campaign import advance, judge_round, new_record, note_nodes
from gpuhc.sweep.chart import size_table, terminal_chart, write_png
from gpuhc.sweep.plan import Group, plan_probe
from gpuhc.sweep.report import build_report, render_report
from gpuhc.sweep.settings import SCHEMA
from gpuhc.sweep.simulate import Cluster, NodeFault, SimSpec, fake_result
from gpuhc.sweep.stats import size_ladder
from gpuhc.sweep.store import SweepStore, write_group_result


def run_sweep(store: SweepStore) -> dict:
    """Two rounds on 8 simulated nodes, n3 slow; results written where jobs would write them."""
    names = [f"n{i}" for i in range(1, 9)]
    cluster = Cluster(names, {"n3": NodeFault("slow", bw=0.4)})
    spec, rng = SimSpec(nodes=8, noise=0.0, glitch_rate=0.0), random.Random(1)
    section = defaults(SCHEMA)
    section["ranks_per_node"] = 8
    sizes = size_ladder(1024, 2 << 30)
    rec = new_record("s1", plan_probe(names, {}, 0.0, 2, 8).groups, section, now=0.0)
    with store.locked() as index:
        index["current"] = "s1"
        while True:
            groups = [Group.from_dict(g) for g in rec["rounds"][-1]["groups"]]
            for g in groups:
                write_group_result(store.results_dir, "s1", g.id, fake_result(g, cluster, spec, sizes, rng))
            results = {g.id: store.group_result("s1", g.id) for g in groups}
            verdicts = judge_round(rec, results, section, index.setdefault("history", {}))
            note_nodes(index, rec, verdicts, 100.0 * len(rec["rounds"]))
            if advance(rec, section, names) is None:
                break
    store.save_sweep(rec)
    return rec


def test_report_shows_groups_node_history_findings_and_curves(tmp_path):
    store = SweepStore(str(tmp_path))
    rec = run_sweep(store)
    assert [c["nodes"] for c in rec["findings"]["culprits"]] == [["n3"]]
    rep = build_report(store, defaults(SCHEMA), None, ["n3"])
    assert rep["sweep_id"] == "s1" and rep["rounds"] == 2
    assert [e[3] for e in rep["nodes"]["n3"]["events"]] == ["fail", "fail", "fail"]  # its probe, two isolates
    assert "round-0 median" in rep["curves"] and len(rep["curves"]) >= 3  # median + two failing groups
    buf = io.StringIO()
    render_report(rep, buf)
    text = buf.getvalue()
    assert "culprit node n3: busbw" in text and "node n3: last probed" in text
    assert "busbw GB/s vs size" in text and "2GiB" in text
    assert "[h100-sxm]" in text  # the simulator's GPUs are H100s: whose built-in numbers applied
    from gpuhc.sweep.analyze import remember_culprits

    with store.locked() as index:  # what `analyze` does with a named culprit
        remember_culprits(index, rec, 100.0)
    rep = build_report(store, defaults(SCHEMA), None, [])
    buf = io.StringIO()
    render_report(rep, buf)
    assert list(rep["pending_drains"]) == ["n3"] and "pending drain n3 (sweep s1" in buf.getvalue()


def test_report_without_sweeps_says_so(tmp_path):
    rep = build_report(SweepStore(str(tmp_path)), defaults(SCHEMA), None, [])
    buf = io.StringIO()
    render_report(rep, buf)
    assert buf.getvalue().strip() == "no sweep recorded yet"


def test_terminal_chart_scales_bars_to_the_best_curve():
    text = terminal_chart({"good": [(1 << 20, 100.0), (1 << 30, 400.0)], "bad": [(1 << 20, 50.0), (1 << 30, 200.0)]})
    lines = text.splitlines()
    assert lines[0].startswith("busbw GB/s vs size (full bar = 400.00 GB/s)")
    full = next(x for x in lines if x.strip().startswith("1GiB"))
    assert full.count("#") == 40
    assert terminal_chart({}) == "(no measurements)"


def test_size_table_lists_every_size_with_its_check():
    res = {"backend": "nccl", "nranks": 2, "nodes": ["h"], "timeouts": [],
           "sizes": [{"bytes": 8, "p50_us": 9.1, "p95_us": 9.9, "p99_us": 12.0, "time_us": 9.3, "algbw_gbs": 0.0,
                      "busbw_gbs": 0.0, "correct": True},
                     {"bytes": 2 << 30, "time_us": 6000.0, "algbw_gbs": 357.9, "busbw_gbs": 357.9, "correct": False}]}
    lines = size_table(res).splitlines()
    assert lines[2].split()[:4] == ["8B", "9.10", "9.90", "12.00"] and lines[2].endswith("yes")
    assert lines[3].split()[:2] == ["2GiB", "-"] and lines[3].endswith("NO")


def test_png_without_matplotlib_is_a_clear_error(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_matplotlib(name, *a, **kw):
        if name.startswith("matplotlib"):
            raise ImportError("No module named 'matplotlib'")
        return real_import(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    with pytest.raises(GpuhcError, match=r"pip install 'gpuhc\[plot\]'"):
        write_png({"x": [(8, 1.0)]}, str(tmp_path / "x.png"))


def test_report_png_draws_the_curves_of_a_stored_sweep(tmp_path):
    """`gpuhc sweep report --png` end to end: a stored sweep (simulated results on disk), the CLI,
    a real PNG. matplotlib is in the `test` extra, so this runs (never skips) in CI."""
    import struct

    from click.testing import CliRunner
    from matplotlib.image import imread

    from gpuhc.cli.sweep_cmd import sweep

    run_sweep(SweepStore(str(tmp_path)))
    cfg = tmp_path / "gpuhc.yaml"
    cfg.write_text("sweep: {}\n")
    png = tmp_path / "curves.png"
    res = CliRunner().invoke(sweep, ["report", "--state-dir", str(tmp_path), "--config", str(cfg), "--png", str(png),
                                     "--node", "n3"])
    assert res.exit_code == 0, res.output
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"  # the PNG signature
    assert data[12:16] == b"IHDR" and struct.unpack(">II", data[16:24]) == (960, 540)  # 8 x 4.5 in at 120 dpi
    assert len(data) > 20_000  # axes, labels, a legend and several curves, not an empty canvas
    # The curves are drawn in colour on a white/grey canvas: count the clearly coloured pixels.
    rgb = imread(str(png))[..., :3]
    coloured = ((rgb.max(axis=2) - rgb.min(axis=2)) > 0.3).sum()
    assert coloured > 1_000, coloured
    assert "busbw GB/s vs size" in res.output  # the terminal chart is still printed beside the PNG
    assert res.output.rstrip().endswith(f"wrote {png}")


def test_png_that_cannot_be_written_is_a_clear_error(tmp_path):
    with pytest.raises(GpuhcError, match=r"cannot write .*nodir"):
        write_png({"x": [(8, 1.0), (16, 2.0)]}, str(tmp_path / "nodir" / "x.png"))
