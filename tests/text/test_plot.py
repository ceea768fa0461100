"""gpuhc/text/plot.py: the one figure every --png draws on (the sweep's chart, fleet stats)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gpuhc.errors import GpuhcError
from gpuhc.text.plot import new_figure, save_figure


def test_a_write_that_fails_still_frees_the_figure(tmp_path):
    plt, fig, ax = new_figure(4, 3)
    ax.plot([1, 2], [3, 4])
    target = tmp_path / "missing" / "x.png"
    with pytest.raises(GpuhcError, match=f"cannot write {target}: No such file or directory"):
        save_figure(plt, fig, str(target))
    assert fig.number not in plt.get_fignums()  # a long-running caller must not pile up figures


def test_a_saved_figure_is_a_png_of_the_asked_size(tmp_path):
    plt, fig, ax = new_figure(5, 2)
    ax.bar([0, 1], [1, 2])
    path = tmp_path / "x.png"
    save_figure(plt, fig, str(path))
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (5 * 120, 2 * 120)  # inches at the 120 dpi save_figure writes
    assert fig.number not in plt.get_fignums()


def test_importing_the_users_leaves_matplotlib_unloaded():
    """The fleet and sweep modules import this one at module level; matplotlib (optional, slow)
    must still load only when a figure is made."""
    code = ("import sys, gpuhc.text.plot, gpuhc.fleet.render, gpuhc.sweep.chart; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"
