"""gpuhc: GPU node health checks for Slurm clusters."""

__version__ = "0.1.0"
