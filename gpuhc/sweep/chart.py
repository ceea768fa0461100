"""Showing a sweep: the nccl-tests-like size table, a busbw-vs-size chart in the terminal, a PNG.

The terminal chart is plain text (one row per size, a bar per curve) so it survives cron mail
and ``less``; the PNG needs matplotlib (``pip install gpuhc[plot]``), imported only when asked
(:mod:`gpuhc.text.plot`).
"""

from __future__ import annotations

from typing import Any

from gpuhc.text.plot import new_figure, save_figure
from gpuhc.sweep.judge import human_bytes

BAR_WIDTH = 40


def size_table(result: dict) -> str:
    """size, p50/p95/p99 latency, time, algbw, busbw, check: one row per size."""
    head = f"{'size':>10} {'p50 us':>9} {'p95 us':>9} {'p99 us':>9} {'time us':>10} {'algbw GB/s':>11} {'busbw GB/s':>11}  ok"
    lines = [f"# {result.get('backend')} all-reduce, {result.get('nranks')} ranks on {', '.join(result.get('nodes', []))}",
             head]

    def cell(v: Any, w: int) -> str:
        return f"{v:>{w}.2f}" if isinstance(v, (int, float)) else f"{'-':>{w}}"

    for row in result.get("sizes", []):
        lines.append(
            f"{_short(row['bytes']):>10} {cell(row.get('p50_us'), 9)} {cell(row.get('p95_us'), 9)} "
            f"{cell(row.get('p99_us'), 9)} {cell(row.get('time_us'), 10)} {cell(row.get('algbw_gbs'), 11)} "
            f"{cell(row.get('busbw_gbs'), 11)}  {'yes' if row.get('correct') else 'NO'}"
        )
    for t in result.get("timeouts", []):
        lines.append(f"# hung at {t.get('bytes')} B; silent ranks {t.get('silent_ranks')} on {t.get('silent_nodes')}")
    return "\n".join(lines)


def _short(n: int) -> str:
    return human_bytes(n).replace(" ", "")


def curve_of(result: dict) -> list[tuple[int, float]]:
    return [(r["bytes"], float(r.get("busbw_gbs") or 0.0)) for r in result.get("sizes", []) if isinstance(r.get("bytes"), int)]


def terminal_chart(curves: dict[str, list[tuple[int, float]]], width: int = BAR_WIDTH) -> str:
    """busbw per size, one bar per curve, scaled to the best value shown."""
    if not curves:
        return "(no measurements)"
    peak = max((bw for c in curves.values() for _, bw in c), default=0.0) or 1.0
    sizes = sorted({s for c in curves.values() for s, _ in c})
    marks = "#=*+o%@x"
    names = list(curves)
    lines = [f"busbw GB/s vs size (full bar = {peak:.2f} GB/s); " +
             ", ".join(f"{marks[i % len(marks)]} {n}" for i, n in enumerate(names))]
    for s in sizes:
        for i, name in enumerate(names):
            bw = dict(curves[name]).get(s)
            if bw is None:
                continue
            bar = marks[i % len(marks)] * max(0, int(round(bw / peak * width)))
            label = _short(s) if i == 0 or len(names) == 1 else ""
            lines.append(f"{label:>8} |{bar:<{width}} {bw:9.2f}")
    return "\n".join(lines)


def write_png(curves: dict[str, list[tuple[int, float]]], path: str, title: str = "") -> None:
    plt, fig, ax = new_figure(8)
    for name, curve in curves.items():
        if curve:
            xs, ys = zip(*curve)
            ax.plot(xs, ys, marker="o", markersize=3, label=name)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_title(title or "all-reduce bus bandwidth")
    ax.grid(True, alpha=0.3)
    if len(curves) <= 12:
        ax.legend(fontsize=7)
    save_figure(plt, fig, path)
