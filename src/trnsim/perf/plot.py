"""`trnsim bench --plot`: grouped bars of latency and cost per inference, published values marked.

matplotlib is imported only here (install it with the `plot` extra); the figure is rendered
headless (Agg) to a PNG.
"""

from __future__ import annotations

from trnsim.errors import TrnsimError

# The README gives the same command (`pip install '.[plot]'`); tests check that they agree.
INSTALL_HINT = "pip install '.[plot]'"


def require_matplotlib():
    """matplotlib.pyplot (headless), or an error naming the extra that installs it; commands
    call this before their work so that a missing extra costs nothing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise TrnsimError(f"--plot needs matplotlib, which is not installed: {INSTALL_HINT} "
                          "(from trnsim's source folder) or pip install matplotlib") from None
    return plt


def bench_plot(results, instances, path: str) -> dict:
    """Write the chart; returns what it drew (for tests and --json users)."""
    plt = require_matplotlib()
    cases = []
    for r in results:
        key = (r.model, r.batch, r.seq)
        if key not in cases:
            cases.append(key)
    by = {(r.model, r.batch, r.seq, r.instance): r for r in results}
    width = 0.8 / max(len(instances), 1)
    fig, (ax_lat, ax_cost) = plt.subplots(1, 2, figsize=(13, 5))
    xs = range(len(cases))
    for i, inst in enumerate(instances):
        offs = [x - 0.4 + width * (i + 0.5) for x in xs]
        lat = [by[(*c, inst)].latency_ms if (*c, inst) in by else 0.0 for c in cases]
        cost = [(by[(*c, inst)].cost_per_inference_usd or 0.0) * 1e6 if (*c, inst) in by else 0.0
                for c in cases]
        ax_lat.bar(offs, lat, width, label=inst)
        ax_cost.bar(offs, cost, width, label=inst)
        published = [(o, by[(*c, inst)].published_ms) for o, c in zip(offs, cases, strict=True)
                     if (*c, inst) in by and by[(*c, inst)].published_ms is not None]
        if published:
            ax_lat.scatter([p[0] for p in published], [p[1] for p in published], marker="_",
                           s=400, color="black", zorder=3,
                           label="published" if i == len(instances) - 1 else None)
    decode = any(r.decode for r in results)
    labels = [f"{m.split('-')[0]}\nb{b} {'ctx' if decode else 's'}{s}" for m, b, s in cases]
    unit = "token" if decode else "inference"
    for ax, title in ((ax_lat, "latency per token (ms)" if decode else "latency (ms)"),
                      (ax_cost, f"cost per million {unit}s ($)")):
        ax.set_xticks(list(xs))
        ax.set_xticklabels(labels)
        ax.set_title(title)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, format="png")
    drawn = {"path": path, "axes": [_drawn(ax) for ax in (ax_lat, ax_cost)]}
    plt.close(fig)
    return drawn


def _drawn(ax) -> dict:
    """What an axis shows, read back from its artists: bar heights and published marks."""
    published = [float(y) for collection in ax.collections for _, y in collection.get_offsets()]
    return {"title": ax.get_title(), "bars": [float(p.get_height()) for p in ax.patches],
            "published": published}
