"""Everything gpuhc knows about Slurm, one folder per row of the import table
(docs/ARCHITECTURE.md, "Import directions") and per concern a reader looks for:

- ``read/``: what Slurm prints (every text and JSON spelling since 17.11) into one
  :class:`gpuhc.slurm.read.nodes.Node`, and the release differences (``releases.py``);
- ``policy/``: the pure decisions (drain or resume, reasons, the circuit breaker);
- ``act/``: the one path to Slurm's programs, and the actuator that changes nodes;
- ``report/``: ``gpuhc drain-report``'s read-only view;
- ``flows/``: the health check, prolog and epilog, and the frame every flow shares;
- ``repair/``: the ladder, the GPU reset, retest, quarantine and lemons;
- ``jobs/``: the running jobs' GPUs, their record and the node watcher.

``settings.py`` is the ``slurm`` config section. Nothing is imported here, nor in any folder's
``__init__``, so that ``import gpuhc.slurm.read.nodes`` stays cheap on the nodes.
"""
