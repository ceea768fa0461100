"""The long campaign's command line (bench/campaign.py, docs/campaign.md): one run writes its
JSON and its picture, a sweep of seeds reports each, and bad arguments are refused with exit 2.
The model's own rules are tested beside its modules, tests/bench/campaign_model/."""

from __future__ import annotations

import sys

import pytest
from tests.helpers.paths import REPO

sys.path.insert(0, str(REPO / "bench"))




def test_the_cli_writes_json_and_png_and_refuses_bad_arguments(tmp_path, capsys):
    import json

    import campaign

    js, png = tmp_path / "c.json", tmp_path / "c.png"
    assert campaign.main(["--nodes", "2", "--days", "0.05", "--seed", "2", "--json", str(js), "--png", str(png)]) == 0
    doc = json.loads(js.read_text())
    assert doc["policy"] == "shipped" and doc["nodes"] == 2 and "slurm_rpcs_per_hour" in doc
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(SystemExit) as e:
        campaign.main(["--nodes", "0"])
    assert e.value.code == 2 and "--nodes 0: must be within 1..1024" in capsys.readouterr().err


def test_the_cli_sweeps_a_few_seeds_and_reports_each(tmp_path, capsys):
    # CI's size of the campaign (docs/campaign.md): three seeds of 8 nodes for half a day, each
    # seed's record kept, the distributions and the goals in one document.
    import json

    import campaign

    out = tmp_path / "shipped.json"
    assert campaign.main(["--seeds", "1-3", "--nodes", "8", "--days", "0.5", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert [s["seed"] for s in doc["seeds"]] == [1, 2, 3] and doc["seeds_run"] == 3
    assert doc["policy"] == "shipped" and doc["gpuhc_commit"] and set(doc["goals"]) >= {"no job starts on a sick node"}
    assert all(s["job_starts"] > 0 and s["real_runs"] > 0 for s in doc["seeds"])
    assert len((tmp_path / "shipped.jsonl").read_text().splitlines()) == 3
    with pytest.raises(SystemExit) as e:
        campaign.main(["--seeds", "5-2", "--json", str(out)])
    assert e.value.code == 2 and "--seeds 5-2: expected A-B with A <= B" in capsys.readouterr().err
