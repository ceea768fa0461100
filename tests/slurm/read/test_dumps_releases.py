"""drain-report on real captures of each Slurm release (issue 9): `scontrol show node` (plain,
-o, --json), `sinfo --json` and sinfo's tables, one folder per release under
fixtures/slurm/slurm-<version>/ (captured in Debian chroots of those releases, see the fixtures
README). Every listing of one release must tell the same story about the same nodes."""

from __future__ import annotations

import json

import pytest

from gpuhc.slurm.read.dumps import read_dump
from gpuhc.slurm.report.build import classify, kind_of
from tests.helpers.paths import FIXTURES

FIX = FIXTURES / "slurm"
RELEASES = sorted(p.name for p in FIX.glob("slurm-*") if p.is_dir())


def unavailable(release: str, name: str) -> dict[str, tuple]:
    d = read_dump((FIX / release / name).read_bytes())
    return {n.name: (kind_of(n), sorted(n.flags), n.reason, classify(n)[1]) for n in d.nodes if n.unavailable}


def test_the_releases_the_matrix_covers_are_here():
    assert RELEASES == ["slurm-22.05", "slurm-24.11", "slurm-26.05"]


@pytest.mark.parametrize("release", RELEASES)
def test_scontrol_text_oneline_and_json_agree_with_whole_utf8_reasons(release):
    text = unavailable(release, "scontrol_show_node.txt")
    assert text == unavailable(release, "scontrol_show_node_oneline.txt")
    if (FIX / release / "scontrol_json_show_node.json").exists():
        assert text == unavailable(release, "scontrol_json_show_node.json")
    else:  # 22.05's scontrol has no --json: the capture says so instead
        assert "unrecognized option '--json'" in (FIX / release / "UNSUPPORTED").read_text()
    reasons = {n: r for n, (_, _, r, _) in text.items()}
    assert any(not r.isascii() for r in reasons.values())  # the captures carry UTF-8 reasons, kept as they are
    assert {o for *_, o in text.values()} >= {"gpuhc", "admin", "slurm"}


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("name", ["sinfo_N_l.txt", "sinfo_R.txt"])
def test_sinfo_tables_name_the_same_nodes_and_owners(release, name):
    full = unavailable(release, "scontrol_show_node.txt")
    table = unavailable(release, name)
    assert sorted(table) == sorted(full)
    for node, (_, _, reason, owner) in table.items():
        # cut at 20 bytes by sinfo, so a multi-byte character may end it a character early
        assert full[node][2].startswith(reason) and len(reason.encode()) <= 20 and owner == full[node][3]


@pytest.mark.parametrize("release", RELEASES)
def test_default_sinfo_names_the_same_nodes_without_owners(release):
    full = unavailable(release, "scontrol_show_node.txt")
    table = unavailable(release, "sinfo.txt")
    assert sorted(table) == sorted(full)
    # sinfo's own long listing, not scontrol's: the commands ran moments apart, and 24.11's n5
    # went from draining to DOWN+DRAIN (not responding) in between; sinfo prints it `drain`.
    assert {n: s for n, (s, *_) in table.items()} == {n: s for n, (s, *_) in unavailable(release, "sinfo_N_l.txt").items()}
    assert {o for *_, o in table.values()} == {"unknown"}


@pytest.mark.parametrize("release", RELEASES)
def test_sinfo_json_groups_give_no_owner_to_a_shared_reason(release):
    full = unavailable(release, "scontrol_show_node.txt")
    d = read_dump((FIX / release / "sinfo_json.json").read_bytes())
    got = {n.name: n for n in d.nodes if n.unavailable}
    assert sorted(got) == sorted(full)
    shared = [n for n in got.values() if n.reason_doubt]
    grouped = "sinfo" in json.loads((FIX / release / "sinfo_json.json").read_bytes())  # 23.02+; 22.05 lists nodes
    assert bool(shared) == grouped, "the grouped captures put several drained nodes under one reason"
    for n in shared:
        assert classify(n) == ("shared reason", "unknown") and "may be only one node's" in n.reason_doubt
    for n in got.values():
        if not n.reason_doubt:  # a record of one node: its own reason, owner as scontrol says
            assert (n.reason, classify(n)[1]) == (full[n.name][2], full[n.name][3])
