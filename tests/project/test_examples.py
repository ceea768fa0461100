"""Every shipped scenario shows the fault it is named after, through the real runner.

Each file in examples/scenarios/ is replayed with `gpuhc.run.runner.run_stage` (passive stage,
default config, a fresh state directory), once per time step, as the health check would run it
every few minutes. The table says what each run's verdict must be and which checks must fail on
the last run, with which subject and action: a scenario that stops showing its fault (a check
that changed, a scenario edited out of shape) fails here instead of shipping a silently healthy
"fault" example. A new scenario without a row fails too.
"""

from __future__ import annotations

import glob
import os

import pytest

from gpuhc.config.load import Config, defaults, schema
from gpuhc.model.result import Status
from gpuhc.run.runner import run_stage
from gpuhc.run.report import RunOptions
from gpuhc.sources import SourceSpec
from gpuhc.sources.scenario import load_scenario
from tests.helpers.paths import REPO

ROOT = str(REPO)
SCENARIOS = os.path.join(ROOT, "examples", "scenarios")
FILES = sorted(os.path.basename(p) for p in glob.glob(os.path.join(SCENARIOS, "*.yaml")))

PASS, WARN, FAIL = Status.PASS, Status.WARN, Status.FAIL
GPUS = [f"gpu{i}" for i in range(8)]

# file -> (worst status of each run, first to last step; {(check, subject, action)} failing on the last run)
EXPECTED: dict[str, tuple[list[Status], set[tuple[str, str, str]]]] = {
    "healthy-8xh100.yaml": ([PASS], set()),
    "healthy-8xh200.yaml": ([PASS], set()),
    # configuration the site may make strict (docs/checks.md, "firmware", "ipoib"): warned by default
    "ipoib-down.yaml": ([WARN], set()),
    "vbios-mixed.yaml": ([WARN], set()),
    "ecc-uncorrectable.yaml": ([FAIL], {("ecc", "gpu5", "reset GPU")}),
    "row-remap-pending.yaml": ([FAIL], {("ecc", "gpu1", "reset GPU")}),
    # Fabric Manager down: within the grace period right after boot, past it ten minutes later.
    "fabric-not-ready.yaml": ([WARN, FAIL], {("nvswitch", g, "drain + reboot") for g in GPUS}),
    # No expected count configured: the PCI bus still lists the GPU NVML lost.
    "gpu-missing-7.yaml": ([FAIL], {("gpu-count", "0000:db:00.0", "drain + reboot")}),
    "nvml-unavailable.yaml": ([FAIL], {("gpu-count", "node", "drain + reboot")}),
    "hw-slowdown.yaml": ([FAIL], {("clocks", "gpu7", "drain + hardware ticket")}),
    "thermal-hot-gpu.yaml": ([FAIL], {("thermal", "gpu6", "drain + hardware ticket")}),
    "power-capped.yaml": ([FAIL], {("power", "gpu2", "drain + reboot")}),
    "pcie-width-x8.yaml": ([FAIL], {("pcie", "gpu4", "drain + reboot")}),
    "nvlink-down.yaml": ([FAIL], {("nvlink", "gpu2", "drain + reboot")}),
    # Growth is judged between two readings of a link: the first run only records the counters;
    # with the default dl_rotation (3) link 9's DL counters are read again on run 4.
    "nvlink-errors-growing.yaml": ([PASS, PASS, PASS, FAIL], {("nvlink", "gpu6", "drain + hardware ticket")}),
    "ib-port-down.yaml": ([FAIL], {("infiniband", "mlx5_3/1", "drain + hardware ticket")}),
    "ib-flapping.yaml": ([FAIL], {("infiniband", "mlx5_1/1", "drain + hardware ticket")}),
    # Single flaps, each a WARN, in three separate hours of one day (issue 43): the third drains.
    "ib-flaps-recurring.yaml": ([WARN, WARN, FAIL], {("infiniband", "mlx5_1/1", "drain + hardware ticket")}),
    "xid79-fallen-off-bus.yaml": ([FAIL], {("xid", "gpu3", "drain + reboot")}),
    # Kernel-log replays of real lines (issues 18 and 19): a GSP crash and a GSP heartbeat timeout
    # with no Xid; NVLink 5 Xids judged by sub-code (only the NETIR link fatal resets); processes
    # named like driver lines that segfault, and records from user space, which are no evidence.
    "gsp-crashcat-no-xid.yaml": ([FAIL], {("xid", "node", "reset GPU")}),
    "gsp-heartbeat-timeout.yaml": ([FAIL], {("xid", "node", "reset GPU")}),
    "nvlink5-subcodes-gb200.yaml": ([FAIL], {("xid", "0019:01:00.0", "reset GPU")}),
    "segfault-named-like-driver.yaml": ([PASS], set()),
    # The health check never judges occupancy (a process on a node in service is a job); the
    # prolog and epilog fail on gpu1 (tests/checks/test_occupancy.py).
    "stray-process.yaml": ([PASS], set()),
    # The NVLink5 fabric (GB200 tray; gpuhc/checks/fabric.py, tests/sources/test_scenario_fabric.py).
    "healthy-4xgb200.yaml": ([PASS], set()),
    "fabric-route-unhealthy.yaml": ([FAIL], {("fabric", "gpu1", "drain + reboot")}),
    "fabric-degraded-bw.yaml": ([WARN], set()),
    "fabric-unhealthy-summary.yaml": ([FAIL], {("fabric", "gpu0", "drain + reboot")}),
    "fabric-not-complete-gb200.yaml": ([FAIL], {("nvswitch", "gpu3", "drain + reboot")}),
    # IMEX is judged softly unless the site says it runs rack-wide (imex_required).
    "imex-domain-down.yaml": ([WARN], set()),
    # C2C growth between readings: recorded, then +250 CRC (WARN), then +40000 (FAIL).
    "c2c-errors-growing.yaml": ([PASS, WARN, FAIL], {("fabric", "gpu0", "drain + hardware ticket")}),
    # A job trains, then hangs with its rank on gpu3 stopped: a warning naming gpu3, never a drain.
    "job-hang.yaml": ([PASS, WARN], set()),
    # Slurm's GPU numbers (issue 31; tests/slurm/jobs/test_gpus.py replays the prologs): the health
    # check judges every GPU and no job's slice, so these pass; the ECC error does not.
    "healthy-8xa100-mig.yaml": ([PASS], set()),
    "mig-leftover-own-slice.yaml": ([PASS], set()),
    "gres-order-8xh100.yaml": ([FAIL], {("ecc", "gpu2", "reset GPU")}),
    # The node around the GPUs (issue 33): the root port above gpu0 failed, and the GPU with it;
    # Fabric Manager down on an NVSwitch node.
    "aer-gpu-root-port.yaml": ([FAIL], {("pcie-aer", "gpu0", "drain + reboot"), ("pcie-aer", "0000:00:03.0", "drain + reboot")}),
    # A service down is evidence of the node around the GPUs: one run of it warns; held over
    # consecutive runs spanning evidence.host it drains (issue 43; tests/run/test_hold.py)
    "fabric-manager-down.yaml": ([WARN], set()),
    # Host noise on a healthy busy node for an hour of health checks (issue 43): one slow dcgmi
    # warns, an NFS reader in state D whose CPU time grows and one corrected AER on the NIC are
    # nothing; never a FAIL (tests/slurm/flows/test_flows_evidence.py replays it through Slurm).
    "healthy-busy-host-noise.yaml": ([WARN] + [PASS] * 12, set()),
}


def test_every_scenario_has_a_row_and_every_row_a_scenario():
    assert FILES and set(FILES) == set(EXPECTED)


@pytest.mark.parametrize("name", FILES)
def test_scenario_shows_its_fault(tmp_path, name):
    path = os.path.join(SCENARIOS, name)
    statuses, failing = EXPECTED[name]
    runs = load_scenario(path).steps  # the runner advances one step per run: one run per state
    assert runs == len(statuses), f"{name} has {runs} step(s); the table describes {len(statuses)}"
    opts = RunOptions(stage="passive", config=Config(defaults(schema())), sources=SourceSpec(nvml_scenario=path),
                      state_dir=str(tmp_path / "state"), hostname="gpu001")
    seen = []
    for _ in range(runs):
        report = run_stage(opts)
        seen.append(report.status)
        # gpuhc judged everything: no timeouts, no errors, whatever the verdict
        assert not report.timed_out and not [r for r in report.results if r.status is Status.ERROR], report.results
    assert seen == statuses
    got = {(r.check, r.subject, r.action.value) for r in report.results if r.status is Status.FAIL}
    assert got == failing
    assert all(r.action.drains for r in report.results if r.status is Status.FAIL)
    assert report.exit_code == (1 if failing else 0)
