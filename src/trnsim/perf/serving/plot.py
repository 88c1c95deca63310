"""`trnsim serve --simulate --plot`: p50/p99 TTFT and TPOT against request rate (matplotlib,
headless Agg; the `plot` extra). `require_matplotlib` is called before any work is done."""

from __future__ import annotations

from trnsim.errors import TrnsimError


def require_matplotlib():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise TrnsimError("--plot needs matplotlib: pip install 'trnsim[plot]'") from None
    return plt


def serving_plot(points: list[dict], path: str, title: str) -> None:
    plt = require_matplotlib()
    rates = [p["rate"] for p in points]
    fig, (ax_ttft, ax_tpot) = plt.subplots(1, 2, figsize=(11, 4.5))
    for ax, key, label in ((ax_ttft, "ttft_ms", "TTFT"), (ax_tpot, "tpot_ms", "TPOT")):
        for q, style in (("p50", "o-"), ("p99", "s--")):
            ax.plot(rates, [p[key][q] for p in points], style, label=f"{label} {q}")
        ax.set_xlabel("requests / s")
        ax.set_ylabel(f"{label} (ms)")
        ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
