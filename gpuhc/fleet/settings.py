"""Config section ``fleet``: where the fleet commands find history, and their thresholds."""

from __future__ import annotations

from gpuhc.text.schema import Key

SCHEMA = {
    "event_logs": Key(list, [], "gpuhc event logs (paths or globs, e.g. a log shipper's per-node copies) "
                      "read by `fleet stats`; empty: output.event_log", item=str),
    "gpus_per_node": Key(int, 8, "GPUs per node, to turn node failures into a per-GPU rate (`fleet risk "
                         "--from-history`)", min=1, max=1024),
    "sacct_timeout_s": Key(float, 120.0, "timeout of one sacct/sacctmgr/sinfo call", min=1.0, max=3600.0),
    "suspects": {
        "since_days": Key(float, 7.0, "window of jobs `fleet suspects` and `sweep submit` look at", min=0.1),
        "alpha": Key(float, 0.01, "family-wise significance: a node is a suspect when its one-sided Fisher "
                     "p-value is below alpha / (nodes in its partition) (Bonferroni)", min=1e-12, max=0.5),
        "min_bad_jobs": Key(int, 3, "a suspect needs at least this many badly ended jobs", min=1),
        "min_ratio": Key(float, 1.5, "and a bad-end rate at least this many times the rest of its partition's",
                         min=1.0),
        "states": Key(list, ["NODE_FAIL", "FAILED", "TIMEOUT"], "job end states that count as bad", item=str),
        "sweep_first": Key(bool, True, "`gpuhc sweep submit` probes suspects first (when sacct answers)"),
    },
    "switch": {
        "min_nodes": Key(int, 3, "K: this many nodes under one leaf switch failing the same check inside the "
                         "window make one suspect-switch incident", min=2),
        "window_s": Key(float, 1800.0, "how close together the failures must be", min=1.0),
        "topology_file": Key(str, None, "a topology.conf to read instead of asking `scontrol show topology`; "
                             "on a node, the lemon rule's only topology (drains of a switch incident count for "
                             "the switch: docs/repair.md, Lemon memory)",
                             nullable=True),
    },
}
