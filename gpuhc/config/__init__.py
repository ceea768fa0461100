"""gpuhc.yaml loaded and checked (``load.py``), its per-host overrides (``hosts.py``), the GPU
profiles (``profiles.py``) and Slurm's switch topology text (``topology.py``).

Rows of the import table (docs/ARCHITECTURE.md): config; ``profiles.py`` its own row, profiles,
below active (the active checks read their thresholds from it). Imports nothing.
"""
