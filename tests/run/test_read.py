"""Which reads get a thread: a live source always (it may hang in C), a recording in memory never."""

from __future__ import annotations

import copy
import threading

from gpuhc.checks.base import AER, IB, KERNEL_LOG, NVML, PCI
from gpuhc.run.read import ALL, in_memory, start_readers
from gpuhc.sources import SourceSpec, Sources, build_sources
from gpuhc.sources.scenario import load_scenario
from tests.helpers.paths import SCENARIOS
from tests.helpers.source_fakes import FakeKlog, FakeNvml, FakeSysfs


class _Where:
    """A source that notes the thread each read ran in."""

    def __init__(self, says: object = None):
        self.threads: list[int] = []
        if says is not None:
            self.in_memory = says

    def read(self):
        self.threads.append(threading.get_ident())
        return "read"


def test_a_source_in_memory_is_read_in_the_callers_thread_and_a_live_one_in_its_own():
    mem, live = _Where(says=True), _Where()
    readers = start_readers(Sources(mem, live, FakeSysfs(), replay=True), {NVML, KERNEL_LOG})
    assert readers[NVML].done and readers[NVML].value == "read"  # made before start_readers returned
    assert mem.threads == [threading.get_ident()]
    assert readers[KERNEL_LOG].wait(float("inf")) and readers[KERNEL_LOG].value == "read"
    assert live.threads and live.threads != [threading.get_ident()]


def test_only_a_source_that_says_exactly_true_is_trusted_to_be_in_memory():
    # A truthy attribute that is not True (a mock, a string) still gets a thread, and its timeout.
    assert not in_memory(_Where(says="yes").read) and not in_memory(_Where().read)
    assert in_memory(_Where(says=True).read) and not in_memory(lambda: None)


def test_a_hung_live_source_beside_a_recording_still_times_out_alone():
    readers = start_readers(Sources(FakeNvml(hang=True), _Where(says=True), FakeSysfs(), replay=True),
                            {NVML, KERNEL_LOG})
    assert readers[KERNEL_LOG].done and not readers[NVML].wait(0.05)


def test_an_inline_read_that_raises_is_the_readers_error_as_a_threads_would_be():
    class Broken:
        in_memory = True

        def read(self):
            raise OSError("recording damaged")

    readers = start_readers(Sources(Broken(), FakeKlog(), FakeSysfs(), replay=True), {NVML})
    assert readers[NVML].done and isinstance(readers[NVML].error, OSError) and readers[NVML].value is None


def test_every_source_of_a_replay_is_read_before_start_readers_returns():
    sources = build_sources(SourceSpec(nvml_scenario=str(SCENARIOS / "ib-port-down.yaml")))
    readers = start_readers(sources, ALL)
    assert all(r.done and r.error is None for r in readers.values())
    assert readers[NVML].value.gpus and readers[IB].value and readers[KERNEL_LOG].value is not None
    assert readers[AER].value == sources.sysfs.aer() and PCI in readers


def test_each_read_of_a_replay_is_a_copy_equal_to_a_deepcopy_of_the_recording():
    scenario = load_scenario(str(SCENARIOS / "nvlink-errors-growing.yaml"), 1)
    first = scenario.nvml_source().read()
    assert first == copy.deepcopy(scenario.nvml) and first is not scenario.nvml
    first.gpus[0].nvlinks.clear()  # a caller altering its copy alters neither the recording nor the next read
    assert scenario.nvml_source().read() == scenario.nvml and scenario.nvml.gpus[0].nvlinks
    ports = scenario.sysfs_source().ib_ports()
    assert ports == scenario.ib_ports and (not ports or ports[0] is not scenario.ib_ports[0])
