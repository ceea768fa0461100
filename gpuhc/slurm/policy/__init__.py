"""Policy: the Slurm side's pure decisions. Drain or resume (drain.py), gpuhc's reason text
(reason.py), the circuit breaker and its ledger's record, the shared-cause rule, slurm.conf's
wiring judged. Nodes, memory and settings in, decisions out; nothing here runs a command or
writes a file, so every rule can be tested with plain data.

May import: base and slurm/read/ (docs/ARCHITECTURE.md, "Import directions", row slurm-policy).
Imports nothing itself.
"""
