"""Day two on a real Slurm: CPU nodes in a GPU cluster, and README's site test mode verbatim.

The nodes that read themselves here read this machine, which has no NVIDIA driver and no
NVIDIA GPU on its PCI bus: a real CPU node. Slurm runs the repository's shims (slurm/*.sh) as
HealthCheckProgram, Prolog and Epilog, as on a site that installed them.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from tests.helpers.paths import REPO
from tests.helpers.slurm_flows import base_config, decisions, runs, wait_runs

pytestmark = pytest.mark.slurm

HEALTHY = REPO / "examples" / "scenarios" / "healthy-8xh100.yaml"
INTERVAL = 3


def calls(wd: Path, kind: str, node: str) -> int:
    log = wd / "log" / "calls.log"
    return sum(1 for line in log.read_text().splitlines() if f" {kind} {node} " in line + " ") if log.exists() else 0


def test_cpu_node_runs_the_shims_and_stays_in_service(slurm_cluster, tmp_path):
    """c1 is a CPU node to Slurm (no Gres=) and also declared one in the config (a `hosts:` entry
    with `expected_gpus: 0`, as the shipped config's commented example shows) under a top-level
    `expected_gpus: 8`; g1 has Gres=gpu:8 in slurm.conf, so it is a GPU node whose driver vanished
    (NVML absent here) and must still be drained."""
    wd = tmp_path / "mixed"
    cfg = base_config(wd)
    cpu_entry = {"match": "cpu[001-999]", "node": {"expected_gpus": 0}}
    cfg["node"] = {"expected_gpus": 8}
    # The host's /dev/kmsg carries driver-like lines other tests plant on purpose
    # (tests/sources/test_kernel_log_realkernel.py); both nodes read an empty recorded log instead.
    (tmp_path / "kernel.log").write_text("")
    cfg["sources"] = {"kernel_log": str(tmp_path / "kernel.log")}
    cfg["hosts"] = [{**cpu_entry, "match": "c1"}]
    c = slurm_cluster(workdir=wd, nodes=("c1", "g1"), healthcheck=True, prolog=True, epilog=True,
                      healthcheck_interval=INTERVAL, gpuhc_config=cfg, prolog_flags="Alloc", gpus_per_node=8,
                      gpu_nodes=("g1",))

    c.wait_for(lambda: c.node("g1").drained, 180, "g1 (a GPU node without its driver) drained")
    g1 = c.node("g1")
    assert g1.reason.startswith("gpuhc: gpu-count NVML unavailable"), g1.reason

    job = c.sbatch("-w", "c1", "-o", "/dev/null", "--wrap", "true")
    assert c.wait_for_job(job, 180) == "COMPLETED"
    wait_runs(c, wd, {"c1": 4})
    assert calls(wd, "prolog", "c1") >= 1 and calls(wd, "epilog", "c1") >= 1

    c1 = c.node("c1")
    assert not c1.drained and not c1.down and c1.reason is None, (c1.raw_state, c1.reason)
    passive = [line for line in decisions(wd, "c1") if line.startswith("passive:")]
    assert passive and all(line.startswith("passive: PASS") for line in passive), passive
    assert not any(line.startswith("drained:") for line in decisions(wd, "c1"))
    events = [json.loads(line) for line in (wd / "events.jsonl").read_text().splitlines()]
    mine = [e for e in events if e["node"] == "c1"]
    assert {e["stage"] for e in mine} >= {"passive", "prolog", "epilog"}
    for e in mine:
        count = next(r for r in e["results"] if r["check"] == "gpu-count")
        assert count["status"] == "pass" and "no GPUs expected" in count["message"], count
        assert not [r for r in e["results"] if r["status"] in ("fail", "error")], e["results"]


def readme_try_it() -> tuple[list[dict], list[str]]:
    """README's "Try it under Slurm without GPUs": its hosts entry and its two shell blocks."""
    text = (REPO / "README.md").read_text()
    section = text.split("\n### Try it under Slurm without GPUs\n", 1)[1].split("\n### ", 1)[0]
    entry = yaml.safe_load(re.findall(r"```yaml\n(.*?)```", section, re.S)[0])
    return entry, re.findall(r"```sh\n(.*?)```", section, re.S)


def test_readme_try_it_under_slurm_without_gpus(slurm_cluster, tmp_path):
    """The README's lines as written, with three names moved into this test's cluster: the
    node (`cpu017` -> n1), `/etc/gpuhc/` (the cluster's directory) and
    `/usr/local/share/gpuhc/scenarios/` (a root-owned copy of examples/scenarios, as install.sh
    makes it)."""
    wd = tmp_path / "try"
    etc = wd / "etc"
    share = wd / "share" / "scenarios"
    (wd / "share").mkdir(parents=True)
    etc.mkdir()
    shutil.copytree(REPO / "examples" / "scenarios", share)
    entries, (sick, mend) = readme_try_it()
    assert len(entries) == 1 and entries[0]["match"] == "cpu017"

    def here(text: str) -> str:
        return (text.replace("/usr/local/share/gpuhc/scenarios/", f"{share}/").replace("/etc/gpuhc/", f"{etc}/")
                .replace("cpu017", "n1"))

    entry = yaml.safe_load(here(yaml.safe_dump(entries[0])))
    cfg = base_config(wd)
    cfg["hosts"] = [entry]
    # n2 is not in the test: a CPU node, so that n1 is not the only node of its partition
    (wd / "kernel.log").write_text("")  # n2's: the host's /dev/kmsg has planted lines (see above)
    cfg["hosts"].append({"match": "n2", "node": {"expected_gpus": 0}, "sources": {"kernel_log": str(wd / "kernel.log")}})
    # before the link exists the node would fail on a missing file: place the healthy node first
    (etc / "test-scenario.yaml").symlink_to(share / HEALTHY.name)
    c = slurm_cluster(workdir=wd, nodes=("n1", "n2"), healthcheck=True, healthcheck_interval=INTERVAL,
                      gpuhc_config=cfg)
    wait_runs(c, wd, {"n1": 1})
    assert not c.node("n1").drained

    c.run(["sh", "-ec", here(sick)])
    c.wait_for(lambda: c.node("n1").drained, 180, "n1 drained by the sick scenario",
               pending=lambda: f"n1's last decisions: {decisions(wd, 'n1')[-3:]}")
    assert c.node("n1").reason.startswith("gpuhc: xid79 gpu3"), c.node("n1").reason
    held = runs(wd, "n1")
    wait_runs(c, wd, {"n1": held + 2})
    assert c.node("n1").drained  # held, though the scenario's Xid was logged once

    c.run(["sh", "-ec", here(mend)])
    after = runs(wd, "n1")
    wait_runs(c, wd, {"n1": after + 3})
    n1 = c.node("n1")
    assert not n1.drained and not n1.down, (n1.raw_state, n1.reason)
    assert any("acknowledging the kernel-log incidents" in line for line in decisions(wd, "n1"))
    assert decisions(wd, "n1")[-1].startswith("passive: PASS")
