"""Read: what Slurm prints (sinfo, scontrol, their JSON, dumps, slurm.conf) turned into records,
and the one home of what differs between the Slurm releases gpuhc runs on (releases.py). Text in,
records out: nothing here runs a command or decides anything.

May import: base only (docs/ARCHITECTURE.md, "Import directions", row slurm-read). Imports
nothing itself, so that importing one reader stays cheap on the nodes.
"""
