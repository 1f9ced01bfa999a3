"""The benchmark's figures. The dense grid: TFLOP/s against sequence length, one panel per (head
dim or GQA group, causal mode), one line per backend. The decode grid (--decode): effective
bandwidth against cache length, one panel per (batch, heads, new tokens), one line per runner and
cache layout, replayed from a CUDA graph solid and eager dashed."""
from __future__ import annotations

from typing import List

from ._bench_decode import base_name, graph_name


def panel_key(row: dict) -> str:
    if row["H"] != row["KVH"]:
        return f"GQA {row['H']}/{row['KVH']} d{row['hd']}"
    return f"d{row['hd']}"


def seqlen_label(n: int) -> str:
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


def log2_lengths_axis(ax, lengths) -> None:
    """A log2 x axis ticked at the lengths plotted, labelled 1k, 16k, ..."""
    ax.set_xscale("log", base=2)
    lengths = sorted(set(lengths))
    if lengths:
        ax.set_xticks(lengths)
        ax.set_xticklabels([seqlen_label(x) for x in lengths], fontsize=8)
        ax.minorticks_off()


def legend_entries(axes):
    """(handles, labels) of every panel's lines, each label once: one legend for the figure."""
    handles, labels = [], []
    for ax in axes.flat:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            if label not in labels:
                handles.append(handle)
                labels.append(label)
    return handles, labels


def plot(rows: List[dict], backends: List[str], path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only; no display on the GPU machine
    import matplotlib.pyplot as plt

    groups = list(dict.fromkeys(panel_key(r) for r in rows))
    modes = [m for m in (False, True) if any(r["causal"] == m for r in rows)]
    fig, axes = plt.subplots(len(modes), len(groups), figsize=(4.2 * len(groups), 3.4 * len(modes)),
                             squeeze=False, sharey=True)
    for i, causal in enumerate(modes):
        for j, group in enumerate(groups):
            ax = axes[i][j]
            cells = sorted((r for r in rows if r["causal"] == causal and panel_key(r) == group),
                           key=lambda r: r["L"])
            for name in backends:
                points = [(r["L"], r[name]) for r in cells if r.get(name) is not None]
                if points:
                    xs, ys = zip(*points)
                    ax.plot(xs, ys, marker="o", markersize=3, label=name)
            log2_lengths_axis(ax, [r["L"] for r in cells])
            ax.set_title(f"{group}, {'causal' if causal else 'non-causal'}", fontsize=9)
            ax.set_xlabel("seqlen")
            if j == 0:
                ax.set_ylabel("TFLOP/s")
            ax.grid(True, alpha=0.3)
    handles, labels = legend_entries(axes)
    fig.legend(handles, labels, loc="upper center", ncol=len(labels), fontsize=8,
               bbox_to_anchor=(0.5, 1.0))
    fig.suptitle(title, fontsize=9, y=1.04)
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def plot_decode(rows: List[dict], runners: List[str], path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in rows if "skipped" not in r]
    batches = sorted({r["batch"] for r in rows})
    groups = list(dict.fromkeys((r["heads"], r["kv_heads"], r["new"]) for r in rows))
    layouts = list(dict.fromkeys(r["layout"] for r in rows))
    fig, axes = plt.subplots(max(1, len(batches)), max(1, len(groups)),
                             figsize=(4.2 * max(1, len(groups)), 3.2 * max(1, len(batches))),
                             squeeze=False, sharey=True)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    series = [(name, layout) for name in dict.fromkeys(base_name(n)[0] for n in runners)
              for layout in layouts]
    for i, batch in enumerate(batches):
        for j, (h, hk, new) in enumerate(groups):
            ax = axes[i][j]
            cells = sorted((r for r in rows if r["batch"] == batch and
                            (r["heads"], r["kv_heads"], r["new"]) == (h, hk, new)),
                           key=lambda r: r["cache_len"])
            for s, (name, layout) in enumerate(series):
                for runner in (graph_name(name), name):
                    if runner not in runners:
                        continue
                    points = [(r["cache_len"], r["tbs"][runner]) for r in cells
                              if r["layout"] == layout and runner in r["tbs"]]
                    if points:
                        xs, ys = zip(*points)
                        ax.plot(xs, ys, marker="o", markersize=3, color=colors[s % len(colors)],
                                linestyle="-" if runner != name else "--",
                                linewidth=1.2 if runner != name else 0.8,
                                label=f"{runner} {layout}")
            log2_lengths_axis(ax, [r["cache_len"] for r in cells])
            ax.set_title(f"batch {batch}, heads {h}/{hk}, {new} new", fontsize=9)
            ax.set_xlabel("cache length")
            if j == 0:
                ax.set_ylabel("TB/s (K + V read)")
            ax.grid(True, alpha=0.3)
    handles, labels = legend_entries(axes)
    fig.legend(handles, labels, loc="upper center", ncol=min(4, max(1, len(labels))),
               fontsize=7, bbox_to_anchor=(0.5, 1.0))
    fig.suptitle(title, fontsize=9, y=1.06)
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
