"""Act: the one path to Slurm's programs (command.py: argv only, inside the deadline, observe
mode's gate), scontrol, the actuator that carries out a decision and verifies it, and the
breaker ledger's client.

May import: base, slurm/read/ and slurm/policy/ (docs/ARCHITECTURE.md, "Import directions",
row slurm-act). Imports nothing itself.
"""
