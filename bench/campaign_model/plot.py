"""The campaign's timeline: nodes in service, drained, in repair and retired, faults marked."""

from __future__ import annotations


def timeline(c, path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = c.samples[0][0]
    days = [(t - t0) / 86400.0 for t, _ in c.samples]
    keys = ("in service", "drained", "in repair", "retired")
    colors = ("#4c9a5a", "#e0a030", "#4a78c0", "#b03030")
    fig, (top, low) = plt.subplots(2, 1, figsize=(11, 5.5), sharex=True, gridspec_kw={"height_ratios": [1, 3]})
    low.stackplot(days, *[[s[k] for _, s in c.samples] for k in keys], labels=keys, colors=colors, step="post")
    low.set_ylim(len(c.names) * 0.8, len(c.names))
    low.set_ylabel("nodes")
    low.set_xlabel("day")
    low.legend(loc="lower left", fontsize=8, ncol=4)
    for f in c.faults:
        y = 1 if f.cls.app else (2 if not f.permanent else 3)
        top.plot((f.start - t0) / 86400.0, y, "x" if f.cls.app else "o", color="#555" if f.cls.app else
                 ("#b03030" if f.permanent else "#e07020"), markersize=4)
    top.set_yticks([1, 2, 3], ["app", "hardware", "lemon"], fontsize=8)
    top.set_ylim(0.5, 3.5)
    top.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
