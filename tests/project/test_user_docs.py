"""The user docs speak of the product (issue 50, point 7): no issue numbers, no test file names, no
campaign seed lists or gpuhc commit ids there; the history (which issue moved what), the tests
behind each claim and the seeds live in docs/verification.md and docs/campaign.md."""

from __future__ import annotations

import re

import pytest

from tests.helpers.paths import REPO

USER_DOCS = ("README.md", "docs/slurm.md", "docs/repair.md", "docs/security.md", "docs/checks.md", "docs/sweep.md",
             "docs/parity.md", "docs/canary.md", "docs/json-schema.md", "docs/facts.md", "docs/campaign.md")
# The docs that speak only of the product. Left out: security.md names a test on each row by design
# (each row has one), campaign.md is the campaign's record (its seeds and commits), facts.md and
# json-schema.md are references that name no test or seed either way.
PRODUCT_DOCS = ("README.md", "docs/slurm.md", "docs/repair.md", "docs/canary.md", "docs/sweep.md", "docs/checks.md",
                "docs/parity.md")
# "issue 50" reads as the product's own history, whoever's tracker it names: another project's
# report is cited as owner/repo#N, which no reader takes for gpuhc's.
ISSUE = re.compile(r"\b[Ii]ssues? #?\d+|\(#\d+\)")
TEST_FILE = re.compile(r"\btests/[\w./-]*?\.py\b")
# The reference docs name no test data either (a fixture's path is the test suite's business);
# README keeps its test command (tests/run.sh).
TEST_PATH = re.compile(r"\btests/[\w.-]")
REFERENCE_DOCS = ("docs/checks.md", "docs/parity.md")
# Two or more seeds listed ("seeds 1, 10 and 11", "every one of 101-110 and 116-129") or a
# campaign command's seed range: a count ("24 seeds") says the same to a reader.
SEED_LIST = re.compile(r"\bseeds? \d+(?:\s*[-–]\s*\d+)?(?:\s*(?:,|and|,\s*and)\s*\d+(?:\s*[-–]\s*\d+)?)+"
                       r"|\bevery one of \d+\s*[-–]\s*\d+|--seeds \d", re.I)
# gpuhc's own commits ("gpuhc 03c77df", "at 1f3ecbe"); another project's commit, cited as a public
# source ("Slurm commit b31fa177"), is not one.
OWN_COMMIT = re.compile(r"\b(?:gpuhc|at|clone of) (?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")


def _lines(doc: str, *patterns: re.Pattern) -> list[str]:
    return [f"{doc}:{n}: {line.strip()[:100]}" for n, line in enumerate((REPO / doc).read_text().splitlines(), 1)
            if any(p.search(line) for p in patterns)]


@pytest.mark.parametrize("doc", USER_DOCS)
def test_no_issue_numbers_in_user_docs(doc):
    found = _lines(doc, ISSUE)
    assert found == [], "\n".join(found)


@pytest.mark.parametrize("doc", PRODUCT_DOCS)
def test_no_test_files_seed_lists_or_commits_in_user_docs(doc):
    found = _lines(doc, TEST_FILE, SEED_LIST, OWN_COMMIT)
    assert found == [], "say it in words; the test, seeds and commit go to docs/verification.md:\n" + "\n".join(found)


@pytest.mark.parametrize("doc", REFERENCE_DOCS)
def test_no_test_data_in_the_reference_docs(doc):
    found = _lines(doc, TEST_PATH)
    assert found == [], "say it in words; the fixture goes to docs/verification.md:\n" + "\n".join(found)


@pytest.mark.parametrize("line, pattern", [
    ("`tests/slurm_real/test_sinfo.py` checks the RPC types", TEST_FILE),
    ("(tests/helpers/canary_fake.py) computes", TEST_FILE),
    ("24 seeds, every one of 101-110 and", SEED_LIST),
    ("3 of 40 runs with groups of 4 (seeds 7, 2, 9)", SEED_LIST),
    ("The real campaign on seeds 1, 10 and 11", SEED_LIST),
    ("bench/campaign.py --policy shipped --seeds 1-100", SEED_LIST),
    ("116-129, shipped, gpuhc 03c77df; docs/campaign.md", OWN_COMMIT),
    ("model at 1f3ecbe):", OWN_COMMIT),
    ("`tests/fixtures/xid_catalog/nvswitch_sxids.yaml` is the record", TEST_PATH),
    ("drained healthy nodes (NVIDIA/NVSentinel issue 1471,", ISSUE),
    ("the pytorch-lightning issue #15008, the", ISSUE),
])
def test_the_patterns_catch_what_they_are_for(line, pattern):
    assert pattern.search(line)


@pytest.mark.parametrize("line", [
    "`bash tests/run.sh --slurm-all` takes about 35 minutes", "pinned by `tests/constraints.txt`",
    "measured at a month on 24 seeds", "in 3 of 100 seeds", "Seeds 0–19 with the defaults",
    "with a non-zero exit at that point (commit b31fa177)", "| 23.02 (commit 49b4c8f059, \"Fix",
    "`gpuhc sweep simulate --seed 5`", "healthy nodes (NVIDIA/NVSentinel#1471, NVIDIA/DCGM#308)",
])
def test_the_patterns_leave_what_a_reader_needs(line):
    assert not any(p.search(line) for p in (TEST_FILE, SEED_LIST, OWN_COMMIT, ISSUE))
