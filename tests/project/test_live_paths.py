"""No test writes on the live node (issue 50, point 6): the session's before/after check
(tests/conftest.py, tests/helpers/live_paths.py) sees a write, and the campaign model, which the
suite runs, keeps every path a run writes under its own directory."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.helpers import live_paths
from tests.helpers.paths import REPO


def test_the_snapshot_sees_a_file_made_changed_or_removed(tmp_path, monkeypatch):
    live = tmp_path / "var-lib-gpuhc"
    (live / "retired").mkdir(parents=True)
    (live / "state.json").write_text("{}")
    monkeypatch.setattr(live_paths, "LIVE_DIRS", (str(live),))
    monkeypatch.setattr(live_paths, "LIVE_FILES", ())
    before = live_paths.snapshot()
    assert live_paths.changes(before, live_paths.snapshot()) == []
    (live / "retired" / "gpu001-retired-x").mkdir()
    (live / "state.json").write_text('{"checks": {}}')
    assert live_paths.changes(before, live_paths.snapshot()) == [
        f"made {live}/retired/gpu001-retired-x", f"changed {live}/state.json"]


def test_the_campaign_models_runs_write_only_under_its_directory(tmp_path):
    sys.path.insert(0, str(REPO / "bench"))
    try:
        from campaign_model.policies import OVERLAYS, config_for
    finally:
        sys.path.remove(str(REPO / "bench"))
    for policy in OVERLAYS:
        cfg = config_for(policy, tmp_path)
        slurm, out = cfg.section("slurm"), cfg.section("output")
        written = [cfg.data["state_dir"], slurm["postmortem_dir"], slurm["retire_bundle"]["dir"],
                   out.get("event_log"), out.get("prometheus_textfile"), slurm.get("log_file")]
        assert all(p is None or p.startswith(f"{tmp_path}/") for p in written), (policy, written)


def test_isolated_runs_see_empty_live_directories(tmp_path):
    probe = tmp_path / "probe"
    argv = live_paths.isolated(["/bin/sh", "-c", f"touch /var/lib/gpuhc/x && ls -A /var/lib/gpuhc > {probe}"])
    if not os.path.isdir("/var/lib/gpuhc"):
        argv = live_paths.isolated(["/bin/sh", "-c", f"echo x > {probe}"])
    assert subprocess.run(argv, timeout=30).returncode == 0
    assert probe.read_text() == "x\n" and not os.path.exists("/var/lib/gpuhc/x")


def test_a_real_clusters_config_keeps_bundles_in_the_tests_directory(tmp_path):
    """A retirement on a real test cluster wrote /var/lib/gpuhc/retired in CI: the cluster's
    gpuhc.yaml names bundle directories under its own work directory unless the test names one."""
    import yaml
    from types import SimpleNamespace

    from tests.helpers.slurm_cluster_files import write_gpuhc_yaml

    c = SimpleNamespace(gpuhc_config={"slurm": {"retire_bundle": {"keep": 2}}}, node_scenarios={},
                        workdir=tmp_path, gpuhc_yaml=tmp_path / "gpuhc.yaml")
    write_gpuhc_yaml(c)
    slurm = yaml.safe_load(c.gpuhc_yaml.read_text())["slurm"]
    assert slurm["retire_bundle"] == {"dir": f"{tmp_path}/retired", "keep": 2}
    assert slurm["postmortem_dir"] == f"{tmp_path}/postmortem"
    c.gpuhc_config = {"slurm": {"postmortem_dir": "/elsewhere", "retire_bundle": {"dir": "/there"}}}
    write_gpuhc_yaml(c)
    slurm = yaml.safe_load(c.gpuhc_yaml.read_text())["slurm"]
    assert slurm["retire_bundle"]["dir"] == "/there" and slurm["postmortem_dir"] == "/elsewhere"


def _written_by_the_install() -> set[str]:
    """Every gpuhc path install.sh (and README's install steps: the units copied by hand) names
    on a node, read from their text: the literal paths, a directory destination joined with
    each source's name (`install -m 0644 SRC... DIR/`, `cp SRC DIR/`), and the releases beside
    the target (`$target.releases`)."""
    import re

    path = re.compile(r"(?<![\w$}])/(?:etc|usr|opt|var|run)/[\w./*-]*gpuhc[\w.*-]*")
    to_dir = re.compile(r"^\s*(?:install|cp)\s+(?:-[a-z]\s+\S+\s+)*(.+?)\s+(/\S+/)$")
    install = (REPO / "install.sh").read_text()
    readme = "\n".join(re.findall(r"```sh\n(.*?)```", (REPO / "README.md").read_text(), re.S))
    out = set()
    for line in re.sub(r"\\\n\s*", " ", install + "\n" + readme).splitlines():
        code = "" if line.lstrip().startswith("#") else line.split(" #", 1)[0]
        out |= set(path.findall(code))
        if m := to_dir.match(code):
            out |= {m.group(2) + src.strip('"').rsplit("/", 1)[-1] for src in m.group(1).split()}
    assert "releases=$target.releases" in install and "prefix=/opt/gpuhc" in install
    out.add("/opt/gpuhc.releases")
    # what a run renames into place is checked under its final name
    return {p for p in out if not p.rsplit("/", 1)[-1].startswith(".")}


def test_the_snapshot_watches_every_path_the_install_writes():
    written = _written_by_the_install()
    # the scan finds what it is for: a file, a directory destination's file, a README step's unit
    assert {"/usr/local/share/man/man1/gpuhc.1", "/etc/tmpfiles.d/gpuhc-sweep.conf",
            "/etc/systemd/system/gpuhc-retest.service", "/opt/gpuhc.releases"} <= written
    assert sorted(p for p in written if not live_paths.covers(p)) == []
