"""bench --plot: % of roofline per row, one panel per table (needs matplotlib: mxlogits[bench])."""

from __future__ import annotations

from pathlib import Path


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tables: dict[str, list[dict]] = {}
    for r in results:
        tables.setdefault(r["table"], []).append(r)
    # Each panel as tall as its rows plus its title and axis, so a 17-row table's labels do not overlap.
    heights = [len(mine) + 2.5 for mine in tables.values()]
    fig, axes = plt.subplots(len(tables), 1, figsize=(10, 0.3 * sum(heights)), squeeze=False,
                             gridspec_kw={"height_ratios": heights})  # fmt: skip
    for ax, (table, mine) in zip(axes[:, 0], tables.items()):
        ax.barh([r["shape"] for r in mine], [r["roofline_pct"] for r in mine])
        ax.invert_yaxis()
        ax.set_title(f"{table} ({mine[0]['variant']})", fontsize=9)
        ax.set_xlim(0, 1.05 * max(100, *(r["roofline_pct"] for r in mine)))  # 100% is the same place in each
        ax.set_xlabel("% of roofline")
        ax.tick_params(labelsize=7)
    fig.tight_layout()
    fig.savefig(path)
