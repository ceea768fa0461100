"""Shared test setup: the real-Slurm cluster fixtures, the Slurm release matrix, and the ``gpu``
marker's skip rule.

Every test that starts a cluster (``slurm_cluster``/``slurm_cluster_module``) runs once per
selected Slurm release, and its id says which: ``test_x[slurm-24.11]``. ``--slurm`` (or
``GPUHC_SLURM``) selects: ``host`` (default: the host's packages), ``all`` (22.05, 24.11,
26.05; the ones the host lacks run in Debian chroots, tests/helpers/slurm_release.py), or a comma list.
Tests marked ``slurm_host`` run on the host's Slurm only, named the same way.

``tests`` is a package (tests/README.md): pytest puts the repository on ``sys.path``, test modules
import the shared pieces as ``tests.helpers.<name>``, and the fixtures below reach every folder.
"""

from __future__ import annotations

import os

import pytest

# The parse memo (gpuhc/files/parsecache.py) of this session's runs, in-process and in subprocesses,
# goes to a directory of its own rather than the machine's /var/cache/gpuhc.
if "GPUHC_CACHE_DIR" not in os.environ:
    import atexit
    import shutil
    import tempfile

    os.environ["GPUHC_CACHE_DIR"] = tempfile.mkdtemp(prefix="gpuhc-test-cache-")
    atexit.register(shutil.rmtree, os.environ["GPUHC_CACHE_DIR"], True)

from tests.helpers.slurm_cluster import slurm_cluster, slurm_cluster_module  # noqa: E402,F401  (fixtures)
from tests.helpers.slurm_release import host_version, release, selected  # noqa: E402

_CLUSTER_FIXTURES = {"slurm_cluster", "slurm_cluster_module", "slurm_release"}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--slurm", default=os.environ.get("GPUHC_SLURM", "host"),
                     help="Slurm releases for the slurm tests: host (default), all, or e.g. 22.05,26.05")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "install: installs gpuhc as README.md says inside a fresh Debian chroot "
                                       "(root, mmdebstrap, network to PyPI; fails, never skips)")
    config.addinivalue_line("markers", "serial: compares timings, so it runs alone, after the parallel part "
                                       "(tests/run.sh), never beside other tests")
    config.addinivalue_line("markers", "slurm_host: a slurm test that runs on the host's Slurm only (its jobs run "
                                       "the host's Python, which a release's chroot does not have)")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if not _CLUSTER_FIXTURES & set(metafunc.fixturenames):
        return
    host = host_version() or "22.05"
    if metafunc.definition.get_closest_marker("slurm_host"):
        versions = [host]
    else:
        versions = selected(metafunc.config.getoption("--slurm"))
    metafunc.parametrize("slurm_release", versions, indirect=True, ids=[f"slurm-{v}" for v in versions],
                         scope="module")


@pytest.fixture(scope="module")
def slurm_release(request: pytest.FixtureRequest):
    """The Slurm release this test's clusters run (tests/helpers/slurm_release.py)."""
    return release(getattr(request, "param", None) or host_version() or "22.05")


def _gpu_present() -> bool:
    """True when NVML initialises: the only honest test for "this machine has an NVIDIA GPU"."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return pynvml.nvmlDeviceGetCount() > 0
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return False


# The live node's paths before the session (tests/helpers/live_paths.py): the run fails if the
# suite wrote there. Taken once, by the controller (pytest-xdist's workers have workerinput).
_LIVE_BEFORE: dict = {}


def pytest_sessionstart(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):
        from tests.helpers.live_paths import snapshot

        _LIVE_BEFORE.update(snapshot())
        _LIVE_BEFORE["__taken__"] = ("-", 0, 0)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if hasattr(session.config, "workerinput") or "__taken__" not in _LIVE_BEFORE:
        return
    from tests.helpers.live_paths import changes, snapshot

    before = {k: v for k, v in _LIVE_BEFORE.items() if k != "__taken__"}
    wrote = changes(before, snapshot())
    if wrote:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        lines = ["the suite wrote on the live node's paths (no test may: tests/helpers/live_paths.py):",
                 *(f"  {w}" for w in wrote[:50]), *([f"  ... and {len(wrote) - 50} more"] if len(wrote) > 50 else [])]
        if reporter is not None:
            reporter.write_line("\n".join(lines), red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _shared_scope(item: pytest.Item) -> str | None:
    """The group of a test that shares a module- or class-scoped fixture with its neighbours
    (a cluster a module's tests share, tests/helpers/slurm_cluster.py): its module and Slurm
    release. pytest-xdist's ``--dist loadgroup`` (tests/run.sh) then keeps the group on one
    worker, so the shared cluster starts once there; every other test goes wherever a worker
    is free."""
    defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    if not any(d.scope in ("module", "class") for name, ds in defs.items() if name != "slurm_release" for d in ds):
        return None
    release = getattr(item, "callspec", None) and item.callspec.params.get("slurm_release")
    return f"{item.nodeid.split('::')[0]}@{release or ''}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if (group := _shared_scope(item)) is not None and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(group))
    # `gpu` tests are the only ones allowed to skip, and only where no GPU is present.
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if gpu_items and not _gpu_present():
        skip = pytest.mark.skip(reason="needs an NVIDIA GPU (NVML found none)")
        for item in gpu_items:
            item.add_marker(skip)
