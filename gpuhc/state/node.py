"""The per-node state store: one small JSON document, written atomically under a lock.

What lives here: kernel-log cursors, counter baselines for growth checks, IB downtime samples,
consecutive pass/fail counts for the drain policy (its ``slurm`` part through
:mod:`gpuhc.slurm.flows.memory`). Losing it is survivable (growth checks re-baseline) but corrupting
it must never crash a health check, and two gpuhc processes at once (a health check overlapping
an epilog) must not lose each other's writes: the locked, atomic, bounded document of
:mod:`gpuhc.files.jsonstore`, whose rules it follows.
"""

from __future__ import annotations

import os

from gpuhc.files.jsonstore import CORRUPT_KEEP, CORRUPT_SUFFIX, JsonStoreError, LockedJson  # noqa: F401 - re-exported

STATE_FILE = "state.json"
LOCK_FILE = "state.lock"
MAX_STATE_BYTES = 16 * 1024 * 1024  # a real node's document is tens of KB (8 GPUs x 18 links of counters)
MAX_STATE_DEPTH = 32  # gpuhc's own documents nest at most 6 deep


class StateError(JsonStoreError):
    pass


def default_state_dir(configured: str | None = None) -> str:
    from gpuhc.config.load import DEFAULT_STATE_DIR

    return os.environ.get("GPUHC_STATE_DIR") or configured or DEFAULT_STATE_DIR


class StateStore(LockedJson):
    """The node's state document in ``directory``: ``transaction()`` to change it, ``read()``
    for a copy, ``problem`` when a corrupt one was rebuilt."""

    def __init__(self, directory: str, lock_timeout_s: float = 5.0):
        super().__init__(directory, STATE_FILE, LOCK_FILE, what="state", max_bytes=MAX_STATE_BYTES,
                         max_depth=MAX_STATE_DEPTH, lock_timeout_s=lock_timeout_s, error=StateError)
