"""The bench's pictures, drawn with matplotlib into PNG files (no display needed). Every
measured or predicted point carries its 95% interval over the rounds as an error bar."""

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


def _yerr(spreads: list) -> list[list[float]]:
    """Matplotlib's asymmetric error bars (below, above) from intervals; none where unknown."""
    below = [s.median - s.low if s.known else 0.0 for s in spreads]
    above = [s.high - s.median if s.known else 0.0 for s in spreads]
    return [below, above]


def speedup_plot(rows: list[dict], path: Path, title: str, worth_at: float) -> Path:
    """Measured speedup per strategy against world size, with 95% intervals; the ideal line
    (speedup = processes); one process (1×, the reference); the speedup from which
    distributing pays; and, where the plan has a model, the predicted speedup."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.4), dpi=100)
    sizes = sorted({r["world_size"] for r in rows})
    top = max(sizes)
    ax.plot([1, top], [1, top], linestyle="--", color="black", linewidth=1, label="ideal (speedup = processes)")
    ax.axhline(1.0, color="grey", linewidth=1, linestyle=":", label="one process (the reference)")
    ax.axhline(worth_at, color="#2a9d8f", linewidth=1, linestyle="-.", label=f"worth it from {worth_at:g}×")
    series: dict[str, list[dict]] = {}
    for r in rows:
        if not r["baseline"] and r.get("speedup") is not None:
            name = r["strategy"] + (f", lr {r['lr_scaling']}" if r["lr_scaling"] != "none" else "")
            series.setdefault(name, []).append(r)
    highest = [top, worth_at]
    for name, points in series.items():
        points.sort(key=lambda r: r["world_size"])
        measured = [r["speedup"] for r in points]
        bars = ax.errorbar([r["world_size"] for r in points], [s.median for s in measured], yerr=_yerr(measured),
                           marker="o", capsize=4, label=f"{name} measured (95% interval)")
        colour = bars.lines[0].get_color()
        predicted = [(r["world_size"], r["predicted_speedup"]) for r in points if r.get("predicted_speedup") is not None]
        if predicted:
            spreads = [p for _, p in predicted]
            ax.errorbar([n + 0.04 * top for n, _ in predicted], [p.median for p in spreads], yerr=_yerr(spreads),
                        marker="x", linestyle=":", capsize=3, color=colour, label=f"{name} predicted")
            highest += [p.high if p.known else p.median for p in spreads]
        for r, s in zip(points, measured):
            ax.annotate(f"{s.median:.2f}×", (r["world_size"], s.median), textcoords="offset points", xytext=(6, -12),
                        fontsize=8)
        highest += [s.high if s.known else s.median for s in measured]
    loops = [r for r in rows if r["baseline"] and r.get("speedup") is not None and not r.get("reference")]
    for r in loops:  # the plain threads-only loop, for comparison
        ax.errorbar([r["world_size"]], [r["speedup"].median], yerr=_yerr([r["speedup"]]), marker="s", color="grey",
                    capsize=4, linestyle="none", label=f"{r['label']} (95% interval)")
        highest.append(r["speedup"].high if r["speedup"].known else r["speedup"].median)
    ax.set_xticks(sizes)
    ax.set_xlabel("processes")
    ax.set_ylabel("speedup (samples/s ÷ one process's, per round)")
    ax.set_ylim(0, max(highest) * 1.1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    return _save(fig, ax, path, title)


def accuracy_plot(rows: list[dict], path: Path, title: str) -> Path:
    """Held-out accuracy per configuration (median over rounds, one seed per round, with its
    95% interval), with its effective batch and learning rate."""
    fig, ax = _bar_figure(rows)
    labels = [r["label"] for r in rows]
    spreads = [r.get("eval_accuracy") for r in rows]
    values = [s.median if s is not None else 0.0 for s in spreads]
    known = [s for s in spreads if s is not None]
    ax.barh(labels, values, color="#4878d0", xerr=_yerr(known) if len(known) == len(spreads) else None, capsize=4)
    for y, r in enumerate(rows):
        ax.text(values[y], y, f"  {values[y]:.3f}  (batch {r['global_batch_size']}, lr {r['lr']:.2g})",
                va="center", fontsize=8)
    ax.invert_yaxis()
    low = min(values)
    ax.set_xlim(max(0.0, low - (1 - low) * 2 - 0.02), 1.0 + (1 - low) * 0.8 + 0.02)
    ax.set_xticks([t for t in ax.get_xticks() if 0 <= t <= 1.0001])  # room for the labels, no ticks past 1
    ax.set_xlabel("held-out accuracy (axis does not start at 0)" if low > 0.1 else "held-out accuracy")
    return _save(fig, ax, path, title)


def breakdown_plot(rows: list[dict], path: Path, title: str) -> Path:
    """One stacked bar per configuration: where a step's time goes, in milliseconds (medians
    over the rounds), and the whole step's 95% interval as an error bar."""
    fig, ax = _bar_figure(rows)
    labels = [r["label"] for r in rows]
    left = [0.0] * len(rows)
    for part in PARTS:
        widths = [(r[part].median if r.get(part) is not None else 0.0) * 1e3 for r in rows]
        ax.barh(labels, widths, left=left, color=_PART_COLOURS[part], label=_PART_NAMES[part])
        left = [a + b for a, b in zip(left, widths)]
    steps = [r["step_s"] for r in rows]
    ax.errorbar([s.median * 1e3 for s in steps], range(len(rows)), xerr=[[v * 1e3 for v in side] for side in _yerr(steps)],
                fmt="|", color="black", capsize=4, label="whole step (95% interval)")
    for y, (total, r) in enumerate(zip(left, rows)):
        ax.text(max(total, steps[y].high * 1e3 if steps[y].known else 0.0), y,
                f"  {steps[y].median * 1e3:.1f} ms/step, {r['global_batch_size']} samples", va="center", fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("milliseconds per step (median)")
    ax.set_xlim(0, max([*left, *(s.high * 1e3 for s in steps if s.known)]) * 1.45)
    # Below the axes, in one row: inside them it would cover a bar or its label.
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=3, frameon=False)
    return _save(fig, ax, path, title)
