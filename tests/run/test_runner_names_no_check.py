"""The runner knows no check by name (docs/ARCHITECTURE.md, "Judging").

How the sources are read comes from what the checks declare (``Check.source_needs``,
``Check.judges_holders``), so no module of the runner's row in the import table may name a
check id as a string, nor import a check's module: a check that needed a line in the runner
would send the walk from the health check back up from the runner to that check. The modules
are read from the table itself, so a module later split out of the runner is held to it too.
"""

from __future__ import annotations

import ast
import re

from gpuhc.checks import MODULES, all_checks
from tests.helpers.paths import REPO


def runner_modules() -> list[str]:
    """The files of the runner's row in the import table (a folder's, every module in it but the
    files another row names)."""
    doc = (REPO / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    section = doc.split("## Import directions", 1)[1]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    row = next(line for line in rows if line.startswith("| runner |"))
    elsewhere = {m for line in rows if not line.startswith("| runner |") for m in re.findall(r"`([^`]+)`", line.split("|")[2])}
    files = []
    for entry in re.findall(r"`([^`]+)`", row.split("|")[2]):
        found = sorted(p.relative_to(REPO).as_posix() for p in (REPO / entry).glob("*.py")) if entry.endswith("/") else [entry]
        files += [f for f in found if f not in elsewhere]
    return files


def names_of_checks(source: str, ids: set[str], modules: set[str]) -> list[str]:
    """Where ``source`` names a check: a string that is a check id or names a check module, or
    an import of a check module (``gpuhc.checks.<module>``, at module level or in a function)."""
    check_module = re.compile(r"gpuhc\.checks\.(\w+)")

    def a_check(dotted: str) -> bool:
        return any(m in modules for m in check_module.findall(dotted))

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value in ids or a_check(node.value):
                found.append(f"line {node.lineno}: string {node.value!r}")
        elif isinstance(node, ast.ImportFrom) and node.module:
            if any(a_check(name) for name in [node.module, *(f"{node.module}.{a.name}" for a in node.names)]):
                found.append(f"line {node.lineno}: from {node.module} import ...")
        elif isinstance(node, ast.Import):
            found += [f"line {node.lineno}: import {a.name}" for a in node.names if a_check(a.name)]
    return found


def _registry() -> tuple[set[str], set[str]]:
    return {c.id for c in all_checks()}, set(MODULES)


def test_the_runner_names_no_check():
    ids, modules = _registry()
    files = runner_modules()
    assert "gpuhc/run/runner.py" in files
    offences = [f"{path} {where}" for path in files
                for where in names_of_checks((REPO / path).read_text(encoding="utf-8"), ids, modules)]
    assert not offences, ("the runner names checks; declare the need on the check instead "
                          "(Check.source_needs, docs/ARCHITECTURE.md \"Adding a check\"):\n" + "\n".join(offences))


def test_the_test_catches_a_runner_that_names_a_check():
    """The old runner's ways of naming a check, planted: each is caught."""
    ids, modules = _registry()
    planted = {
        'checks = [(c, e) for c, e in checks if c.id != "occupancy"]\n': "'occupancy'",
        'found = next(c for c in checks if c.id == "nvlink")\n': "'nvlink'",
        'def f():\n    from gpuhc.checks.jobs import source_settings\n': "from gpuhc.checks.jobs",
        'import gpuhc.checks.machine_check\n': "import gpuhc.checks.machine_check",
        'from gpuhc.checks import occupancy\n': "from gpuhc.checks import",
        'mod = importlib.import_module("gpuhc.checks.clocks")\n': "gpuhc.checks.clocks",
        'wanted = {"pcie-aer": {}}\n': "'pcie-aer'",
    }
    for source, said in planted.items():
        found = names_of_checks(source, ids, modules)
        assert found and said in found[0], (source, found)
    # what the runner may say: the sources, the stages, the registry and the check base
    fine = ('from gpuhc.checks.base import NVML, Check\nfrom gpuhc.checks import passive_checks\n'
            'x = ("epilog", "state", "nvml", f"state of check {check.id} was not a mapping")\n')
    assert names_of_checks(fine, ids, modules) == []
