#!/usr/bin/env python3
"""Reading a big recorded kernel log from its end, against parsing only its last 32 MiB.

The baseline is what gpuhc did before it read past the tail: parse the last 32 MiB and stop
(fast, and blind to an Xid one line further back). gpuhc now also scans further back for
driver lines until the judging window is covered. This bench makes a 200 MB log (a sparse hole,
an Xid, then 33 MiB of other lines: the worst case, where the scan must go to the start of the
file) and reports medians and their ratio, alternating runs so machine noise hits both alike.

    python3 bench/bench_kernel_log_file.py [--runs 5] [--json] [--size-mb 200]
    python3 bench/bench_kernel_log_file.py --against /tmp/klbase [--size-mb 1024]

Target: ratio <= 1.5 (the scan runs at C speed; the parser's 32 MiB dominate). With
``--against TREE`` it compares the whole ``read_file`` of this tree with another checkout's (an
older reader: ``git worktree add``), each in a fresh process, alternating; it reports medians,
each one's peak memory, and the ratio against the target of 1.10 (a reader change may cost 10 %).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from gpuhc.sources import kernel_log_file  # noqa: E402
from gpuhc.sources.kernel_log_parse import parse_lines  # noqa: E402
from gpuhc.files.untrusted import read_tail  # noqa: E402

TARGET = 1.5


AGAINST_TARGET = 1.10
_ONE_READ = """
import resource, sys, time
sys.path.insert(0, sys.argv[1])
from gpuhc.sources import kernel_log_file
t0 = time.perf_counter()
log = kernel_log_file.read_file(sys.argv[2])
took = time.perf_counter() - t0
assert [e.code for e in log.events] == [79], "the Xid beyond the tail was not found"
print(took, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def make(path: str, size_mb: int = 200) -> None:
    t = 1_740_000_000

    def iso(s: float) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(s)) + ",000000+00:00"

    with open(path, "wb") as f:
        hole = max(0, size_mb - 40) << 20  # the lines after the Xid are some 33 MiB
        f.truncate(hole)
        f.seek(hole)
        f.write(f"\n{iso(t - 360)} NVRM: Xid (PCI:0000:5d:00): 79, GPU has fallen off the bus.\n".encode())
        n = (33 << 20) // 246 + 1
        f.write("".join(f"{iso(t - 300 + 300 * i / n)} systemd[1]: {'x' * 200}\n" for i in range(n)).encode())


def baseline(path: str) -> None:
    data, _ = read_tail(path, kernel_log_file.TAIL_BYTES, "kernel log")
    parse_lines(data.decode("utf-8", "replace").split("\n"))


def gpuhc(path: str) -> None:
    log = kernel_log_file.read_file(path)
    assert [e.code for e in log.events] == [79], "the Xid beyond the tail was not found"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--size-mb", type=int, default=200, help="size of the log (a sparse hole, then the lines)")
    ap.add_argument("--against", metavar="TREE", help="compare with the reader of another checkout")
    args = ap.parse_args()
    if args.against:
        return against(args)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "kern.log")
        make(path, args.size_mb)
        times: dict[str, list[float]] = {"baseline": [], "gpuhc": []}
        for _ in range(args.runs):
            for name, fn in (("baseline", baseline), ("gpuhc", gpuhc)):
                t0 = time.perf_counter()
                fn(path)
                times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    ratio = med["gpuhc"] / med["baseline"]
    out = {"baseline_s": med["baseline"], "gpuhc_s": med["gpuhc"], "ratio": ratio, "target": TARGET}
    print(json.dumps(out) if args.json else
          f"baseline (last 32 MiB) {med['baseline']:.2f}s  gpuhc (whole window) {med['gpuhc']:.2f}s  "
          f"ratio {ratio:.2f} (target <= {TARGET})")
    return 0 if ratio <= TARGET else 1


def against(args) -> int:
    """This tree's reader against another checkout's, each read in its own process."""
    import subprocess

    trees = {"before": os.path.abspath(args.against), "now": ROOT}
    times: dict[str, list[float]] = {k: [] for k in trees}
    peak: dict[str, int] = {k: 0 for k in trees}
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "kern.log")
        make(path, args.size_mb)
        for _ in range(args.runs):
            for name, tree in trees.items():
                out = subprocess.run([sys.executable, "-c", _ONE_READ, tree, path], capture_output=True, text=True,
                                     check=True).stdout.split()
                times[name].append(float(out[0]))
                peak[name] = max(peak[name], int(out[1]))
    med = {k: statistics.median(v) for k, v in times.items()}
    ratio = med["now"] / med["before"]
    out = {"size_mb": args.size_mb, "runs": args.runs, "before_s": med["before"], "now_s": med["now"],
           "before_peak_kib": peak["before"], "now_peak_kib": peak["now"], "ratio": ratio, "target": AGAINST_TARGET}
    print(json.dumps(out) if args.json else
          f"{args.size_mb} MB log, {args.runs} runs: before {med['before']:.2f}s ({peak['before'] >> 10} MiB peak)  "
          f"now {med['now']:.2f}s ({peak['now'] >> 10} MiB peak)  ratio {ratio:.3f} (target <= {AGAINST_TARGET})")
    return 0 if ratio <= AGAINST_TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
