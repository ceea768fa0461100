"""What ``sinfo`` answers to gpuhc's node reads, rendered from a test's small node table.

For the unit tests that inject the Slurm runner (the flows, the sweep's apply): they keep a node
table and must answer the argv gpuhc sends. The format is the one real sinfo prints for
:data:`gpuhc.slurm.read.sinfo.FIELDS` (lower-case complete state, ``p1*`` for the default partition,
``none``/``Unknown`` for a missing reason/time); tests/slurm_real/test_sinfo.py checks the reader
against a real slurmctld, with the same reasons read back through scontrol.
"""

from __future__ import annotations

import os

from gpuhc.slurm.read.sinfo import END

# {name: (state as scontrol prints it, reason or None, reason time "YYYY-MM-DDTHH:MM:SS", partitions)}


def is_sinfo(argv: list[str]) -> bool:
    return os.path.basename(argv[0]) == "sinfo"


def one_node(argv: list[str]) -> str | None:
    """The node name of a one-node read (``-n NAME``), None for a scope read."""
    return argv[argv.index("-n") + 1] if "-n" in argv else None


def render(rows: dict[str, tuple[str, str | None, str, tuple[str, ...]]], argv: list[str]) -> str:
    name = one_node(argv)
    wanted = [name] if name is not None else sorted(rows)
    parts = argv[argv.index("-p") + 1].split(",") if "-p" in argv else None
    out = []
    for n in wanted:
        if n not in rows:
            continue
        state, reason, when, partitions = rows[n]
        for p in partitions:
            if parts is not None and p not in parts:
                continue
            stamp = when if reason else "Unknown"
            user = "root" if reason else "Unknown"
            out.append(f"{n}|{p}|{state.lower()}|{stamp}|{user}|{reason or 'none'}{END}\n")
    return "".join(out)
