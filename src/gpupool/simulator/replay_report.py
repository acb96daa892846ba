"""The replay's results for people: a terminal table and a PNG of allocation and fragmentation
over time."""

from __future__ import annotations

from pathlib import Path

from gpupool.simulator.replay_experiment import ReplayResult

_COLUMNS = (
    ("gpu_allocation_pct_mean", "alloc % (mean)"),
    ("gpu_held_pct_mean", "held % (mean)"),
    ("gpu_allocation_pct_peak", "alloc % (peak)"),
    ("queue_delay_s_p50", "delay p50 s"),
    ("queue_delay_s_p95", "delay p95 s"),
    ("queue_delay_s_p99", "delay p99 s"),
    ("reclaims", "reclaims"),
    ("reclaims_for_room", "  of them for room"),
    ("borrowed_gpu_hours", "borrowed GPU-h"),
    ("rejected", "rejected"),
    ("fragmentation_pct_peak", "frag % (peak)"),
    ("fragmentation_pct_mean", "frag % (mean)"),
    ("in_use_fragmentation_pct_peak", "frag % of cards in use (peak)"),
    ("defrag_moves", "defrag moves"),
    ("defrag_restart_gpu_hours", "  GPU-h lost to restarts"),
)


def table(result: ReplayResult) -> str:
    data = result.to_json()
    runs = data["runs"]
    assert isinstance(runs, dict)
    modes = list(runs)
    width = max(len(label) for _, label in _COLUMNS)
    lines = [
        f"replay: {result.pods} pods on {result.nodes} nodes / {result.gpus} GPUs "
        f"(cluster fraction {result.cluster_fraction:.3f}), arrivals / {result.time_scale:g}",
        f"{'':{width}}  " + "  ".join(f"{m:>23}" for m in modes),
    ]
    for key, label in _COLUMNS:
        cells = "  ".join(f"{runs[m][key]:>23}" for m in modes)
        lines.append(f"{label:{width}}  {cells}")
    return "\n".join(lines)


def plot(result: ReplayResult, path: str | Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, frag_ax) = plt.subplots(2, 1, figsize=(9, 8), sharex=True)
    capacity = max(1, result.gpus * 1000)
    for mode, stats in result.runs.items():
        if stats.timeline:
            times = [t for t, _, _ in stats.timeline]
            alloc = [100.0 * r / capacity for _, r, _ in stats.timeline]
            ax.step(times, alloc, where="post", label=mode, linewidth=1)
        if stats.fragmentation:
            times = [t for t, _, _ in stats.fragmentation]
            frag = [100.0 * f for _, f, _ in stats.fragmentation]
            line = frag_ax.step(times, frag, where="post", label=f"{mode}: pool", linewidth=1)
            in_use = [100.0 * u for _, _, u in stats.fragmentation]
            frag_ax.step(
                times,
                in_use,
                where="post",
                label=f"{mode}: cards in use",
                linewidth=1,
                linestyle="--",
                color=line[0].get_color(),
            )
    ax.set_ylabel("GPU capacity asked for by running pods (%)")
    ax.set_title("gpupool replay: allocation over time")
    ax.legend()
    frag_ax.set_xlabel("replay time (s, arrivals compressed)")
    frag_ax.set_ylabel("fragmentation (% of card memory)")
    frag_ax.set_title("fragmentation: free memory the common request sizes cannot use")
    frag_ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
