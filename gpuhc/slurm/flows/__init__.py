"""Flows: the runs Slurm starts (health check, prolog, epilog: entry.py) and the frame every
Slurm flow shares: the run's frame and its one step after a decision (frame.py), the node's
Slurm memory (memory.py), the log (log.py), one run at a time (runlock.py), an admin's resume
seen (handover.py), a wedged driver counted (wedged.py).

May import: every layer above it (docs/ARCHITECTURE.md, "Import directions", row slurm-flows):
base, sources, checks, config, state, runner, export, postmortem, hooks and the other slurm rows.
Imports nothing itself.
"""
