"""The evidence bundles gpuhc leaves for a person: a failed job's post-mortem (``job.py``) and a
retired node's bundle (``retire.py``).

Row of the import table (docs/ARCHITECTURE.md): postmortem. Imports nothing.
"""
