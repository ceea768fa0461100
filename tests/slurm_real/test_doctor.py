"""The shipped config on a real Slurm with GPU and CPU nodes, and `gpuhc doctor` reading that cluster.

One cluster for the module (tests/helpers/story.py): `gpu01` is a GPU node to Slurm (Gres=gpu,
gres.conf) that plays a recorded 8-GPU node in site test mode (README, "Try it under Slurm
without GPUs"), `n2` and `login1` are CPU nodes with names no `hosts:` entry knows. The config is
etc/gpuhc.yaml as install.sh installs it, with only the paths of this test's cluster, the
README's test-mode entry, and a recorded empty kernel log for the CPU nodes (the host's /dev/kmsg
carries driver-like lines other tests plant). This machine has no NVIDIA driver and no NVIDIA
GPU on its PCI bus, so the CPU nodes read themselves for real. Slurm runs the repository's shims
as HealthCheckProgram, Prolog and Epilog.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest
import yaml

from tests.helpers.paths import REPO
from tests.helpers.slurm_cluster_files import gpuhc_bin
from tests.helpers.slurm_flows import base_config, decisions, runs, wait_runs
from tests.helpers.story import once

pytestmark = pytest.mark.slurm

GPU, CPUS = "gpu01", ("n2", "login1")


def shipped_text(wd) -> str:
    """etc/gpuhc.yaml as install.sh installs it (comments kept: README's observe lines edit one),
    with this cluster's paths, no active checks (no CuPy here), README's test-mode entry for the
    GPU node and a recorded empty kernel log for the CPU nodes."""
    text = (REPO / "etc" / "gpuhc.yaml").read_text()
    cfg = yaml.safe_load(text)
    assert "expected_gpus" not in (cfg.get("node") or {}) and not cfg.get("hosts")  # nothing fleet-wide
    for old, new in (("log_file: /var/log/gpuhc/slurm.log", f"log_file: {wd}/gpuhc-decisions.log\n  syslog: false"),
                     ("/var/log/gpuhc/events.jsonl", f"{wd}/events.jsonl"), ("/var/lib/gpuhc", f"{wd}/lib"),
                     ("/var/lib/prometheus/node-exporter", f"{wd}/textfile"), ("cooldown_s: 600", "cooldown_s: 0"),
                     ("  enabled: true               # epilog", "  enabled: false              # epilog")):
        assert old in text, old
        text = text.replace(old, new)
    section = (REPO / "README.md").read_text().split("\n### Try it under Slurm without GPUs\n", 1)[1]
    entry = re.findall(r"```yaml\n(.*?)```", section, re.S)[0]
    text += entry.replace("cpu017", GPU).replace("/etc/gpuhc/", f"{wd}/etc/")
    text += f'  - match: "{",".join(CPUS)}"\n    sources:\n      kernel_log: {wd}/kernel.log\n'
    return text


@pytest.fixture(scope="module")
def cluster(slurm_cluster_module, tmp_path_factory):
    wd = tmp_path_factory.mktemp("gpuhc-doctor")
    (wd / "etc").mkdir()
    (wd / "textfile").mkdir()
    (wd / "kernel.log").write_text("")
    share = wd / "scenarios"
    shutil.copytree(REPO / "examples" / "scenarios", share)
    (wd / "etc" / "test-scenario.yaml").symlink_to(share / "healthy-8xh100.yaml")
    c = slurm_cluster_module(workdir=wd, nodes=(GPU, *CPUS), healthcheck=True, prolog=True, epilog=True,
                             healthcheck_interval=3, healthcheck_node_state="ANY,CYCLE", gpus_per_node=8,
                             gpu_nodes=(GPU,), prolog_flags="Alloc", prolog_epilog_timeout=90,
                             extra_conf=["SchedulerParameters=nohold_on_prolog_fail"],
                             gpuhc_config=yaml.safe_load(shipped_text(wd)))
    c.gpuhc_yaml.write_text(shipped_text(wd))  # the same settings, with the file's comments
    c.wd = wd
    return c


def cpu_nodes_checked(c) -> None:
    wait_runs(c, c.wd, dict.fromkeys((GPU, *CPUS), 4))
    job = c.sbatch("-w", "n2", "-o", "/dev/null", "--wrap", "true")
    c.wait_for_job(job, 180)  # its prolog and epilog ran; the tests look at what the runs said


def test_the_shipped_config_drains_no_cpu_node(cluster):
    """The node Slurm gives no GPUs passes without NVML, whatever its name; the test-mode GPU
    node is held to its 8 (docs/slurm.md, "Expected GPUs")."""
    once(cluster, cpu_nodes_checked)
    for name in CPUS:
        node = cluster.node(name)
        assert not node.drained and not node.down and node.reason is None, (name, node.raw_state, node.reason)
        passive = [ln for ln in decisions(cluster.wd, name) if ln.startswith("passive:")]
        assert passive and all(ln.startswith("passive: PASS") for ln in passive), passive
    events = [json.loads(ln) for ln in (cluster.wd / "events.jsonl").read_text().splitlines()]
    counts = {e["node"]: next(r for r in e["results"] if r["check"] == "gpu-count")["message"] for e in events}
    assert counts["n2"] == counts["login1"] == "no GPUs expected (Slurm gives this node no GPUs), no NVIDIA driver"
    assert counts[GPU] == "8 of 8 GPUs visible"
    assert not cluster.node(GPU).drained


def doctor(c, *args: str) -> subprocess.CompletedProcess:
    env = c.env()
    return subprocess.run([*gpuhc_bin().split(), "doctor", "--config", str(c.gpuhc_yaml), "--node", GPU, "--no-admin-host",
                           *args], env=env, capture_output=True, text=True, timeout=120)


def test_doctor_passes_the_right_wiring_and_lists_each_nodes_count(cluster):
    once(cluster, cpu_nodes_checked)
    cp = doctor(cluster, "--json")
    assert cp.returncode == 0, cp.stdout + cp.stderr
    out = json.loads(cp.stdout)
    assert out["worst"] != "blocker" and out["slurm_conf"] == str(cluster.conf_path)
    assert re.match(r"\d+\.\d+", out["release"] or ""), out["release"]  # sinfo --version, the cluster's clients
    status = {f["setting"]: f["status"] for f in out["findings"]}
    for key in ("HealthCheckProgram", "HealthCheckNodeState", "Prolog", "Epilog", "PrologEpilogTimeout (Prolog)",
                "PrologEpilogTimeout (Epilog)", "PrologFlags", "SchedulerParameters", "RebootProgram"):
        assert status[key] == "ok", (key, out["findings"])
    assert status["HealthCheckInterval"] == "warn"  # 3 s: a test's interval, shorter than gpuhc's deadline
    rows = {r["node"]: r for r in out["nodes"]}
    assert set(rows) == {GPU, *CPUS}
    # the GPU node plays a recording (site test mode): held to its hosts: entry's count, as its runs are
    assert (rows[GPU]["expected"], rows[GPU]["from"], rows[GPU]["hosts_entries"]) == (
        8, "config (a recorded node: site test mode)", [f"hosts[0] {GPU}"])
    assert all((rows[n]["expected"], rows[n]["from"]) == (0, "slurm.conf") for n in CPUS)
    table = doctor(cluster)
    assert table.returncode == 0 and "expected GPUs of each node sinfo lists" in table.stdout, table.stdout


def test_doctor_names_a_wrong_setting_of_this_cluster(cluster, tmp_path):
    """The same cluster's slurm.conf with an epilog timeout below gpuhc's epilog deadline."""
    wrong = tmp_path / "slurm.conf"
    wrong.write_text(cluster.conf_path.read_text().replace("PrologEpilogTimeout=90", "PrologEpilogTimeout=30"))
    cp = doctor(cluster, "--slurm-conf", str(wrong), "--no-sinfo")
    assert cp.returncode == 1, cp.stdout + cp.stderr
    assert "blocker" in cp.stdout and "worst: blocker" in cp.stdout, cp.stdout
    out = json.loads(doctor(cluster, "--slurm-conf", str(wrong), "--no-sinfo", "--json").stdout)
    bad = [f for f in out["findings"] if f["status"] == "blocker"]
    assert [f["setting"] for f in bad] == ["PrologEpilogTimeout (Epilog)"], bad  # the prolog (20 s + 10) still fits


def readme_blocks(heading: str) -> list[str]:
    section = (REPO / "README.md").read_text().split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]
    return re.findall(r"```sh\n(.*?)```", section, re.S)


def test_readme_observe_then_enforce(cluster):
    """README's "Observe, then enforce" lines as written (the config's path moved into this
    cluster), from the mode line a fresh install writes (install.sh): a sick node in observe mode
    stays in service and `fleet observed` / `drain-report --observed` name it; after the
    enforce lines it is drained."""
    once(cluster, cpu_nodes_checked)
    read, enforce = readme_blocks("### Observe, then enforce (the recommended rollout)")
    env = {"GPUHC_CONFIG": str(cluster.gpuhc_yaml)}

    def sh(text: str) -> subprocess.CompletedProcess:
        return cluster.run(["sh", "-ec", text.replace("/etc/gpuhc/gpuhc.yaml", str(cluster.gpuhc_yaml))], env=env,
                           check=False, timeout=120)

    text = cluster.gpuhc_yaml.read_text()
    fresh = "  mode: observe             # observe: decide and log, change nothing in Slurm\n"
    text = re.sub(r"^  mode: \w+.*\n", "", text, flags=re.M)
    cluster.gpuhc_yaml.write_text(re.sub(r"^slurm:\n", "slurm:\n" + fresh, text, count=1, flags=re.M))
    assert re.search(r"^  mode: observe ", cluster.gpuhc_yaml.read_text(), re.M), cluster.gpuhc_yaml.read_text()
    sick = readme_blocks("### Try it under Slurm without GPUs")[0]
    cluster.run(["sh", "-ec", sick.replace("/usr/local/share/gpuhc/scenarios/", f"{cluster.wd}/scenarios/")
                 .replace("/etc/gpuhc/", f"{cluster.wd}/etc/")])
    before = runs(cluster.wd, GPU)
    wait_runs(cluster, cluster.wd, {GPU: before + 3})
    assert not cluster.node(GPU).drained
    cp = sh(read)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert GPU in cp.stdout and "xid" in cp.stdout.lower(), cp.stdout

    cp = sh(enforce)
    assert cp.returncode == 0 and "valid" in cp.stdout, cp.stdout + cp.stderr
    assert re.search(r"^  mode: enforce ", cluster.gpuhc_yaml.read_text(), re.M)
    cluster.wait_for(lambda: cluster.node(GPU).drained, 180, "the sick node drained once enforced",
                     pending=lambda: f"{GPU}'s last decisions: {decisions(cluster.wd, GPU)[-3:]}")
    assert cluster.node(GPU).reason.startswith("gpuhc: xid79 gpu"), cluster.node(GPU).reason
