"""docs/ARCHITECTURE.md stays true: every module is named there with its job, and every import
under gpuhc/ (module level or inside a function) follows the "Import directions" table, which
this test reads from the document itself."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.helpers.paths import REPO

ROOT = REPO
DOC = ROOT / "docs" / "ARCHITECTURE.md"


@dataclass
class Layer:
    name: str
    modules: list[str]  # repo-relative files, or folders ending in "/"
    layers: set[str]  # layer names it may import
    extra: list[str]  # single modules (files or folders) it may import


def read_table(doc: str) -> list[Layer]:
    section = doc.split("## Import directions", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| layer")]
    layers = []
    for row in rows:
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        name, modules, may = cells[0], re.findall(r"`([^`]+)`", cells[1]), cells[2] if len(cells) > 2 else ""
        extra = re.findall(r"`([^`]+)`", may)
        words = {w.strip() for w in re.sub(r"`[^`]+`", "", may).split(",") if w.strip()}
        layers.append(Layer(name, modules, words, extra))
    return layers


def owner(path: str, layers: list[Layer]) -> Layer | None:
    """The layer whose most specific entry names ``path`` (a file beats its folder)."""
    best, best_len = None, -1
    for layer in layers:
        for m in layer.modules:
            if (path == m or (m.endswith("/") and path.startswith(m))) and len(m) > best_len:
                best, best_len = layer, len(m)
    return best


def module_path(root: Path, dotted: str) -> str | None:
    """``gpuhc.a.b`` -> ``gpuhc/a/b.py`` or ``gpuhc/a/b/__init__.py`` (repo-relative), if it exists."""
    base = root.joinpath(*dotted.split("."))
    for cand in (base.with_suffix(".py"), base / "__init__.py"):
        if cand.is_file():
            return cand.relative_to(root).as_posix()
    return None


def imports_of(root: Path, path: str) -> list[tuple[int, str]]:
    """(line, repo-relative module file) for every gpuhc import in ``path``, anywhere in it."""
    tree = ast.parse((root / path).read_text(encoding="utf-8"))
    package = path[:-3].replace("/", ".").rsplit(".", 1)[0]  # a module's package; __init__'s is its own
    out = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                parts = parts[:len(parts) - node.level + 1]
                mod = ".".join(parts + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            # ``from gpuhc.active import registry`` imports a submodule, not just the package
            names = [f"{mod}.{a.name}" if module_path(root, f"{mod}.{a.name}") else mod for a in node.names]
        for name in names:
            if name == "gpuhc" or name.startswith("gpuhc."):
                target = module_path(root, name)
                if target is not None:
                    out.append((node.lineno, target))
    return out


def violations(root: Path, doc: str) -> list[str]:
    layers = read_table(doc)
    by_name = {layer.name: layer for layer in layers}
    bad = []
    for file in sorted(root.joinpath("gpuhc").rglob("*.py")):
        path = file.relative_to(root).as_posix()
        mine = owner(path, layers)
        if mine is None:
            bad.append(f"{path}: in no row of the import table of docs/ARCHITECTURE.md")
            continue
        unknown = mine.layers - set(by_name)
        if unknown:
            bad.append(f"docs/ARCHITECTURE.md: layer {mine.name} names unknown layers {sorted(unknown)}")
        for line, target in imports_of(root, path):
            theirs = owner(target, layers)
            if theirs is None or theirs.name == mine.name or theirs.name in mine.layers:
                continue
            if any(target == m or (m.endswith("/") and target.startswith(m)) for m in mine.extra):
                continue
            bad.append(f"{path}:{line}: {mine.name} imports {target} ({theirs.name})")
    return bad


def test_every_import_follows_the_documented_directions():
    assert violations(ROOT, DOC.read_text(encoding="utf-8")) == []


def test_every_module_is_named_with_its_job():
    doc = DOC.read_text(encoding="utf-8")
    listed = set(re.findall(r"^\s*- `(gpuhc/[^`]+\.py)`: \S", doc.split("## Modules", 1)[1], re.MULTILINE))
    present = {p.relative_to(ROOT).as_posix() for p in ROOT.joinpath("gpuhc").rglob("*.py")}
    assert sorted(present - listed) == [], "add a line '- `path`: its one job' under ## Modules"
    assert sorted(listed - present) == [], "docs/ARCHITECTURE.md names modules that no longer exist"


@pytest.fixture
def tiny(tmp_path):
    """A two-layer package to show the rule bites: checks may import base, not slurm."""
    for rel, text in {
        "gpuhc/__init__.py": "",
        "gpuhc/model.py": "",
        "gpuhc/checks/__init__.py": "",
        "gpuhc/checks/xid.py": "from gpuhc.model import x\n\ndef f():\n    from gpuhc.slurm import scontrol\n",
        "gpuhc/slurm/__init__.py": "",
        "gpuhc/slurm/scontrol.py": "from ..checks import xid\n",
        "gpuhc/sources/nvml.py": "import gpuhc.checks.xid\n",
    }.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return tmp_path


TINY_DOC = """## Import directions

| layer | modules | may import |
|---|---|---|
| base | `gpuhc/__init__.py` `gpuhc/model.py` | |
| sources | `gpuhc/sources/` | base |
| checks | `gpuhc/checks/` | base |
| slurm | `gpuhc/slurm/` | base, checks |

## Modules
"""


def test_the_rule_catches_upward_imports_even_inside_functions_and_relative(tiny):
    assert violations(tiny, TINY_DOC) == [
        "gpuhc/checks/xid.py:4: checks imports gpuhc/slurm/scontrol.py (slurm)",
        "gpuhc/sources/nvml.py:1: sources imports gpuhc/checks/xid.py (checks)",
    ]


def test_a_module_outside_the_table_is_reported(tiny):
    (tiny / "gpuhc" / "newthing.py").write_text("")
    assert "gpuhc/newthing.py: in no row of the import table of docs/ARCHITECTURE.md" in violations(tiny, TINY_DOC)


def test_each_layer_imports_only_layers_above_it():
    """The sentence at the top of docs/ARCHITECTURE.md: data flows one way, so a row may name
    only layers of the rows above it (single modules it names are the documented exceptions)."""
    seen: set[str] = set()
    late = []
    for layer in read_table(DOC.read_text(encoding="utf-8")):
        late += [f"{layer.name} may import {name}, a layer below it" for name in sorted(layer.layers - seen)]
        seen.add(layer.name)
    assert late == []


def test_policy_is_pure_a_planted_import_into_act_fails(tmp_path):
    """The real tree and the real table, with one import planted in a pure policy module: the
    act layer (here the actuator, inside a function, as a lazy import would hide it) is refused,
    and so is every other way a policy module could reach I/O."""
    import shutil

    shutil.copytree(ROOT / "gpuhc", tmp_path / "gpuhc", ignore=shutil.ignore_patterns("__pycache__"))
    doc = DOC.read_text(encoding="utf-8")
    assert violations(tmp_path, doc) == []
    policy = tmp_path / "gpuhc" / "slurm" / "policy.py"
    clean = policy.read_text(encoding="utf-8")
    lines = len(clean.splitlines())
    for planted, layer in (("from gpuhc.slurm.actuator import Actuator", "slurm-act"),
                           ("from . import entry", "slurm-flows"),
                           ("import gpuhc.state", "state")):
        policy.write_text(clean + f"\n\ndef _planted():\n    {planted}\n", encoding="utf-8")
        [found] = violations(tmp_path, doc)
        assert found.startswith(f"gpuhc/slurm/policy.py:{lines + 4}: slurm-policy imports ") and found.endswith(
            f"({layer})"), found
