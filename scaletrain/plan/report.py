"""What `scaletrain plan` prints: what was measured, the predictions, the conclusions."""

from __future__ import annotations


from ..measure.console import table_console
from rich.table import Table

from .predict import Options, Prediction
from .probe import Probe
from .verdict import gb


def measured_lines(probe: Probe, options: Options) -> list[str]:
    fp = probe.footprint
    steps = ", ".join(f"{t} thread(s) {s * 1e3:.1f} ms" for t, s in sorted(probe.step_s.items(), reverse=True))
    link = probe.link
    return [
        f"one process, batch {probe.batch_size}, step time: {steps}",
        f"parameters {gb(fp.param_bytes)}, gradients {gb(fp.grad_bytes)}, optimizer state {gb(fp.optimizer_bytes)}, "
        f"activations {gb(fp.activation_bytes_per_sample * probe.batch_size)} per batch",
        f"all_reduce: bus bandwidth {link.busbw / 1e9:.2f} GB/s, latency {link.alpha_s * 1e6:.0f} µs per ring step "
        f"({link.source})",
        f"machines like this one: {options.procs_per_node} process(es) each on {options.cores} core(s); "
        f"between machines {options.link_gbps:g} Gbit/s, {options.link_latency_s * 1e6:.0f} µs (--link-gbps, "
        f"--link-latency-us); overlap {options.overlap:g}",
    ]


def prediction_table(predictions: list[Prediction], title: str = "predicted") -> Table:
    table = Table(title=title, title_justify="left")
    for column in ("strategy", "procs", "nodes", "threads", "step ms", "comm ms", "samples/s", "speedup",
                   "efficiency", "memory/device", "fits"):
        table.add_column(column, justify="left" if column == "strategy" else "right")
    for p in predictions:
        table.add_row(p.strategy, str(p.world_size), str(p.nodes), str(p.threads), f"{p.step_s * 1e3:.1f}",
                      f"{p.exposed_comm_s * 1e3:.1f}", f"{p.samples_per_s:,.0f}", f"{p.speedup:.2f}×",
                      f"{p.efficiency:.0%}", gb(p.memory_bytes), "yes" if p.fits else "NO")
    return table


def print_plan(probe: Probe, options: Options, predictions: list[Prediction], conclusions: list[str]) -> None:
    console = table_console()
    console.print(f"plan for {probe.workload} on {probe.device_type}")
    for line in measured_lines(probe, options):
        console.print(f"  measured: {line}", soft_wrap=True)
    console.print(prediction_table(predictions))
    for line in conclusions:
        console.print(line, soft_wrap=True)
