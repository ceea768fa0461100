"""Exporters: where a finished run's report goes besides the terminal.

This is the actions layer's quiet half (the loud half drains nodes in :mod:`gpuhc.slurm`): it
writes files and nothing else, and it never decides anything. Two writers:

- :mod:`gpuhc.export.eventlog` appends one JSON line per run to a local event log, for log
  shippers and for ``gpuhc drain-report``;
- :mod:`gpuhc.export.prometheus` writes a node_exporter textfile-collector file per stage.

Both take the plain ``RunReport.to_dict()`` shape, not the objects, so a sweep or a replay can
feed them too. A full disk must not change a health verdict: failures come back as one-line
messages for the caller to log. Nothing is imported here, so ``import gpuhc.export.eventlog``
stays cheap; the textfile is written without prometheus_client (see its module).
"""
