"""The bench's pictures, drawn with matplotlib into PNG files (no display needed)."""

from __future__ import annotations

from pathlib import Path

from ..measure.steps import PARTS

SPEEDUP_PNG, BREAKDOWN_PNG, ACCURACY_PNG = "speedup.png", "breakdown.png", "accuracy.png"
_PART_NAMES = {"compute_s": "forward+backward", "exposed_comm_s": "exposed communication", "data_s": "data loading",
               "optimizer_s": "optimizer", "idle_s": "idle"}
_PART_COLOURS = {"compute_s": "#4878d0", "exposed_comm_s": "#d65f5f", "data_s": "#ee854a",
                 "optimizer_s": "#6acc64", "idle_s": "#b0b0b0"}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only: works without a display
    import matplotlib.pyplot as plt

    return plt


def _bar_figure(rows: list[dict]):
    """A figure with one horizontal bar row per configuration, tall enough for all."""
    return _pyplot().subplots(figsize=(7.2, 0.6 * len(rows) + 2.1), dpi=100)


def _save(fig, ax, path: Path, title: str) -> Path:
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    _pyplot().close(fig)
    return path


def speedup_plot(rows: list[dict], path: Path, title: str) -> Path:
    """Measured speedup per strategy against world size, the ideal line (speedup = processes),
    the threads-only baseline (1×) and, where the plan has a model, the predicted speedup."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.4), dpi=100)
    sizes = sorted({r["nproc"] for r in rows})
    top = max(sizes)
    ax.plot([1, top], [1, top], linestyle="--", color="black", linewidth=1, label="ideal (speedup = processes)")
    ax.axhline(1.0, color="grey", linewidth=1, linestyle=":", label="threads-only baseline (1 process, all cores)")
    series: dict[str, list[dict]] = {}
    for r in rows:
        if not r["baseline"]:
            name = r["strategy"] + (f", lr {r['lr_scaling']}" if r["lr_scaling"] != "none" else "")
            series.setdefault(name, []).append(r)
    for name, points in series.items():
        points.sort(key=lambda r: r["nproc"])
        line, = ax.plot([r["nproc"] for r in points], [r["speedup"] for r in points], marker="o",
                        label=f"{name} measured")
        predicted = [(r["nproc"], r["predicted_speedup"]) for r in points if r.get("predicted_speedup") is not None]
        if predicted:
            ax.plot(*zip(*predicted), marker="x", linestyle=":", color=line.get_color(), label=f"{name} predicted")
        for r in points:
            ax.annotate(f"{r['speedup']:.2f}×", (r["nproc"], r["speedup"]), textcoords="offset points",
                        xytext=(6, -12), fontsize=8)
    ax.set_xticks(sizes)
    ax.set_xlabel("processes")
    ax.set_ylabel("speedup (samples/s ÷ baseline samples/s)")
    highest = max([top, *(r["speedup"] for r in rows), *(r.get("predicted_speedup") or 0 for r in rows)])
    ax.set_ylim(0, highest * 1.1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    return _save(fig, ax, path, title)


def accuracy_plot(rows: list[dict], path: Path, title: str) -> Path:
    """Held-out accuracy per configuration, with its effective batch and learning rate."""
    fig, ax = _bar_figure(rows)
    labels = [r["label"] for r in rows]
    values = [r.get("eval_accuracy", 0.0) for r in rows]
    ax.barh(labels, values, color="#4878d0")
    for y, r in enumerate(rows):
        ax.text(values[y], y, f" {values[y]:.3f}  (batch {r['global_batch_size']}, lr {r['lr']:.2g})",
                va="center", fontsize=8)
    ax.invert_yaxis()
    low = min(values)
    ax.set_xlim(max(0.0, low - (1 - low) * 2 - 0.02), 1.0 + (1 - low) * 0.8 + 0.02)
    ax.set_xticks([t for t in ax.get_xticks() if 0 <= t <= 1.0001])  # room for the labels, no ticks past 1
    ax.set_xlabel("held-out accuracy (axis does not start at 0)" if low > 0.1 else "held-out accuracy")
    return _save(fig, ax, path, title)


def breakdown_plot(rows: list[dict], path: Path, title: str) -> Path:
    """One stacked bar per configuration: where a step's time goes, in milliseconds."""
    fig, ax = _bar_figure(rows)
    labels = [r["label"] for r in rows]
    left = [0.0] * len(rows)
    for part in PARTS:
        widths = [(r.get(part) or 0.0) * 1e3 for r in rows]
        ax.barh(labels, widths, left=left, color=_PART_COLOURS[part], label=_PART_NAMES[part])
        left = [a + b for a, b in zip(left, widths)]
    for y, (total, r) in enumerate(zip(left, rows)):
        ax.text(total, y, f" {r['step_s'] * 1e3:.1f} ms/step, {r['global_batch_size']} samples",
                va="center", fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("milliseconds per step (median)")
    ax.set_xlim(0, max(left) * 1.45)
    # Below the axes, in one row: inside them it would cover a bar or its label.
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=len(PARTS), frameon=False)
    return _save(fig, ax, path, title)
