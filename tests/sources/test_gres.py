"""gpuhc/sources/gres.py: where gres.conf is found, and what `gpuhc snapshot` records of it."""

from __future__ import annotations

import os

from gpuhc.sources.gres import gres_conf_path, mig_layout, read_inputs, record
from gpuhc.sources.scenario import load_scenario
from gpuhc.sources.snapshot_format import dump_yaml
from gpuhc.model.snapshot import Snapshot
from tests.helpers.paths import SCENARIOS


def test_gres_conf_is_found_where_slurmd_reads_it():
    assert gres_conf_path("/site/gres.conf", {"SLURM_CONF": "/run/slurm/conf/slurm.conf"}) == "/site/gres.conf"
    # configless slurmd: the prolog's SLURM_CONF is the cached copy, gres.conf beside it
    assert gres_conf_path(None, {"SLURM_CONF": "/run/slurm/conf/slurm.conf"}) == "/run/slurm/conf/gres.conf"
    assert gres_conf_path(None, {}) == "/etc/slurm/gres.conf"


def test_no_gres_conf_is_none_not_an_error(tmp_path):
    inputs = read_inputs("n1", str(tmp_path / "absent.conf"), {}, minors_path=str(tmp_path / "no-minors"))
    assert inputs.conf is None and inputs.minors == {}


def test_snapshot_records_gres_conf_and_the_minors_of_its_own_gpus(tmp_path):
    conf = tmp_path / "gres.conf"
    conf.write_text("AutoDetect=nvml\n")
    minors = tmp_path / "mig-minors"
    minors.write_text("config 1\nmonitor 2\ngpu0/gi0/access 3\ngpu1/gi0/access 138\ngpu10/gi0/access 1353\n")
    got = record(str(conf), {}, {1}, minors_path=str(minors))
    assert got == {"conf": "AutoDetect=nvml\n", "mig_minors": "config 1\nmonitor 2\ngpu1/gi0/access 138\n"}
    assert record(str(tmp_path / "none"), {}, {1}, minors_path=str(tmp_path / "none")) is None


def test_a_mig_recording_replays_identically(tmp_path):
    s = load_scenario(str(SCENARIOS / "healthy-8xa100-mig.yaml"))
    snap = Snapshot("gpu101", 1.0, nvml=s.nvml, occupancy=s.occupancy, gres=s.gres)
    path = tmp_path / "snap.yaml"
    path.write_text(dump_yaml(snap))
    again = load_scenario(str(path))
    assert again.nvml == s.nvml and again.occupancy == s.occupancy and again.gres == s.gres
    assert os.path.getsize(path) < 64 * 1024


def test_the_mig_layout_lists_the_instances_the_driver_has_made(tmp_path):
    """The driver's capability tree (the MIG user guide's gpu<minor>/mig/gi<N>/ci<M>/access);
    its config and monitor files are no instances; no tree (no MIG-capable driver): none."""
    for rel in ("gpu0/mig/config", "gpu0/mig/monitor", "gpu0/mig/gi2/access", "gpu0/mig/gi2/ci0/access",
                "gpu0/mig/gi1/access", "gpu0/mig/gi1/ci1/access", "gpu0/mig/gi1/ci0/access", "gpu1/mig/config"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    assert mig_layout(str(tmp_path)) == ["gpu0/gi1:ci0,ci1", "gpu0/gi2:ci0"]
    assert mig_layout(str(tmp_path / "absent")) == []
