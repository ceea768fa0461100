"""One off-screen matplotlib figure for every ``--png`` (the sweep's busbw chart, ``gpuhc fleet
stats``): made, laid out, written and freed the same way, whoever draws on it.

matplotlib is optional (``pip install 'gpuhc[plot]'``) and slow to import, so it is imported
when a figure is asked for, never by importing this module.
"""

from __future__ import annotations

from gpuhc.errors import GpuhcError


def new_figure(width: float, height: float = 4.5):
    """(pyplot, figure, axes) drawn off-screen; a usage error when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display on a login or compute node
        import matplotlib.pyplot as plt
    except ImportError:
        raise GpuhcError("--png needs matplotlib: pip install 'gpuhc[plot]'") from None
    fig, ax = plt.subplots(figsize=(width, height))
    return plt, fig, ax


def save_figure(plt, fig, path: str) -> None:
    """Lay out, write ``path`` and free the figure; an unwritable path is the user's error."""
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=120)
    except OSError as e:
        raise GpuhcError(f"cannot write {path}: {e.strerror}") from None
    finally:
        plt.close(fig)
