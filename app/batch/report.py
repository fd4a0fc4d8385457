"""The sweep's summary PNG: fit quality against each swept setting, one colour per target (matplotlib).

    write_report("out/sweep/report.png", rows, {"lr": [0.01, 0.03], "seed": [0, 1]})

One panel per grid key with more than one value: every ok job as a dot at (its value, its
`chamfer`, log scale), and per target a line through the best job at each value. Rows that
failed or diverged are left out (the table lists them).
"""
from __future__ import annotations

from pathlib import Path

from engine.atomic import atomic_path


def write_report(path: str | Path, rows: list[dict], grid: dict[str, list]) -> None:
    """Write the summary PNG atomically (see the module docstring); a grid of one point plots its targets."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [key for key, values in grid.items() if len(values) > 1] or [None]
    ok = [row for row in rows if row["status"] == "ok"]
    targets = sorted({row["target"] for row in ok})
    figure, axes = plt.subplots(1, len(keys), figsize=(4.5 * len(keys), 4), squeeze=False)
    for axis, key in zip(axes[0], keys):
        values = grid[key] if key else [0]
        for i, target in enumerate(targets):
            mine = [row for row in ok if row["target"] == target]
            colour = f"C{i % 10}"
            axis.scatter([values.index(row[key]) if key else 0 for row in mine], [row["chamfer"] for row in mine],
                         color=colour, s=14, alpha=0.6)
            best = [(j, min(row["chamfer"] for row in mine if not key or row[key] == v)) for j, v in enumerate(values)
                    if any(not key or row[key] == v for row in mine)]
            axis.plot([j for j, _ in best], [c for _, c in best], color=colour, label=Path(target).stem)
        axis.set_xticks(range(len(values)), [f"{v:g}" if isinstance(v, float) else str(v) for v in values])
        axis.set_yscale("log")
        axis.set_xlabel(key or "")
        axis.set_ylabel("chamfer on fixed samples (lower is better)")
        axis.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    figure.suptitle(f"fit quality across the sweep: {len(ok)} ok jobs of {len(rows)}")
    figure.tight_layout()
    with atomic_path(path) as tmp:
        figure.savefig(tmp, dpi=100, format="png")
    plt.close(figure)
