"""Everything gpuhc knows about Slurm.

``nodes`` and ``nodes_json`` read what Slurm says about nodes (every text and JSON spelling since
17.11) into one :class:`gpuhc.slurm.read.nodes.Node`; ``report`` groups those nodes for
``gpuhc drain-report``. The drain policy and the one module that runs ``scontrol`` live next to
them. Nothing is imported here so that ``import gpuhc.slurm.read.nodes`` stays cheap on the nodes.
"""
