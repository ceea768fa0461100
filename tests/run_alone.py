"""Run every test module alone, one pytest process each, and list those that fail alone
(tests/README.md, "Every module passes alone"). A module that passes in the whole suite but
fails here leans on what an earlier module left behind.

    .venv/bin/python tests/run_alone.py [-j N] [FOLDER_OR_MODULE ...] [-- PYTEST_ARGS ...]
    .venv/bin/python tests/run_alone.py tests/slurm -- -m "not slurm"

``-j N`` runs N modules at once, each still in a process of its own. Exit 0 when every module
passed alone, 1 when one did not. Not run by CI: it is the whole suite again, plus a pytest
start per module."""

from __future__ import annotations

import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

TESTS = Path(__file__).resolve().parent
# pytest's exit code 5: nothing collected (a module whose every test the -m filter deselects)
PASSED = (0, 5)


def modules(targets: list[str]) -> list[Path]:
    found: list[Path] = []
    for t in targets or [str(TESTS)]:
        p = Path(t).resolve()
        found += [p] if p.is_file() else sorted(p.rglob("test_*.py"))
    return [m for m in found if "fixtures" not in m.relative_to(TESTS).parts]


def run_one(m: Path, extra: list[str]) -> tuple[Path, subprocess.CompletedProcess, float]:
    start = time.monotonic()
    cp = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(m.relative_to(TESTS.parent)),
                         *extra], cwd=TESTS.parent, capture_output=True, text=True)
    return m, cp, time.monotonic() - start


def main(argv: list[str]) -> int:
    targets, extra = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    jobs = 1
    if targets[:1] == ["--jobs"] or targets[:1] == ["-j"]:  # modules at once, each still alone in its process
        jobs, targets = int(targets[1]), targets[2:]
    failed = []
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for m, cp, took in pool.map(lambda m: run_one(m, extra), modules(targets)):
            rel = m.relative_to(TESTS.parent)
            last = (cp.stdout.strip().splitlines() or ["(no output)"])[-1]
            print(f"{'ok  ' if cp.returncode in PASSED else 'FAIL'} {rel} ({took:.0f} s): {last}", flush=True)
            if cp.returncode not in PASSED:
                failed.append(str(rel))
                # pyproject's -ra summary names each failed test: say which, not only that
                for line in cp.stdout.splitlines():
                    if line.startswith(("FAILED ", "ERROR ")):
                        print(f"     {line}", flush=True)
    if failed:
        print("failed alone:\n  " + "\n  ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
