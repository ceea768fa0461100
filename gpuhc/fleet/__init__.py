"""Fleet-level views: what happened to the nodes over weeks, not what is wrong with one now.

- :mod:`gpuhc.fleet.history`: drain/resume intervals from gpuhc's event logs and Slurm's own
  node events (``sacctmgr show event``);
- :mod:`gpuhc.fleet.stats`: drains, MTBF, MTTR, retirements and trend per node, partition, cause;
- :mod:`gpuhc.fleet.risk`: the chance a job of N GPUs for H hours is interrupted, and its cost;
- :mod:`gpuhc.fleet.suspects`: nodes whose jobs end badly more often than their partition's
  (``sacct``, Fisher's exact test);
- :mod:`gpuhc.fleet.switches`: several nodes under one leaf switch failing the same check
  together, reported as one suspect-switch incident.

Nothing here runs on the health check's path; docs/repair.md explains the commands and the math.
"""
