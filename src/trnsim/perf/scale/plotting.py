"""A PNG of a layout search: each fitting layout's throughput against its cost per token."""

from __future__ import annotations

from trnsim.errors import InvalidArgumentError


def search_plot(result, path: str, title: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise InvalidArgumentError("--plot needs matplotlib (pip install 'trnsim[plot]')") \
            from None
    plans = result.plans
    if not plans:
        raise InvalidArgumentError("--plot: no layout fits, nothing to plot")
    fig, ax = plt.subplots(figsize=(8, 5))
    x = [p.tokens_per_s for p in plans]
    y = [p.mfu * 100 for p in plans]
    tp = [int(p.layout.split()[0][2:]) for p in plans]
    points = ax.scatter(x, y, c=tp, cmap="viridis", s=14)
    fig.colorbar(points, ax=ax, label="TP degree")
    best = plans[0]
    ax.annotate(f"best per $: {best.layout}, mb {best.micro_batch}",
                (best.tokens_per_s, best.mfu * 100), fontsize=8)
    ax.set_xlabel("tokens per second (whole job)")
    ax.set_ylabel("MFU %")
    ax.set_title(f"{title}: {len(plans)} fitting layouts of {result.evaluated}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
