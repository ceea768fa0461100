"""gpuhc: GPU node health checks for Slurm clusters."""

__version__ = "0.1.0"


def build() -> str:
    """Which build this is, for ``gpuhc --version``: the commit install.sh stamped into the copy
    it built (gpuhc/_build.py), else the checkout's commit when run from one (an editable
    install), else "unknown build". A site tells its nodes' builds apart by this."""
    try:
        from gpuhc._build import BUILD  # type: ignore[import-not-found]

        return BUILD
    except ImportError:
        pass
    import os
    import subprocess

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        cp = subprocess.run(["git", "-C", here, "describe", "--always", "--dirty", "--abbrev=12"],
                            capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return "unknown build"
    return f"checkout {cp.stdout.strip()}" if cp.returncode == 0 and cp.stdout.strip() else "unknown build"
