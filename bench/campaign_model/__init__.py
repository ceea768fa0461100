"""The long campaign (docs/campaign.md): gpuhc's own flows against a modelled Slurm on a
virtual clock, with faults injected at published rates. ``bench/campaign.py`` is its CLI."""
