"""The site's other health check chained after gpuhc's in the one HealthCheckProgram slot, on a real
Slurm: slurmd runs the shim, the shim gpuhc, gpuhc the chained program (gpuhc/slurm/chain.py;
docs/slurm.md, "Sharing the slot with NHC").

The chained program is a stand-in for NHC, a real shell script that does what NHC's Slurm helpers
(``node-mark-offline``, ``node-mark-online`` of github.com/mej/nhc) do with the node: read its
reason with ``sinfo -o '%E'``; failing, drain it with an ``NHC:`` reason unless another tool's
reason is there; passing, resume it only from an ``NHC:`` reason. The assertions are on gpuhc:
the program runs every health check, gpuhc neither overwrites nor resumes NHC's reason, and
NHC's run leaves gpuhc's drain as it was. docs/verification.md records the run with the real NHC.
"""

from __future__ import annotations

import pytest

from tests.helpers.slurm_flows import HEALTHY, XID79, base_config, decisions, wait_runs

pytestmark = pytest.mark.slurm

NHC_REASON = "NHC: check_fs_mount: /scratch not mounted"

STANDIN = """#!/bin/sh
# A stand-in for LBNL NHC under Slurm: one line per run, and NHC's helpers' rules for the node.
node="$SLURMD_NODENAME"
echo "$node chained=$GPUHC_CHAINED" >> {runs}
reason=$(sinfo -h -n "$node" -o '%E' | head -n 1)
if [ -e {flags}/fail."$node" ]; then
    case "$reason" in
        none|"NHC:"*) scontrol update NodeName="$node" State=DRAIN Reason="{nhc_reason}" ;;
        *) echo "not offlining $node: already offline for a non-NHC reason ($reason)" ;;
    esac
    echo "ERROR: nhc: Health check failed: check_fs_mount: /scratch not mounted"
    exit 1
fi
case "$reason" in
    "NHC:"*) scontrol update NodeName="$node" State=RESUME ;;
esac
exit 0
"""


def _runs(path, node: str) -> int:
    return sum(1 for line in path.read_text().splitlines() if line == f"{node} chained=1") if path.exists() else 0


def test_the_chained_program_runs_under_slurmd_and_the_two_tools_keep_their_own_reasons(slurm_cluster, tmp_path):
    flags = tmp_path / "flags"
    flags.mkdir()
    runs = tmp_path / "runs"
    prog = tmp_path / "nhc"
    prog.write_text(STANDIN.format(runs=runs, flags=flags, nhc_reason=NHC_REASON))
    prog.chmod(0o755)
    n1 = tmp_path / "n1.yaml"
    n1.write_text(f"extends: {HEALTHY}\n")
    wd = tmp_path / "wd"
    wd.mkdir()
    cfg = base_config(wd, chain=[str(prog)], resume_after=2)
    c = slurm_cluster(workdir=wd, nodes=("n1", "n2"), healthcheck=True, healthcheck_interval=3, gpuhc_config=cfg,
                      node_scenarios={"n1": str(n1), "n2": str(XID79)})

    # n2: gpuhc drains with its reason; the stand-in, passing, runs after it and leaves it alone.
    c.wait_for(lambda: c.node("n2").drained and _runs(runs, "n2") >= 2, 90, "n2 drained by gpuhc, chain run twice")
    assert c.node("n2").reason.startswith("gpuhc: xid79 gpu3"), c.node("n2")
    assert any(line.startswith("chained ") and "exited 0 (status 0)" in line for line in decisions(wd, "n2"))

    # n1: the stand-in fails and drains with NHC's reason; gpuhc's healthy runs never resume it.
    (flags / "fail.n1").touch()
    c.wait_for(lambda: (c.node("n1").reason or "").startswith("NHC:"), 60, "n1 drained by the stand-in")
    seen = len(decisions(wd, "n1"))
    wait_runs(c, wd, {"n1": sum(1 for x in decisions(wd, "n1") if x.startswith("passive:")) + 3})
    node = c.node("n1")
    assert node.drained and node.reason == NHC_REASON, node
    later = decisions(wd, "n1")[seen:]
    assert not any(line.startswith("resumed") for line in later), later
    assert any("exited 1 (status 1)" in line and "check_fs_mount" in line for line in later), later

    # gpuhc now fails n1 too: it keeps NHC's reason (not overwritten), said in its log.
    n1.write_text(f"extends: {XID79}\n")
    seen = len(decisions(wd, "n1"))
    c.wait_for(lambda: any("not overwriting" in x for x in decisions(wd, "n1")[seen:]), 60,
               "gpuhc's FAIL on n1 kept NHC's reason")
    assert c.node("n1").reason == NHC_REASON

    # NHC's check heals and it resumes its own drain; gpuhc's FAIL then drains with gpuhc's reason.
    (flags / "fail.n1").unlink()
    c.wait_for(lambda: (c.node("n1").reason or "").startswith("gpuhc: xid"), 60, "n1 drained by gpuhc after NHC's resume")
    # And n2's gpuhc drain outlived every run of the stand-in.
    assert c.node("n2").reason.startswith("gpuhc: xid79 gpu3") and _runs(runs, "n2") >= 4
