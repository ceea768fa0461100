"""The plain data that flows through gpuhc: what the sources read and what the checks say.

Everything here is a dataclass of plain values so that a snapshot can be written to YAML,
replayed next year, and fed to a pure check in a unit test. Sources fill these in, checks read
them; neither side knows how the other works.

A package of one module per concern (results, NVML, occupancy, kernel log, the node around the
GPUs, job activity, the snapshot that holds them all) rather than one long file, so that a reader
looking for a check's verdict type does not scroll past the NVML fields. This ``__init__`` holds
nothing and re-exports nothing: an importer names the module a thing lives in
(``from gpuhc.model.result import Result, Status``).

Every class carries a docstring: a dataclass without one has its signature computed (through
``inspect``) at import, on every health check. No module here has ``from __future__ import
annotations``: the annotations are evaluated once, at class creation, so dataclasses and the
scenario loader's type tables (gpuhc.sources.snapshot_validate) need not compile every one of them
from a string on each run.

Conventions:
- ``None`` means "not available on this GPU/driver" (NVML NOT_SUPPORTED, a missing sysfs file).
  Checks turn ``None`` into status ``n/a``, never into a failure.
- PCI bus ids are normalised by :func:`gpuhc.model.pci.norm_pci` to ``dddd:bb:dd.f`` lower case,
  because NVML says ``00000000:B3:00.0``, the kernel log ``PCI:0000:b3:00`` and sysfs
  ``0000:b3:00.0``.
- Times are POSIX epoch seconds (float).
"""
