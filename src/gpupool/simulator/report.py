"""Outputs of a fill experiment: a terminal table, JSON, and a plot."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from gpupool.simulator.experiment import curve_on_grid

COLUMNS = (
    ("unallocated_gpu_pct_100", "unalloc GPU % @100%"),
    ("unallocated_gpu_pct_130", "unalloc GPU % @130%"),
    ("frag_rate_pct_80", "frag rate % @80%"),
    ("frag_amount_pct_80", "frag amount % @80%"),
)


def table(results: Mapping[str, Mapping[str, Any]], title: str) -> Table:
    out = Table(title=title)
    out.add_column("policy")
    for _, label in COLUMNS:
        out.add_column(label, justify="right")
    ranked = sorted(results.items(), key=lambda kv: kv[1]["unallocated_gpu_pct_100"])
    for policy, agg in ranked:
        cells = []
        for key, _ in COLUMNS:
            value, std = agg.get(key), agg.get(f"{key}_std")
            if value is None:
                cells.append("n/a")
                continue
            cells.append(f"{value:.2f}" + (f" ± {std:.2f}" if std else ""))
        out.add_row(policy, *cells)
    return out


def print_table(results: Mapping[str, Mapping[str, Any]], title: str, console: Console) -> None:
    console.print(table(results, title))


def write_json(
    results: Mapping[str, Mapping[str, Any]], path: Path, meta: Mapping[str, Any]
) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"results": results, **meta}, indent=1) + "\n")


def write_plot(results: Mapping[str, Mapping[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grid = np.linspace(0, 130, 261)
    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    for policy, agg in sorted(results.items(), key=lambda kv: kv[1]["unallocated_gpu_pct_100"]):
        mean = curve_on_grid(agg["runs"], grid)
        label = f"{policy} ({agg['unallocated_gpu_pct_100']:.2f}% unallocated @100%)"
        ax.plot(grid, mean, label=label, linewidth=1.4)
    ax.plot([0, 100], [0, 100], color="grey", linestyle=":", linewidth=1, label="everything fits")
    ax.set_xlabel("arrived GPU load (% of cluster GPU capacity)")
    ax.set_ylabel("GPU allocation ratio (%)")
    ax.set_title(title)
    ax.set_xlim(0, 130)
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
