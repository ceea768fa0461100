#!/usr/bin/env python3
"""Time `gpuhc drain-report` on a 10,000-node cluster dump against the floor of reading it.

Two levels, both on dumps written by bench/gen_nodes.py (text and slurmrestd-style JSON), each
format reported on its own rows:

- in process: read + parse + group + render (plain, JSON, rich table), each against a baseline
  measured in the same loop: reading the text file and splitting its lines, or stdlib
  `json.loads` of the JSON file — what any tool must pay before it knows a single node's state
  (gpuhc decodes with orjson when installed, so its JSON ratio can be below 1);
- end to end: `python -m gpuhc drain-report --from-file FILE` exactly as an admin runs it (plain
  and --json output, no --now), against `python -c "import json"` (interpreter start), in
  alternating runs.

Runs alternate between baseline and measured code so that machine noise hits both alike; we
report medians, the ratio, and the absolute time. Target: 10,000 nodes rendered in under 1 s
end to end, for text and for JSON input; the exit status is 1 when a median misses it.

    python3 bench/bench_drain_report.py                 # 10,000 nodes, 7 runs
    python3 bench/bench_drain_report.py --nodes 50000 --runs 5 --json --max-s 5
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))

import gen_nodes  # noqa: E402  (after the path set-up above)

from gpuhc.cli.report_render import render_plain, render_rich  # noqa: E402
from gpuhc.slurm.read.dumps import read_dump  # noqa: E402  (what --from-file reads with)
from gpuhc.slurm.report.build import build_report  # noqa: E402

NOW = float(gen_nodes.NOW)


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def baseline_text(path: str) -> None:
    _read(path).splitlines()


def baseline_json(path: str) -> None:
    json.loads(_read(path))


def full(path: str, render: str) -> None:
    report = build_report(read_dump(_read(path)).nodes, NOW)
    if render == "plain":
        render_plain(report, path)
    elif render == "json":
        json.dumps(report.to_dict(), ensure_ascii=False, indent=2)
    else:
        render_rich(report, path, False, io.StringIO(), width=200)


def paired(base, measured, runs: int) -> tuple[float, float]:
    """Medians of alternating runs of ``base`` and ``measured`` (seconds)."""
    b, m = [], []
    base()
    measured()  # warm caches, byte-compile, lru caches of the parser
    for _ in range(runs):
        t0 = time.perf_counter()
        base()
        t1 = time.perf_counter()
        measured()
        t2 = time.perf_counter()
        b.append(t1 - t0)
        m.append(t2 - t1)
    return statistics.median(b), statistics.median(m)


def timed(argv: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, timeout=120)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=10000)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--dir", help="where to write the dumps (default: a temporary directory)")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    ap.add_argument("--max-s", type=float, default=1.0, help="end-to-end target per input format (seconds)")
    args = ap.parse_args()

    out_dir = args.dir or tempfile.mkdtemp(prefix="gpuhc-bench-nodes-")
    text_path, json_path = gen_nodes.write(out_dir, args.nodes)
    floor = [sys.executable, "-c", "import json"]
    results = []
    for fmt, path, base, base_name in (
        ("text", str(text_path), baseline_text, "read + splitlines"),
        ("json", str(json_path), baseline_json, "read + json.loads"),
    ):
        for render in ("plain", "json", "rich"):
            b, m = paired(lambda base=base, path=path: base(path),
                          lambda path=path, render=render: full(path, render), args.runs)
            results.append({"level": "in-process", "input": fmt, "render": render, "baseline": base_name,
                            "baseline_s": b, "gpuhc_s": m, "ratio": m / b if b else None})
        for render, extra in (("plain", []), ("json", ["--json"])):
            cmd = [sys.executable, "-m", "gpuhc", "drain-report", "--from-file", path, *extra]
            b, m = paired(lambda: timed(floor), lambda cmd=cmd: timed(cmd), max(5, args.runs))
            results.append({"level": "end-to-end", "input": fmt, "render": render,
                            "baseline": "python -c 'import json'", "baseline_s": b, "gpuhc_s": m,
                            "ratio": m / b if b else None})

    verdicts = {}
    for fmt in ("text", "json"):
        worst = max(r["gpuhc_s"] for r in results if r["level"] == "end-to-end" and r["input"] == fmt)
        verdicts[fmt] = {"end_to_end_s": worst, "max_s": args.max_s, "ok": worst <= args.max_s}
    meta = {"nodes": args.nodes, "runs": args.runs, "python": sys.version.split()[0], "orjson": _orjson_version(),
            "text_mb": round(text_path.stat().st_size / 1e6, 1), "json_mb": round(json_path.stat().st_size / 1e6, 1)}
    failed = [fmt for fmt, v in verdicts.items() if not v["ok"]]
    if args.json:
        print(json.dumps({"meta": meta, "results": results, "verdicts": verdicts}, indent=2))
        return 1 if failed else 0
    print(f"drain-report, {args.nodes} nodes ({meta['text_mb']} MB text, {meta['json_mb']} MB JSON), "
          f"medians of {args.runs} runs, Python {meta['python']}, orjson {meta['orjson'] or 'not installed'}")
    for fmt in ("text", "json"):
        print(f"\n{fmt} input")
        print(f"  {'level':<11} {'render':<6} {'baseline':<24} {'baseline':>9} {'gpuhc':>9} {'ratio':>6}")
        for r in (r for r in results if r["input"] == fmt):
            print(f"  {r['level']:<11} {r['render']:<6} {r['baseline']:<24} "
                  f"{r['baseline_s'] * 1000:>7.0f}ms {r['gpuhc_s'] * 1000:>7.0f}ms {r['ratio']:>6.2f}")
        v = verdicts[fmt]
        print(f"  end to end, slowest median: {v['end_to_end_s']:.2f} s "
              f"({'ok' if v['ok'] else 'MISSES'} the {v['max_s']:g} s target)")
    return 1 if failed else 0


def _orjson_version() -> str | None:
    try:
        import orjson
    except ImportError:
        return None
    return orjson.__version__


if __name__ == "__main__":
    sys.exit(main())
