"""The suite's layout (tests/README.md): tests mirror the package, one naming scheme, shared pieces
in tests/helpers/ only. A test module that imports another test module couples their fates (one
cannot run, or move, without the other); a name outside the scheme hides what a test covers."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.helpers.paths import REPO, TESTS

# Folders for tests that span modules (tests/README.md): any test_<topic>.py name.
SPANNING = {"slurm_real", "install", "project"}
# Folders that are no tests: shared code, recorded data, the Slurm matrix's tooling.
NOT_TESTS = {"helpers", "fixtures", "matrix", "__pycache__"}


def _test_modules() -> list[Path]:
    return sorted(TESTS.rglob("test_*.py"))


def _modules_of(folder: Path, suffix: str = ".py") -> set[str]:
    return {p.stem for p in folder.glob(f"*{suffix}") if not p.name.startswith("__")}


def _named_after(stem: str, names: set[str]) -> bool:
    """``test_<name>`` or ``test_<name>_<aspect>`` for one of ``names``."""
    rest = stem.removeprefix("test_")
    return any(rest == n or rest.startswith(n + "_") for n in names)


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """Every module ``path`` imports, with its line (module level or inside a function)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.append((node.lineno, node.module))
            out += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return out


def imports_a_test_module(path: Path) -> list[str]:
    return [f"{path.relative_to(REPO)}:{line}: imports {name}" for line, name in imported_modules(path)
            if any(part.startswith("test_") for part in name.split("."))]


def test_no_test_module_imports_another():
    offences = [o for p in [*_test_modules(), *(TESTS / "helpers").glob("*.py"), TESTS / "conftest.py"]
                for o in imports_a_test_module(p)]
    assert not offences, "shared pieces belong in tests/helpers/ (tests/README.md):\n" + "\n".join(offences)


def test_the_check_catches_an_import_of_a_test_module(tmp_path):
    planted = tmp_path / "test_planted.py"
    planted.write_text("import os\n\n\ndef test_x():\n    from tests.slurm.test_entry import config\n")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("tests.project.test_layout.REPO", tmp_path)
        assert imports_a_test_module(planted) == ["test_planted.py:5: imports tests.slurm.test_entry",
                                                  "test_planted.py:5: imports tests.slurm.test_entry.config"]


def misnamed(path: Path) -> str | None:
    """Why ``path`` breaks the naming scheme of tests/README.md, or None."""
    rel = path.relative_to(TESTS)
    if len(rel.parts) == 1:  # tests/test_<module>.py: a module at the top of gpuhc/
        ok = _named_after(path.stem, _modules_of(REPO / "gpuhc"))
        return None if ok else "not named after a module gpuhc/<module>.py"
    folder = rel.parts[0]
    if folder in NOT_TESTS:
        return f"a test module in tests/{folder}/, which holds no tests"
    if folder == "bench" and len(rel.parts) == 3 and rel.parts[1] == "campaign_model":
        # tests/bench/campaign_model/test_<module>.py: the campaign model, a package of its own
        # under bench/, mirrored as gpuhc's packages are
        model = REPO / "bench" / "campaign_model"
        if _named_after(path.stem, _modules_of(model) | {"campaign_model"}):
            return None
        return "not named after a module of bench/campaign_model/"
    if folder in SPANNING or folder == "bench":
        if len(rel.parts) > 2:
            return "more than one folder deep"
        if folder == "bench":  # tests/bench/test_<script>.py: a script bench/<script>.py
            return None if _named_after(path.stem, _modules_of(REPO / "bench")) else "not named after bench/<script>.py"
        return None
    # tests/<pkg>[/<sub>]/test_<module>.py: a module gpuhc/<pkg>[/<sub>]/<module>.py
    folders = "/".join(rel.parts[:-1])
    package = REPO.joinpath("gpuhc", *rel.parts[:-1])
    if not package.is_dir():  # gpuhc/sweep/ is a namespace package: no __init__.py
        return f"tests/{folders}/ mirrors no package gpuhc/{folders}/"
    if _named_after(path.stem, _modules_of(package) | {rel.parts[-2]}):
        return None
    return (f"not named after a module of gpuhc/{folders}/ "
            f"(or test_{rel.parts[-2]}_<aspect>.py for the package as a whole)")


def test_every_test_module_mirrors_what_it_tests():
    bad = [f"{p.relative_to(REPO)}: {why}" for p in _test_modules() if (why := misnamed(p))]
    assert not bad, "tests/README.md names the scheme:\n" + "\n".join(bad)


@pytest.mark.parametrize("rel, ok", [
    ("test_errors.py", True),
    ("test_state.py", False),  # gpuhc/state/ is a folder: tests/state/test_node.py
    ("test_nothing_here.py", False),
    ("checks/test_ecc.py", True),
    ("checks/test_ecc_realdata.py", True),
    ("checks/test_checks_realdata.py", True),
    ("checks/test_scontrol.py", False),
    ("nowhere/test_ecc.py", False),
    ("helpers/test_x.py", False),
    ("slurm_real/test_anything.py", True),
    ("bench/test_campaign.py", True),
    ("bench/campaign_model/test_sim.py", True),
    ("bench/campaign_model/test_faults_rates.py", True),
    ("bench/campaign_model/test_campaign_model_layout.py", True),
    ("bench/campaign_model/test_campaign.py", False),
    ("bench/campaign_model/test_nothing_here.py", False),
    ("bench/other/test_sim.py", False),
    ("bench/campaign_model/deeper/test_sim.py", False),
    ("slurm/deeper/test_policy.py", False),
    ("slurm/repair/test_ladder.py", True),
    ("slurm/repair/test_ladder_reboot.py", True),
    ("slurm/repair/test_scontrol.py", False),
    ("slurm/test_ladder.py", False),
    ("slurm/test_settings.py", True),
    ("checks/deeper/test_ecc.py", False),
    ("slurm_real/deeper/test_anything.py", False),
])
def test_the_naming_rule_itself(rel, ok):
    assert (misnamed(TESTS / rel) is None) == ok, misnamed(TESTS / rel)


def test_every_folder_of_tests_is_a_package():
    # Same basenames in different folders (tests/slurm/repair/test_ladder.py, tests/slurm_real/test_ladder.py)
    # need packages under pytest's default import mode, or the second one is refused at collection.
    folders = {p.parent for p in _test_modules()} | {TESTS / "helpers"}
    missing = sorted(str(f.relative_to(REPO)) for f in folders if not (f / "__init__.py").exists())
    assert not missing, f"no __init__.py in {missing}"
