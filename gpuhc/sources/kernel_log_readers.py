"""The record readers every kernel-log parse runs, declared once: each reads its own events out
of the records the parser hands on (:class:`gpuhc.sources.kernel_log_record.RecordReader`; the
driver's own lines are the parser's). A new kind of kernel evidence is a reader added here."""

from __future__ import annotations

from gpuhc.sources.kernel_log_host import HostLines
from gpuhc.sources.kernel_log_storage import StorageLines
from gpuhc.sources.node_reports import NodeReports

# AER, machine checks and EDAC, mlx5 cable events; hung tasks, mlx5 health, transmit time-outs;
# local disks, NFS, soft lockups, panics, file-max
READERS: tuple[type, ...] = (HostLines, NodeReports, StorageLines)
