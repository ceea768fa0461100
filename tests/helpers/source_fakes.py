"""Stand-ins for the runner's sources (NVML, the kernel log, sysfs), for the runner's own tests:
a source that answers, one that raises, one that hangs like a wedged NVML call."""

from __future__ import annotations

import threading
import time

from gpuhc.model.kernel import KernelLog
from gpuhc.model.nvml import NvmlReading

FOREVER = threading.Event()  # never set: a source that waits on it hangs like a wedged NVML call


class FakeNvml:
    def __init__(self, hang: bool = False, raises: bool = False, sleep_s: float = 0.0):
        self.hang, self.raises, self.sleep_s = hang, raises, sleep_s

    def read(self):
        if self.hang:
            FOREVER.wait()
        if self.raises:
            raise OSError("ioctl failed")
        time.sleep(self.sleep_s)
        return NvmlReading(available=True, driver_version="580.00")


class FakeKlog:
    def read(self):
        return KernelLog(source="fake", last_time=1_000_000.0)


class FakeSysfs:
    def ib_ports(self):
        return []

    def aer(self):
        return []
