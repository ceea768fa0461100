#!/usr/bin/env python3
"""Wall time of `gpuhc check` against baselines timed in the same run (issue 10, "Speed").

Every command is a fresh process, as the health check is; runs alternate between the commands
so machine noise hits them alike, and medians are compared. Targets, as ratios:

- replay (this CPU machine): `gpuhc check --stage passive` replaying the healthy 8-GPU node
  (examples/scenarios/healthy-8xh100.yaml, the bundled demo's original) at most 1.8x
  `python -c "import pynvml"`, with an empty config and with the shipped etc/gpuhc.yaml (event
  log and textfile on);
- live (`--live`, a GPU node): the passive stage at most 0.5x `nvidia-smi -q`, and the prolog
  of one GPU within 1.3x of bench/nvml_floor.py (a hand-written pynvml program reading the same
  fields), both configs again. Both stages read the NVLink DL counters of a third of the links
  per run (the nvlink check's default ``dl_rotation: 3``, the floor's default too); the same
  runs with the shipped config set to ``dl_rotation: 1`` (every link, every run), against the
  floor reading every link, are reported beside them (not targets), so the cost of the
  rotation's detection delay is a number from the same run.

The untimed first run of every command also fills gpuhc's parse memo (gpuhc/files/parsecache.py),
as a node's first health check after an install or a config edit does; the timed runs are the
steady state. A replay with the memo off is timed too (not a target), to show what it saves.

Wall time decides; the CPU time (user + system) of each command is reported beside it, being
steadier on a shared machine. Each gpuhc run also reports its phases (GPUHC_PHASES, gpuhc/run/phases.py), medians in ms:
startup (interpreter and first imports), imports+config (the command, config, options), nvml
init and reads (beside the rest: the read starts early, gpuhc/run/nvml_early.py), judge
(checks, waiting for the sources), state, write-out (report, event log, textfile), exit.

    python3 bench/bench_check.py [--runs 9] [--json]
    python3 bench/bench_check.py --live [--gpu 0] [--runs 9] [--json]

    python3 bench/bench_check.py --against DIR [--runs 9] [--json]

--against DIR: the replays also run from another gpuhc checkout (say the commit before a change:
`git worktree add DIR REV`), alternating with this one's, and each is reported as a ratio of
this checkout's median to that one's (not a target): a change's worth, from the same run.

Exit status 1 when a target is missed: a bench, never a timed assertion in a unit test.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEALTHY = os.path.join(ROOT, "examples", "scenarios", "healthy-8xh100.yaml")
SHIPPED = os.path.join(ROOT, "etc", "gpuhc.yaml")
REPLAY_TARGET = 1.8
PASSIVE_TARGET = 0.5
PROLOG_TARGET = 1.3


def shipped_config(tmp: str, source: str = SHIPPED) -> str:
    """etc/gpuhc.yaml as shipped (or ``source``), its file paths moved into ``tmp`` (textfile and
    event log on)."""
    text = open(source, encoding="utf-8").read()
    for old in ("/var/lib/prometheus/node-exporter", "/var/log/gpuhc", "/var/lib/gpuhc"):
        text = text.replace(old, os.path.join(tmp, old.strip("/").replace("/", "-")))
    path = os.path.join(tmp, "shipped.yaml")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def rotation_1_config(shipped: str) -> str:
    """The shipped config with ``checks.nvlink.thresholds.dl_rotation: 1``: every link's DL
    counters on every run."""
    import yaml

    with open(shipped, encoding="utf-8") as f:
        doc = yaml.safe_load(f) or {}
    nvlink = doc.setdefault("checks", {}).setdefault("nvlink", {})
    nvlink.setdefault("thresholds", {})["dl_rotation"] = 1
    path = os.path.join(os.path.dirname(shipped), "shipped-dl-rotation-1.yaml")
    with open(path, "w", encoding="utf-8") as f:
        yaml.safe_dump(doc, f)
    return path


def phases(marks: dict[str, float], spawned: float, ended: float) -> dict[str, float]:
    first = marks.get("main", marks.get("cli"))
    seq = [("startup", spawned, first), ("imports+config", first, marks.get("run")),
           ("nvml import+init+attach (early)", marks.get("nvml_warm_start"), marks.get("nvml_warm")),
           ("nvml init", marks.get("nvml_start"), marks.get("nvml_init")),
           ("nvml reads", marks.get("nvml_init"), marks.get("nvml_read")),
           ("nvml DL top-up", marks.get("nvml_topup_start"), marks.get("nvml_topup")),
           ("judge", marks.get("run"), marks.get("judged")), ("state", marks.get("judged"), marks.get("state")),
           ("write-out", marks.get("state"), marks.get("written")), ("exit", marks.get("written"), ended)]
    return {name: (b - a) * 1000 for name, a, b in seq if a is not None and b is not None}


class Command:
    def __init__(self, name: str, argv: list[str], env: dict[str, str], gpuhc: bool = False, cwd: str = ROOT):
        # cwd: `python -m gpuhc` imports the gpuhc of the directory it starts in (--against)
        self.name, self.argv, self.env, self.gpuhc, self.cwd = name, argv, env, gpuhc, cwd
        self.times: list[float] = []
        self.cpu: list[float] = []  # user + system seconds of the process: steadier on a shared machine
        self.phases: list[dict[str, float]] = []
        self.codes: set[int] = set()

    def run(self, scratch: str) -> None:
        env = dict(self.env)
        marks_file = os.path.join(scratch, "phases.jsonl")
        if self.gpuhc:
            env["GPUHC_PHASES"] = marks_file
            if os.path.exists(marks_file):
                os.unlink(marks_file)
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        spawned, t0 = time.time(), time.perf_counter()
        # Popen.wait() with a timeout polls with sleeps of up to 50 ms, which rounds every wall
        # time to that grid (seen on the device: medians 50 ms apart); a plain wait() blocks in
        # waitpid and returns at the exit. A timer kills a run that hangs instead.
        proc = subprocess.Popen(self.argv, env=env, cwd=self.cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        watchdog = threading.Timer(120, proc.kill)
        watchdog.start()
        try:
            proc.wait()
        finally:
            watchdog.cancel()
        self.times.append(time.perf_counter() - t0)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.cpu.append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
        ended = time.time()
        self.codes.add(proc.returncode)
        if self.gpuhc and os.path.exists(marks_file):
            with open(marks_file, encoding="utf-8") as f:
                doc = json.loads(f.readline())
            self.phases.append(phases({k: v for k, v in doc["marks"]}, spawned, ended))

    def summary(self) -> dict:
        out: dict = {"median_s": round(statistics.median(self.times), 4),
                     "cpu_median_s": round(statistics.median(self.cpu), 4), "exit_codes": sorted(self.codes)}
        if self.phases:
            names = dict.fromkeys(k for p in self.phases for k in p)
            out["phases_ms"] = {k: round(statistics.median([p[k] for p in self.phases if k in p]), 1) for k in names}
        return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--live", action="store_true", help="time this GPU node instead of the replay")
    ap.add_argument("--gpu", type=int, default=0, help="live: the prolog's job GPU")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--against", metavar="DIR", help="replay: time the same replays from this other gpuhc checkout too")
    args = ap.parse_args()
    if args.against is not None:
        args.against = os.path.abspath(args.against)
        if args.live or not os.path.isfile(os.path.join(args.against, "gpuhc", "__main__.py")):
            ap.error(f"--against {args.against}: not a gpuhc checkout (or with --live: replays only)")

    tmp = tempfile.mkdtemp(prefix="gpuhc-bench-")
    env = dict(os.environ, GPUHC_STATE_DIR=os.path.join(tmp, "state"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("GPUHC_NVML_EARLY", None)
    # The parse memo in a place of its own, as a node's /var/cache/gpuhc is its own: the default
    # place on a shared machine is also every other gpuhc's there (a 64-node campaign's configs
    # pushed the replay's files out of its 48 entries, and every timed run parsed YAML afresh and
    # wrote the memo back: ~30 ms a run, seen 2026-12-07 while looking into issue 47).
    env["GPUHC_CACHE_DIR"] = os.path.join(tmp, "cache")
    os.makedirs(env["GPUHC_CACHE_DIR"], mode=0o700)
    # An installed gpuhc has its bytecode compiled by pip; a checkout must not be timed while
    # Python compiles its modules on every run (seen on machines that set
    # PYTHONDONTWRITEBYTECODE): compile once, up front.
    for tree in (ROOT, args.against):
        if tree:
            subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.join(tree, "gpuhc"),
                            os.path.join(tree, "bench")], check=False)
    # The other checkout's own state and parse memo (its memo's stamp is its own code's: sharing
    # one would have each side parse afresh and rewrite it at every run)
    against_env = dict(env, GPUHC_STATE_DIR=os.path.join(tmp, "state-against"),
                       GPUHC_CACHE_DIR=os.path.join(tmp, "cache-against"))
    os.makedirs(against_env["GPUHC_CACHE_DIR"], mode=0o700)
    empty = os.path.join(tmp, "empty.yaml")
    open(empty, "w").close()
    configs = {"empty config": empty, "shipped config": shipped_config(tmp)}
    py = sys.executable
    gpuhc = [py, "-m", "gpuhc", "check", "--stage", "passive", "--node", "benchnode"]

    cmds: list[Command] = []
    # (ratio name, command, baseline, at most; None: reported, not a target)
    targets: list[tuple[str, str, str, float | None]] = []
    if not args.live:
        cmds.append(Command("import pynvml", [py, "-c", "import pynvml"], env))
        for label, cfg in configs.items():
            name = f"passive replay healthy-8xh100, {label}"
            cmds.append(Command(name, gpuhc + ["--config", cfg, "--nvml-scenario", HEALTHY], env, gpuhc=True))
            targets.append((f"{name} / import pynvml", name, "import pynvml", REPLAY_TARGET))
            if args.against:  # the same replay (the same files) from the other checkout
                other = f"{name}, {args.against}"
                cmds.append(Command(other, gpuhc + ["--config", cfg, "--nvml-scenario", HEALTHY], against_env,
                                    gpuhc=True, cwd=args.against))
                targets.append((f"{name} / {other}", name, other, None))
        # what the parse memo is worth (not a target)
        cmds.append(Command("passive replay healthy-8xh100, shipped config, parse memo off",
                            gpuhc + ["--config", configs["shipped config"], "--nvml-scenario", HEALTHY],
                            dict(env, GPUHC_CACHE_DIR=""), gpuhc=True))
    else:
        smi = shutil.which("nvidia-smi")
        if smi:
            cmds.append(Command("nvidia-smi -q", [smi, "-q"], env))
        floor = os.path.join(ROOT, "bench", "nvml_floor.py")
        floor_prolog = f"floor prolog gpu{args.gpu}"
        for suffix, rot in (("", "3"), (", dl_rotation 1", "1")):
            cmds.append(Command(f"floor passive{suffix}", [py, floor, "passive", "--dl-rotation", rot], env))
            cmds.append(Command(f"{floor_prolog}{suffix}",
                                [py, floor, "prolog", "--gpus", str(args.gpu), "--dl-rotation", rot], env))
        cmds.append(Command("import pynvml", [py, "-c", "import pynvml"], env))
        rot1 = rotation_1_config(configs["shipped config"])
        for label, cfg, most in (*((label, cfg, True) for label, cfg in configs.items()),
                                 ("shipped config, dl_rotation 1", rot1, False)):
            passive, prolog = f"passive, {label}", f"prolog gpu{args.gpu}, {label}"
            cmds.append(Command(passive, gpuhc + ["--config", cfg], env, gpuhc=True))
            cmds.append(Command(prolog, gpuhc + ["--config", cfg, "--stage", "prolog", "--gpus", str(args.gpu)],
                                env, gpuhc=True))
            base = floor_prolog if most else f"{floor_prolog}, dl_rotation 1"
            if smi:
                targets.append((f"{passive} / nvidia-smi -q", passive, "nvidia-smi -q", PASSIVE_TARGET if most else None))
            targets.append((f"{prolog} / floor", prolog, base, PROLOG_TARGET if most else None))
        if smi:
            for name in ("floor passive", "floor passive, dl_rotation 1"):
                targets.append((f"{name} / nvidia-smi -q", name, "nvidia-smi -q", None))
        # what the early NVML read is worth (not a target)
        cmds.append(Command("passive, empty config, early read off", gpuhc + ["--config", empty],
                            dict(env, GPUHC_NVML_EARLY="0"), gpuhc=True))

    for c in cmds:  # warm the page cache; the first run of anything is an outlier
        c.run(tmp)
        c.times.clear(), c.cpu.clear(), c.phases.clear()
    for _ in range(args.runs):
        for c in cmds:
            c.run(tmp)
    by = {c.name: c for c in cmds}
    out = {
        "mode": "live" if args.live else "replay",
        "machine": platform.node(),
        "python": platform.python_version(),
        "runs": args.runs,
        "commands": {c.name: c.summary() for c in cmds},
        "ratios": {},
    }
    missed = []
    for label, cmd, base, most in targets:
        ratio = statistics.median(by[cmd].times) / statistics.median(by[base].times)
        cpu = statistics.median(by[cmd].cpu) / max(1e-9, statistics.median(by[base].cpu))
        met = None if most is None else ratio <= most
        out["ratios"][label] = {"ratio": round(ratio, 3), "target_at_most": most, "met": met,
                                "cpu_ratio": round(cpu, 3)}
        if met is False:
            missed.append(label)
    bad_exit = [c.name for c in cmds if c.gpuhc and not c.codes <= {0, 1}]
    out["all_met"] = not missed and not bad_exit
    if bad_exit:
        out["gpuhc_could_not_judge"] = bad_exit
    if args.json:
        print(json.dumps(out))
    else:
        for name, s in out["commands"].items():
            ph = ", ".join(f"{k} {v:.0f}" for k, v in s.get("phases_ms", {}).items())
            print(f"{name:48s} median {s['median_s'] * 1000:7.1f} ms (cpu {s['cpu_median_s'] * 1000:5.1f})"
                  + (f"   [{ph}]" if ph else ""))
        for label, r in out["ratios"].items():
            verdict = "(not a target)" if r["met"] is None else \
                f"(target <= {r['target_at_most']}) {'met' if r['met'] else 'MISSED'}"
            print(f"{label}: {r['ratio']:.2f} {verdict}; cpu time {r['cpu_ratio']:.2f}")
    return 0 if out["all_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
