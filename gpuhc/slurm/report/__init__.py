"""Report: ``gpuhc drain-report``'s read-only view: who took which nodes out, why and since
when (build.py), and its per-node fields (fields.py). Nothing here changes a node.

May import: base, slurm/read/ and slurm/policy/ (docs/ARCHITECTURE.md, "Import directions",
row slurm-report). Imports nothing itself.
"""
