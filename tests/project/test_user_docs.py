"""The user docs speak of the product (issue 50, point 7): no issue numbers there; the history
(which issue moved what) lives in docs/verification.md."""

from __future__ import annotations

import re

import pytest

from tests.helpers.paths import REPO

USER_DOCS = ("README.md", "docs/slurm.md", "docs/repair.md", "docs/security.md", "docs/checks.md", "docs/sweep.md",
             "docs/parity.md", "docs/canary.md", "docs/json-schema.md", "docs/facts.md", "docs/campaign.md")
ISSUE = re.compile(r"\b[Ii]ssues? #?\d+|\(#\d+\)")
# Other projects' issues, named as public sources (their tracker's name beside the number).
CITED = re.compile(r"(NVIDIA|NVSentinel|DCGM|pytorch|slurm|SchedMD|open-gpu-kernel-modules|gpud|leptonai|kubernetes|dra-driver)"
                   r"[^\n]{0,40}issue", re.I)


@pytest.mark.parametrize("doc", USER_DOCS)
def test_no_issue_numbers_in_user_docs(doc):
    found = [f"{doc}:{n}: {line.strip()[:100]}" for n, line in enumerate((REPO / doc).read_text().splitlines(), 1)
             if ISSUE.search(line) and not CITED.search(line)]
    assert found == [], "\n".join(found)
