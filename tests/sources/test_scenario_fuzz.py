"""Fuzzing scenario files: whatever a recording attached to a ticket holds, replaying it ends in
a verdict or in one named refusal (SourceError, exit 2), never in "could not judge" (exit 3),
a crash, or memory that grows with a number in the file.

Two generators: random documents over the scenario's own key names (wrong shapes and types
everywhere), and the shipped healthy node with one value somewhere inside replaced by a random
one (right shapes, wrong values deep down, where the checks read them)."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import tempfile

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gpuhc.config.load import Config, defaults, schema
from gpuhc.errors import SourceError
from gpuhc.model.result import Status
from gpuhc.run.runner import run_stage
from gpuhc.run.report import RunOptions
from gpuhc.sources import SourceSpec
from gpuhc.sources.scenario import load_scenario
from gpuhc.sources.scenario_validate import TOP_KEYS
from gpuhc.text.limits import MAX_GPUS, MAX_NVLINKS
from gpuhc.sources.snapshot_validate import GPU_FIELDS, IB_FIELDS
from tests.helpers.paths import REPO

ROOT = REPO
HEALTHY = ROOT / "examples" / "scenarios" / "healthy-8xh100.yaml"
HEALTHY_DOC = yaml.safe_load(HEALTHY.read_text())

KEYS = sorted({*TOP_KEYS, *GPU_FIELDS, *IB_FIELDS, "count", "active", "errors", "link", "kind", "events"})
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2 ** 70), max_value=2 ** 70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.one_of(st.sampled_from(KEYS), st.integers(0, 3), st.text(max_size=6)), inner, max_size=5),
    max_leaves=25,
)
RANDOM_DOCS = st.dictionaries(st.sampled_from([k for k in TOP_KEYS if k != "extends"]), VALUES, min_size=1, max_size=8)


def _paths(doc, prefix=()):
    """Every path into the healthy document (its lists and mappings), for mutation."""
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:3]):
            yield from _paths(v, prefix + (i,))


PATHS = [p for p in _paths(HEALTHY_DOC) if p]


def same_kind(old):
    """A value of the old one's kind but any size: what a recording of a very sick node, or a
    hand edit, puts where a check reads it."""
    if isinstance(old, bool):
        return st.booleans()
    if isinstance(old, int):
        return st.integers(0, 2 ** 64)
    if isinstance(old, float):
        return st.floats(min_value=0, max_value=1e300)
    if isinstance(old, str):
        return st.text(max_size=40)
    return VALUES


@st.composite
def mutated_healthy(draw):
    doc = copy.deepcopy(HEALTHY_DOC)
    path = draw(st.sampled_from(PATHS))
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = draw(st.one_of(same_kind(node[path[-1]]), same_kind(node[path[-1]]), VALUES))
    return doc


def judge_or_refuse(doc: dict) -> None:
    """Load ``doc`` as a scenario and judge it: a SourceError naming the file, or a verdict with
    no "could not judge" in it."""
    doc = dict(doc)
    # Hermetic: a scenario without these sections would read this machine's kernel log and bus.
    if "kernel_log" not in doc and "kernel" not in doc:
        doc["kernel_log"] = []
    doc.setdefault("ib_ports", [])
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "s.yaml")
        with open(path, "w") as f:
            yaml.safe_dump(doc, f)
        try:
            load_scenario(path)
        except SourceError as e:
            text = str(e)
            assert text.startswith(path) and "\n" not in text, text
            event("refused")
            return
        event("judged")
        opts = RunOptions(stage="passive", config=Config(defaults(schema())), sources=SourceSpec(nvml_scenario=path),
                          state_dir=os.path.join(d, "state"), now=1.75e9)
        report = run_stage(opts)
    errors = [(r.check, r.message) for r in report.results if r.status is Status.ERROR]
    assert not [e for e in errors if e[1].startswith("internal error")], errors  # a check broke
    # A null is how a recording says a reading was unreadable, and some checks document that as
    # ERROR (infiniband: a port's state unreadable, could not judge; docs/checks.md). Only then.
    assert not errors or _has_null(doc), errors


def _has_null(node) -> bool:
    if node is None:
        return True
    if isinstance(node, dict):
        return any(_has_null(v) for v in node.values())
    if isinstance(node, list):
        return any(_has_null(v) for v in node)
    return False


FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(RANDOM_DOCS)
def test_random_documents_are_judged_or_refused_by_name(doc):
    judge_or_refuse(doc)


@FUZZ
@given(mutated_healthy())
def test_one_wrong_value_inside_a_healthy_node_is_judged_or_refused_by_name(doc):
    judge_or_refuse(doc)


@settings(max_examples=40, deadline=None)
@given(st.integers(min_value=MAX_GPUS + 1, max_value=10 ** 30), st.sampled_from(["count", "nvlinks", "gpus"]))
def test_sizes_past_the_documented_bounds_are_refused_before_anything_is_built(n, where):
    """`count: 10**30`, `nvlinks: {count: 100000000}`, `gpus: {99999999: {}}`: a named refusal,
    not a hundred million dicts (the refusal comes from the bound, so memory stays flat)."""
    body = {"count": {"count": n}, "nvlinks": {"defaults": {"nvlinks": {"count": n}}},
            "gpus": {"gpus": {n: {}}}}[where]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "s.yaml")
        with open(path, "w") as f:
            f.write(f"extends: {HEALTHY}\n" + yaml.safe_dump(body))
        with pytest.raises(SourceError) as e:
            load_scenario(path)
    assert str(MAX_GPUS if where != "nvlinks" else MAX_NVLINKS) in str(e.value) or str(MAX_GPUS - 1) in str(e.value)


@pytest.mark.parametrize("body, says", [
    ("defaults: {nvlinks: {count: 100000000}}\n", "defaults.nvlinks.count: at most 64 NVLinks per GPU, got 100000000"),
    ("count: 100000000\n", "count: must be between 0 and 1024, got 100000000"),
])
def test_huge_counts_are_a_usage_error_within_a_small_memory_limit(tmp_path, body, says):
    """Before: MemoryError (exit 3) after eating the machine. Run under a 1 GiB address-space
    limit, so a regression fails here instead of exhausting the test machine."""
    path = tmp_path / "s.yaml"
    path.write_text(f"extends: {HEALTHY}\n{body}")
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30)); "
            "from gpuhc.cli import main; sys.argv = ['gpuhc'] + sys.argv[1:]; main()")
    p = subprocess.run([sys.executable, "-c", code, "check", "--nvml-scenario", str(path)], capture_output=True,
                       text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert p.stderr.strip().splitlines()[-1] == f"gpuhc: error: {path}:2: {says}"
