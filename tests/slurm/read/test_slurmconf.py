"""slurm.conf read locally: settings, node lines (hostlists, DEFAULT, Include) and the GPUs a
node's Gres= gives it (gpuhc/slurm/read/slurmconf.py; samples in tests/fixtures/slurm_conf/)."""

from __future__ import annotations

import pytest

from gpuhc.slurm.read.slurmconf import SlurmConfError, gpus_in, parse_text, read, slurm_gpus
from tests.helpers.paths import REPO

MANPAGE = REPO / "tests" / "fixtures" / "slurm_conf" / "manpage-22.05-example.conf"


def test_the_manpage_example_read_as_slurm_reads_it():
    conf = read(str(MANPAGE))
    assert conf.get("ReturnToService") == "0" and conf.get("prolog") == "/usr/local/slurm/prolog"
    assert conf.get("SlurmctldHost") == "dev1(12.34.56.79)"  # the last of a repeated key
    assert len(conf.node_names()) == 26 and conf.node_names()[0] == "dev0"
    dev7 = conf.node("dev7")
    # both NodeName=DEFAULT lines folded into the node line after them
    assert dev7.settings == {"cpus": "2", "realmemory": "2000", "tmpdisk": "64000", "state": "UNKNOWN",
                             "nodeaddr": "edev[0-25]", "weight": "16"}
    assert dev7.where == f"{MANPAGE}:36"
    assert conf.node("dev26") is None and conf.node("dev7.llnl.gov") is dev7
    assert "downnodes" not in conf.settings and "partitionname" not in conf.settings
    assert slurm_gpus("dev3", str(MANPAGE)) == (0, f"{MANPAGE}:36")  # no Gres: a CPU node


@pytest.mark.parametrize("gres,want", [
    ("gpu:8", 8), ("gpu:h100:8", 8), ("gpu:tesla:1,gpu:kepler:1,bandwidth:lustre:no_consume:4G", 2),
    ("gpu:h100:4(S:0),gpu:h100:4(S:1)", 8), ("gpu", 1), ("gpu:a100", 1), ("mps:400,shard:16", 0),
    ("", 0), (None, 0), ("gpu:fake:8", 8), ("gpu:1K", 1024),
])
def test_gpus_in_a_gres_value(gres, want):
    assert gpus_in(gres) == want


def test_a_count_slurm_would_refuse_is_no_answer(tmp_path):
    with pytest.raises(ValueError, match="bad GPU count"):
        gpus_in("gpu:h100:eight:x")
    conf = tmp_path / "slurm.conf"
    conf.write_text("NodeName=g1 Gres=gpu:h100:eight:x\n")
    assert slurm_gpus("g1", str(conf)) is None  # the config's count then, not a made-up one


def test_include_default_and_hostlists_across_files(tmp_path):
    (tmp_path / "nodes.d").mkdir()
    (tmp_path / "slurm.conf").write_text(
        "ClusterName=alps\nHealthCheckProgram=/usr/local/share/gpuhc/slurm/healthcheck.sh \\\n"
        "  # continued\n"
        "Include nodes.d/*.conf\ninclude %c-extra.conf\n")
    (tmp_path / "nodes.d" / "a.conf").write_text(
        "NodeName=DEFAULT Gres=gpu:h100:8 CPUs=96\nNodeName=gpu[001-064],dgx[1-2] RealMemory=1000\n")
    (tmp_path / "nodes.d" / "b.conf").write_text(
        "NodeName=DEFAULT Gres=\nNodeName=n2,login1 CPUs=8 # CPU nodes: no Gres\n")
    (tmp_path / "alps-extra.conf").write_text("NodeName=gpu064 Gres=gpu:h100:4  # one node redefined later\n")
    conf = read(str(tmp_path / "slurm.conf"))
    assert conf.get("healthcheckprogram") == "/usr/local/share/gpuhc/slurm/healthcheck.sh"
    assert slurm_gpus("gpu017", str(tmp_path / "slurm.conf"))[0] == 8
    assert slurm_gpus("dgx2", str(tmp_path / "slurm.conf"))[0] == 8
    assert slurm_gpus("login1", str(tmp_path / "slurm.conf"))[0] == 0
    assert slurm_gpus("gpu064", str(tmp_path / "slurm.conf"))[0] == 4  # the last definition
    assert slurm_gpus("elsewhere", str(tmp_path / "slurm.conf")) is None


def test_an_include_loop_or_a_missing_file_is_a_clear_error(tmp_path):
    (tmp_path / "slurm.conf").write_text("Include slurm.conf\n")
    with pytest.raises(SlurmConfError, match="nested deeper than 8"):
        read(str(tmp_path / "slurm.conf"))
    with pytest.raises(SlurmConfError, match="cannot read .*nope.conf"):
        read(str(tmp_path / "nope.conf"))
    assert slurm_gpus("g1", str(tmp_path / "nope.conf")) is None


def test_slurm_conf_env_names_the_file(tmp_path, monkeypatch):
    (tmp_path / "s.conf").write_text("NodeName=g1 Gres=gpu:2\n")
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "s.conf"))
    assert slurm_gpus("g1") == (2, f"{tmp_path}/s.conf:1")
    assert parse_text("NodeName=x Gres=gpu:3\n").node("x").settings["gres"] == "gpu:3"


@pytest.mark.parametrize("hostlist", ["gpu[001-064]", "r[1-2]n[01-32],login1", "dev[0-25]", "gpu[1,3,5-7]",
                                      "node[008-010]", "a1", "x[0-3]y[00-02]", "gpu-r[00-63]-n[001-064]"])
def test_a_node_is_looked_up_without_expanding_as_python_hostlist_expands(hostlist):
    """names_node answers as the expansion would, for names in and out of it (zero-padding too)."""
    import hostlist as hl

    from gpuhc.slurm.read.slurmconf import names_node

    names = set(hl.expand_hostlist(hostlist))
    probes = names | {"gpu1", "gpu64", "r3n01", "login", "dev26", "dev07", "node9", "x3y2", "x03y02", "gpu-r7-n010",
                      "gpu4", "gpu065", "a10"}
    assert {n for n in probes if names_node(hostlist, n)} == names
