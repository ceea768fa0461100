"""docs/security.md is the threat model: every input gpuhc reads, who can write it, the rule
gpuhc applies, and the test that holds the rule. This keeps each row honest: a row without a
test, or naming a test that does not exist, fails here."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from tests.helpers.paths import REPO

DOC = REPO / "docs" / "security.md"
TEST_REF = re.compile(r"`(tests/[\w/]+\.py)::(\w+)`")


def _rows() -> list[tuple[int, str]]:
    rows = []
    in_inputs = False
    for lineno, line in enumerate(DOC.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("## "):
            in_inputs = line.strip() == "## Inputs"
        if not in_inputs or not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] in ("input", "") or set(cells[0]) <= set("-: "):
            continue
        rows.append((lineno, line))
    return rows


def _test_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            names.add(node.name)
    return names


def test_every_row_names_a_test_that_exists():
    rows = _rows()
    assert rows, "docs/security.md lists no input"
    missing = []
    for lineno, line in rows:
        last = line.strip().strip("|").split("|")[-1]
        refs = TEST_REF.findall(last)
        if not refs:
            missing.append(f"docs/security.md:{lineno}: no `tests/…py::test_…` in the test column")
            continue
        for file, name in refs:
            path = REPO / file
            if not path.is_file():
                missing.append(f"docs/security.md:{lineno}: {file} does not exist")
            elif name not in _test_names(path):
                missing.append(f"docs/security.md:{lineno}: {file} has no test {name}")
    assert not missing, "\n".join(missing)
