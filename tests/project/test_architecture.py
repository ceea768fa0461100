"""docs/ARCHITECTURE.md stays true: every module is named there with its job, and every import
under gpuhc/ (module level or inside a function) follows the "Import directions" table, which
this test reads from the document itself; the top of the package is its face, each layer folder
names its row, and no modules import each other round a circle."""

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
    return imports_in(root, path, ast.parse((root / path).read_text(encoding="utf-8")))


def imports_in(root: Path, path: str, tree: ast.AST) -> list[tuple[int, str]]:
    """(line, repo-relative module file) for every gpuhc import in ``tree``, a part of ``path``."""
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


@pytest.fixture(scope="module")
def real_copy(tmp_path_factory):
    """A copy of the real package, which the real table passes, to plant imports in."""
    import shutil

    tree = tmp_path_factory.mktemp("real")
    shutil.copytree(ROOT / "gpuhc", tree / "gpuhc", ignore=shutil.ignore_patterns("__pycache__"))
    assert violations(tree, DOC.read_text(encoding="utf-8")) == []
    return tree


@pytest.fixture
def plant(real_copy):
    """``plant(rel, import_line)``: the import inside a new function at the end of ``rel`` (a new
    file if missing), returning its line; every planted file is put back after the test."""
    before: dict[Path, str | None] = {}

    def _plant(rel: str, planted: str) -> int:
        path = real_copy / rel
        clean = path.read_text(encoding="utf-8") if path.exists() else ""
        before.setdefault(path, clean if path.exists() else None)
        path.write_text(clean + f"\n\ndef _planted():\n    {planted}\n", encoding="utf-8")
        return len(clean.splitlines()) + 4

    yield _plant
    for path, text in before.items():
        if text is None:
            path.unlink()
        else:
            path.write_text(text, encoding="utf-8")


def test_policy_is_pure_a_planted_import_into_act_fails(real_copy, plant):
    """The real tree and the real table, with imports planted in a pure policy module: the act
    layer (here the actuator, inside a function, as a lazy import would hide it) is refused, and
    so is every other way a policy module could reach I/O."""
    expected = []
    for planted, target, layer in (("from gpuhc.slurm.act.actuator import Actuator", "gpuhc/slurm/act/actuator.py", "slurm-act"),
                                   ("from ..flows import entry", "gpuhc/slurm/flows/entry.py", "slurm-flows"),
                                   ("import gpuhc.state.node", "gpuhc/state/node.py", "state")):
        line = plant("gpuhc/slurm/policy/drain.py", planted)
        expected.append(f"gpuhc/slurm/policy/drain.py:{line}: slurm-policy imports {target} ({layer})")
    assert violations(real_copy, DOC.read_text(encoding="utf-8")) == expected


def test_a_new_file_inherits_the_row_of_its_folder(real_copy, plant):
    """A file nobody named in the table takes the row of the folder it is put in: dropped into
    policy/ or read/ it is held to their imports; dropped into act/ it may use act."""
    newrule = plant("gpuhc/slurm/policy/newrule.py", "from gpuhc.slurm.act import scontrol")
    plant("gpuhc/slurm/act/newcommand.py", "from gpuhc.slurm.act import scontrol")
    newreader = plant("gpuhc/slurm/read/newreader.py", "from gpuhc.slurm.policy import drain")
    assert violations(real_copy, DOC.read_text(encoding="utf-8")) == [
        f"gpuhc/slurm/policy/newrule.py:{newrule}: slurm-policy imports gpuhc/slurm/act/scontrol.py (slurm-act)",
        f"gpuhc/slurm/read/newreader.py:{newreader}: slurm-read imports gpuhc/slurm/policy/drain.py (slurm-policy)",
    ]


def test_a_concern_folder_keeps_its_pure_plans_pure(real_copy, plant):
    """repair/ and jobs/ are flows by folder, but the files the table names keep their own row: a
    pure plan there that reaches for the actuator or a flow is refused, and so is a reset command
    that reaches for a flow, while a new file in the same folders, a flow, may use both."""
    plant("gpuhc/slurm/repair/newstep.py", "from gpuhc.slurm.act.actuator import Actuator")
    plant("gpuhc/slurm/jobs/newwatch.py", "from gpuhc.slurm.flows import frame")
    ladder = plant("gpuhc/slurm/repair/ladder.py", "from gpuhc.slurm.act.actuator import Actuator")
    record = plant("gpuhc/slurm/jobs/record.py", "from gpuhc.slurm.jobs import act")
    reset = plant("gpuhc/slurm/repair/reset_run.py", "from gpuhc.slurm.flows import frame")
    assert violations(real_copy, DOC.read_text(encoding="utf-8")) == [
        f"gpuhc/slurm/jobs/record.py:{record}: slurm-policy imports gpuhc/slurm/jobs/act.py (slurm-flows)",
        f"gpuhc/slurm/repair/ladder.py:{ladder}: slurm-policy imports gpuhc/slurm/act/actuator.py (slurm-act)",
        f"gpuhc/slurm/repair/reset_run.py:{reset}: slurm-act imports gpuhc/slurm/flows/frame.py (slurm-flows)",
    ]


def test_every_folder_of_slurm_says_its_row_and_imports_nothing():
    """Each folder of gpuhc/slurm/ names, in its docstring, the row or rows of the import table its
    files are in, and its __init__ imports nothing: importing one reader or the prolog's flow
    loads no sibling it does not use."""
    rows = {layer.name for layer in read_table(DOC.read_text(encoding="utf-8")) if layer.name.startswith("slurm-")}
    bad = []
    for init in sorted(ROOT.joinpath("gpuhc", "slurm").glob("*/__init__.py")):
        rel = init.relative_to(ROOT).as_posix()
        tree = ast.parse(init.read_text(encoding="utf-8"))
        doc = ast.get_docstring(tree) or ""
        if not any(row in doc for row in rows):
            bad.append(f"{rel}: its docstring names no row of the import table")
        if any(isinstance(n, (ast.Import, ast.ImportFrom)) and getattr(n, "module", None) != "__future__"
               for n in ast.walk(tree)):
            bad.append(f"{rel}: imports something")
    assert bad == []


FACE = {"__init__.py", "__main__.py", "errors.py"}  # docs/ARCHITECTURE.md: the package's face


def test_the_top_of_the_package_is_its_face():
    """gpuhc/ holds only the package's face; a new module goes into the folder of its layer, so the
    folders keep showing the layers."""
    top = {p.name for p in ROOT.joinpath("gpuhc").glob("*.py")}
    assert sorted(top - FACE) == [], "put a new module in the folder of its layer (docs/ARCHITECTURE.md)"
    assert len(top) <= 10


def test_every_layer_folder_says_its_row_and_imports_nothing():
    """A folder of gpuhc/ whose __init__ holds no code groups the modules of a layer: its docstring
    names the row (or rows) of the import table its files are in, and it imports nothing."""
    rows = {layer.name for layer in read_table(DOC.read_text(encoding="utf-8"))}
    bad = []
    for init in sorted(ROOT.joinpath("gpuhc").glob("*/__init__.py")):
        tree = ast.parse(init.read_text(encoding="utf-8"))
        body = [n for n in tree.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
        if body:  # a package with an interface of its own (a registry, the CLI): not a layer folder
            continue
        doc = ast.get_docstring(tree) or ""
        if not any(re.search(rf"\b{re.escape(row)}\b", doc) for row in rows):
            bad.append(f"{init.relative_to(ROOT).as_posix()}: its docstring names no row of the import table")
    assert bad == []


def module_level_imports(root: Path, path: str) -> set[str]:
    """The gpuhc modules ``path`` imports when it is loaded: at module level, in class bodies and
    under ``if TYPE_CHECKING`` (a type's home is a dependency too), not inside functions."""
    loaded: list[ast.stmt] = []

    def walk(nodes) -> None:
        for node in nodes:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                loaded.append(node)
            walk(ast.iter_child_nodes(node))

    walk(ast.parse((root / path).read_text(encoding="utf-8")).body)
    return {target for _, target in imports_in(root, path, ast.Module(body=loaded, type_ignores=[]))} - {path}


def circles(root: Path) -> list[list[str]]:
    """Every set of modules that import each other round a circle (Tarjan's strongly connected
    components of more than one module)."""
    graph = {p.relative_to(root).as_posix(): set() for p in sorted(root.joinpath("gpuhc").rglob("*.py"))}
    for path in graph:
        graph[path] = module_level_imports(root, path)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_no_import_circle():
    assert circles(ROOT) == []


def test_a_circle_is_found_even_through_a_type_only_import(tiny):
    (tiny / "gpuhc" / "checks" / "base.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from gpuhc.checks.xid import X\n")
    (tiny / "gpuhc" / "checks" / "xid.py").write_text("from gpuhc.checks.base import B\n\ndef f():\n    import gpuhc.slurm\n")
    (tiny / "gpuhc" / "slurm" / "scontrol.py").write_text("def f():\n    from gpuhc.slurm import x\n")
    assert circles(tiny) == [["gpuhc/checks/base.py", "gpuhc/checks/xid.py"]]
