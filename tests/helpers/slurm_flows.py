"""gpuhc's flows on the real test cluster (tests/helpers/slurm_cluster.py): the scenarios the
nodes replay, the gpuhc config the tests start from, and what the flows decided, read back
from the decision log."""

from __future__ import annotations


import shutil
import subprocess
from pathlib import Path

from tests.helpers.paths import REPO

from tests.helpers.slurm_cluster import gpuhc_bin


HEALTHY = REPO / "examples" / "scenarios" / "healthy-8xh100.yaml"

XID79 = REPO / "examples" / "scenarios" / "xid79-fallen-off-bus.yaml"  # Xid 79 on gpu3

INTERVAL = 3  # HealthCheckInterval, seconds


def recommended_conf() -> dict[str, str]:
    """The slurm.conf lines slurm/slurm.conf.example recommends (comments dropped)."""
    lines = [ln.strip() for ln in (REPO / "slurm" / "slurm.conf.example").read_text().splitlines()
             if ln.strip() and not ln.lstrip().startswith("#")]
    return dict(ln.split("=", 1) for ln in lines)


RECOMMENDED = recommended_conf()


def scenario(tmp_path: Path, name: str, base_width: int, widths: list[int], extra: str = "") -> str:
    """A healthy 8x H100 whose gpu3 PCIe link is x8 (a failure) or x16, one width per run."""
    steps = "".join(f"  - {pcie(w)}\n" for w in widths)
    text = f"extends: {HEALTHY}\ngpus: {{3: {{pcie_width: {base_width}}}}}\n{extra}"
    if widths:
        text += "steps:\n" + steps
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return str(path)


def base_config(wd: Path, **slurm) -> dict:
    cfg = {
        "slurm": {
            "log_file": str(wd / "gpuhc-decisions.log"),
            "syslog": False,
            "resume_after": 3,
            "cooldown_s": 0,
            "postmortem_dir": str(wd / "postmortem"),
            "breaker": {"max_drained": 4, "max_drained_percent": None, "settle_s": 0.5, "jitter_s": 1.0},
        },
        "output": {"event_log": str(wd / "events.jsonl")},
        "budget_s": {"bootstrap": 60},
    }
    for k, v in slurm.items():
        if isinstance(v, dict):
            cfg["slurm"][k].update(v)
        else:
            cfg["slurm"][k] = v
    return cfg


def decisions(wd: Path, node: str, flow: str = "healthcheck") -> list[str]:
    """This node's decision log lines, without timestamps and prefix."""
    path = wd / "gpuhc-decisions.log"
    if not path.exists():
        return []
    prefix = f"gpuhc {flow} {node}: "
    out = []
    for line in path.read_text().splitlines():
        _, _, rest = line.partition(" ")
        if rest.startswith(prefix):
            out.append(rest[len(prefix):])
    return out


def back_in_service(node, release) -> bool:
    """Resumed as the release shows it: not drained, and the reason gone; Slurm 24.11 keeps the
    reason of a node it resumes (docs/slurm.md, "Slurm releases")."""
    return not node.drained and not node.down and (node.reason is None or release.version == "24.11")


def runs(wd: Path, node: str) -> int:
    return sum(1 for line in decisions(wd, node) if line.startswith("passive:"))


def wait_runs(c, wd: Path, at_least: dict[str, int], timeout: float = 180, also=None, what: str = "") -> None:
    """Wait until each node's health check has logged its verdict at least so many times (and
    ``also()``, where given, holds); on timeout say how many each had. A run logs its verdict
    before it acts on Slurm, so the last run counted may still be acting: assert on what the
    runs before it did, or wait on the act itself."""
    wanted = ", ".join(f"{k} on {n}" for n, k in at_least.items())
    c.wait_for(lambda: all(runs(wd, n) >= k for n, k in at_least.items()) and (also is None or also()), timeout,
               what or f"health checks: {wanted}",
               pending=lambda: "health checks so far: " + ", ".join(f"{n} {runs(wd, n)}" for n in at_least))


def gpuhc(cluster, *args: str, node: str | None = None, check: bool = False) -> subprocess.CompletedProcess:
    """Run the installed gpuhc against this cluster, as an admin (or, with ``node``, on that node)."""
    env = {"GPUHC_CONFIG": str(cluster.gpuhc_yaml), "PYTHONPATH": str(REPO)}
    if node:
        env.update({"SLURMD_NODENAME": node, "GPUHC_STATE_DIR": str(cluster.state_root / node)})
    cp = cluster.run([*gpuhc_bin().split(), *args], env=env, check=False, timeout=120)
    if check and cp.returncode != 0:
        raise AssertionError(f"gpuhc {' '.join(args)} exited {cp.returncode}: {cp.stdout}{cp.stderr}")
    return cp


def pcie(width: int) -> str:
    return f"{{gpus: {{3: {{pcie_width: {width}}}}}}}"


def registered(n) -> bool:
    return not n.not_responding and not {"REBOOT_REQUESTED", "REBOOT_ISSUED"} & n.flags


def reboot_and_retest(c, heal: Path | None, scenario: Path, done) -> list[str]:
    """The ladder asked for a reboot: let it happen (the machine heals when ``heal`` names the
    scenario it comes back with), wait for the boot-time retest's verdict (``done``, on the
    node as Slurm shows it) and for its boot unit to end, and return this retest's decision
    lines. The unit's end is waited for too: with ReturnToService=2 (the test clusters') 24.11
    and 26.05 return the node to service at its first registration, before the retest has run
    (docs/slurm.md, "Slurm releases"), so the node alone can look done too early."""
    calls = c.log_dir / "calls.log"

    def boots() -> int:  # bin/boot's "<time> boot-done n1 rc=N" lines
        return sum(1 for x in calls.read_text().splitlines() if x.split()[1:3] == ["boot-done", "n1"]) \
            if calls.exists() else 0

    before, seen = boots(), len(decisions(c.workdir, "n1", "quarantine retest"))
    if heal is not None:
        shutil.copyfile(heal, scenario)
    c.wait_for(lambda: boots() > before and registered(n := c.node("n1")) and done(n), 240,
               "the boot-time retest's verdict and its boot unit's end",
               pending=lambda: f"boot units ended: {boots()} (before: {before}); n1: "
                               f"{c.scontrol('show', 'node', '-o', 'n1').stdout.strip()}")
    return decisions(c.workdir, "n1", "quarantine retest")[seen:]
