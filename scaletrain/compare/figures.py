"""The runs' curves as PNG files: each figure has a panel against training steps and one
against wall time, one line per run (several runs on one figure compare them)."""

from __future__ import annotations

from pathlib import Path

from .runs import RunRecord

#: file -> (title, y label, [(records, key, line style, what)])
FIGURES = {
    "loss.png": ("Loss", "loss (cross-entropy)",
                 [("steps", "train_loss", "-", "training"), ("epochs", "eval_loss", "--o", "held-out")]),
    "heldout.png": ("Held-out accuracy", "held-out accuracy", [("epochs", "eval_accuracy", "-o", "")]),
    "throughput.png": ("Training throughput", "samples/s (all processes)",
                       [("steps", "samples_per_second", "-", "")]),
}
X_AXES = (("step", "training step"), ("wall_seconds", "wall time (s)"))


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only: works without a display
    import matplotlib.pyplot as plt

    return plt


def draw(runs: list[RunRecord], out: Path) -> list[Path]:
    plt = _pyplot()
    written = []
    for name, (title, ylabel, lines) in FIGURES.items():
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), dpi=100)
        for ax, (x, xlabel) in zip(axes, X_AXES):
            for number, run in enumerate(runs):
                colour = f"C{number % 10}"
                for records, key, style, what in lines:
                    xs, ys = run.series(getattr(run, records), key, x)
                    if xs:
                        label = f"{run.label}, {what}" if what else run.label
                        ax.plot(xs, ys, style, color=colour, label=label, linewidth=1.4, markersize=4)
            ax.set_xlabel(xlabel)
            ax.set_ylabel(ylabel)
            ax.grid(True, alpha=0.3)
        handles, labels = axes[0].get_legend_handles_labels()
        if handles:  # one legend for both panels, below them
            fig.legend(handles, labels, loc="lower center", ncol=min(2, len(labels)), fontsize=8, frameon=False)
        fig.suptitle(f"{title}: {len(runs)} run(s)", fontsize=11)
        rows = (len(labels) + 1) // 2 if handles else 0
        fig.tight_layout(rect=(0, min(0.06 * rows + 0.02, 0.45), 1, 1))
        path = Path(out) / name
        fig.savefig(path)
        plt.close(fig)
        written.append(path)
    return written
