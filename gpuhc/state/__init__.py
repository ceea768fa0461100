"""What a node keeps between runs: its state document (``node.py``), its known-good baseline,
and the Slurm hooks' last good config.

Row of the import table (docs/ARCHITECTURE.md): state. Imports nothing.
"""
