"""Jobs: gpuhc's side of the jobs running on the node. The job's GPUs as Slurm gave them
(gpus.py), every node's view of a job in its AdminComment (record.py), Slurm's job commands
(control.py), what the health check does about a hung job (act.py) and the node watcher
(watch.py).

One concern, three rows (docs/ARCHITECTURE.md, "Import directions", names each file that is not
a flow): record.py is slurm-policy (pure; base, slurm/read/, slurm/policy/ only), control.py is
slurm-act; every other file, a new one included, is slurm-flows. Imports nothing itself.
"""
