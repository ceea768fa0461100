"""gpuhc's test suite: a package, so that test modules of the same name in different folders
(tests/slurm/repair/test_ladder.py, tests/slurm_real/test_ladder.py) are distinct modules and the shared
pieces import as ``tests.helpers.<name>`` (tests/README.md)."""
