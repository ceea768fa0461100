"""Parity with the peers (issue 51): every kernel-log case of gpud's, NVSentinel's and GCM's own
test suites (tests/fixtures/parity/cases.json: the peer, repository, commit, file, test and table
row, the lines as the test has them, the peer's verdict) judged by gpuhc as a replay judges a
kernel log (tests/helpers/parity.py). Each case records gpuhc's verdict; where it differs from the
peer's, the case names the reason, a section of docs/parity.md that says why with the source
that settles it. A verdict that moves, or a disagreement with no written reason, fails here."""

from __future__ import annotations

import re

import pytest

from tests.helpers.parity import agrees, cases, judge_lines
from tests.helpers.paths import REPO

_REASON = re.compile(r"^### `([a-z0-9-]+)`", re.M)


def _documented() -> set[str]:
    return set(_REASON.findall((REPO / "docs" / "parity.md").read_text()))


@pytest.mark.parametrize("case", cases(), ids=lambda c: c["id"])
def test_each_peer_case_gets_its_recorded_verdict_and_a_disagreement_its_written_reason(case):
    status, action = judge_lines(case["lines"], case.get("driver_version"))
    assert (status, action) == (case["gpuhc"], case["action"]), case["lines"][:3]
    if agrees(case["peer_verdict"], status):
        assert case["differs"] is None, f"{case['id']} agrees with {case['peer']}: no reason to keep"
    else:
        assert case["differs"] in _documented(), f"{case['id']}: {case['peer']} says {case['peer_verdict']}, " \
                                                 f"gpuhc {status}, and docs/parity.md has no reason {case['differs']!r}"


def test_the_corpus_is_every_case_with_its_source_and_each_reason_is_used():
    all_cases = cases()
    assert len(all_cases) == 353 and len({c["id"] for c in all_cases}) == 353
    for c in all_cases:
        assert c["repo"] and re.fullmatch(r"[0-9a-f]{40}", c["commit"]) and c["file"] and c["test"]
        assert isinstance(c["lines"], list)  # GCM's no_xid_error case is an empty log
    used = {c["differs"] for c in all_cases} - {None}
    assert used == _documented()  # no reason without its cases, none kept after its cases agree


def test_the_host_and_storage_classes_the_peers_flag_give_at_least_a_warning():
    # the proof: where a peer sees a local disk, NFS, a hung task, a soft lockup, a panic
    # or file-max, gpuhc says something, unless the line is not the kernel's (docs/parity.md)
    classes = {"disk/filesystem kernel error", "nfs", "hung task / soft lockup", "kernel panic", "VFS file-max reached",
               "NVMe I/O error"}
    silent = {"not-kernel-text", "not-a-kernel-record", "beyond-end-of-device", "nfs-ok", "stack-frame-alone"}
    for c in cases():
        if c["peer_class"] in classes and c["peer_verdict"] != "none" and c["differs"] not in silent:
            assert c["gpuhc"] in ("WARN", "FAIL"), c["id"]
