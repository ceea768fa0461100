"""One stage run: select and plan the checks, read the sources with deadlines, judge, hold, keep.

Row of the import table (docs/ARCHITECTURE.md): runner; two start-up files ``__main__`` loads
first keep their own rows: ``phases.py`` (base) and ``nvml_early.py`` (sources). Imports
nothing, so that ``nvml_early`` starts without loading the run.
"""
