"""Record what a real Slurm release prints about drained and down nodes: the fixtures of
tests/fixtures/slurm/slurm-<version>/ (drain-report and the node parsers read them).

    python tests/matrix/capture.py 24.11 OUTDIR     # as root; builds the chroot when missing

The cluster (tests/helpers/slurm_cluster.py, the release of tests/helpers/slurm_release.py) has eight nodes:

    n1  idle, in service
    n2  drained by gpuhc (a real reason built by gpuhc.slurm.policy.reason from an Xid 79 result)
    n3  drained by gpuhc, quarantine cycle 2, UTF-8 in the evidence
    n4  drained by an admin, UTF-8 reason (umlaut, dash, emoji)
    n5  draining: an admin drain while a job runs on it
    n6  DOWN by an admin (ReturnToService=1 here, so it stays DOWN while its slurmd answers)
    n7  RETIRED by gpuhc
    n8  not responding: its slurmd killed (SlurmdTimeout=10 here so it goes DOWN* quickly)

and files are written exactly as the commands print them (``COMMANDS`` below).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: tests.helpers

from tests.helpers.slurm_cluster import SlurmCluster  # noqa: E402

COMMANDS = {
    "scontrol_show_node.txt": ["scontrol", "show", "node"],
    "scontrol_show_node_oneline.txt": ["scontrol", "show", "node", "-o"],
    "scontrol_json_show_node.json": ["scontrol", "--json", "show", "node"],
    "sinfo_json.json": ["sinfo", "--json"],
    "sinfo.txt": ["sinfo"],
    "sinfo_N_l.txt": ["sinfo", "-N", "-l"],
    "sinfo_R.txt": ["sinfo", "-R"],
}


def reasons() -> dict[str, str]:
    from gpuhc.model.result import Action, Result, Status
    from gpuhc.slurm.policy.reason import build_reason

    xid = Result("xid", Status.FAIL, "Xid 79 on gpu3 (0000:5d:00.0): GPU has fallen off the bus", "gpu3",
                 action=Action.DRAIN_REBOOT)
    pcie = Result("pcie", Status.FAIL, "link x8 < x16 at 16 GT/s — degraded (Gen4 “×8”)", "gpu5",
                  action=Action.DRAIN_REBOOT)
    return {
        "n2": build_reason([xid]),
        "n3": build_reason([pcie], cycle=2),
        "n4": "admin: Lüfter defekt — ticket №4711 🔧",
        "n5": "admin: BIOS update after the job",
        "n6": "admin: PSU swap, back Monday",
        "n7": build_reason([xid], retired=True),
    }


def capture(version: str, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    wd = Path(tempfile.mkdtemp(prefix=f"capture-{version}-"))
    nodes = tuple(f"n{i}" for i in range(1, 9))
    c = SlurmCluster(wd, nodes=nodes, release=version, extra_conf=["SlurmdTimeout=10", "ReturnToService=1"])
    c.start()
    try:
        job = c.sbatch("-w", "n5", "-o", "/dev/null", "--wrap", "sleep 600")
        c.wait_for(lambda: c.job_state(job) == "RUNNING", 30, "job on n5 running")
        why = reasons()
        for node in ("n2", "n3", "n4", "n5", "n7"):
            c.scontrol("update", f"NodeName={node}", "State=DRAIN", f"Reason={why[node]}")
        c.scontrol("update", "NodeName=n6", "State=DOWN", f"Reason={why['n6']}")
        slurmd = c._procs.pop("slurmd.n8")
        c._kill_group(slurmd)
        c.wait_for(lambda: c.node("n8").raw_state.startswith("DOWN"), 90, "n8 DOWN (not responding)")
        unsupported = []
        for name, argv in COMMANDS.items():
            cp = c.run(argv, check=False)
            if cp.returncode == 0:
                (out / name).write_text(cp.stdout)
            else:  # 22.05 as Debian builds it has no --json: record what it says instead
                unsupported.append(f"{' '.join(argv)}: exit {cp.returncode}: {cp.stderr.strip().splitlines()[0]}")
        if unsupported:
            (out / "UNSUPPORTED").write_text("\n".join(unsupported) + "\n")
        (out / "VERSION").write_text(c.release.installed_version() + "\n")
        c.run(["scancel", str(job)], check=False)
    finally:
        c.stop()


if __name__ == "__main__":
    capture(sys.argv[1], Path(sys.argv[2]))
