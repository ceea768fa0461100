"""Where things are, for every test module and helper: the repository, tests/ and its fixtures.

Declared once here so that a test's depth in the tree (tests/<subpackage>/test_<module>.py,
tests/README.md) never enters a path computation."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
REPO = TESTS.parent
FIXTURES = TESTS / "fixtures"
SCENARIOS = REPO / "examples" / "scenarios"
