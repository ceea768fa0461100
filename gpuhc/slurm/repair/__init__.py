"""Repair: what gpuhc does with a node it holds. The remediation ladder (ladder.py decides,
remediate.py climbs it inside the health check), the GPU reset (reset_plan.py plans, reset_probe.py
reads the node, gpureset.py and reset_run.py carry it out), quarantine (release, retire, reboot
for a retest: quarantine.py decides, admin.py acts, retest.py runs the retest), and lemon memory
(lemons.py judges, lemon_memory.py keeps the history, lemon_panics.py adds a previous boot's
hardware panics to it).

One concern, three rows (docs/ARCHITECTURE.md, "Import directions", names each file that is not
a flow): the pure plans (ladder, quarantine, lemons, reset_plan) are slurm-policy and may import
only base, slurm/read/ and slurm/policy/; the reset's commands (gpureset, reset_probe,
reset_run) are slurm-act; every other file, a new one included, is slurm-flows. Imports nothing
itself.
"""
