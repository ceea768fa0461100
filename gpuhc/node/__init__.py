"""The node's GPUs as Slurm and the kernel name them: Slurm's GPU numbers mapped to devices and
MIG instances, gres.conf, and which processes hold a GPU and who they are.

Row of the import table (docs/ARCHITECTURE.md): base. Imports nothing.
"""
