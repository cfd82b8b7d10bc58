"""What `scaletrain plan` prints: what was measured, the predictions with their intervals,
the conclusions."""

from __future__ import annotations

import shlex

from dataclasses import dataclass
from typing import Optional

from rich.table import Table

from ..measure.console import table_console
from ..measure.spread import Spread
from .configuration import configuration
from .costs.data_parallel import fsdp_network_seconds
from .costs.tensor_parallel import machinery_seconds as tp_machinery_seconds
from .predict import Prediction
from .summary import key
from .probe import Probe
from .machine import Machine
from .verdict import gb


def interval_text(s: Spread | None, unit: str = "×") -> str:
    if s is None or not s.known:
        return ""
    return f"{s.low:.2f}–{s.high:.2f}{unit}"


@dataclass(frozen=True)
class WorkedOut:
    """What a plan's text shows that is worked out from the measurements, not measured: what
    the measured FSDP step across the hosts and tensor-parallel step took beyond the model's
    prediction of them, and which predictions' meshes say more than their process count."""
    fsdp_across_hosts_s: Optional[float] = None
    tp_machinery_s: Optional[float] = None
    composed: frozenset = frozenset()


def worked_out(probe: Probe, predictions: list[Prediction]) -> WorkedOut:
    """The plan works these out (planner.py), so that showing it computes nothing."""
    across = None
    if probe.network_fsdp_step is not None:
        across = fsdp_network_seconds(probe) * probe.footprint.param_bytes * (1 - 1 / probe.network_fsdp_step.world_size)
    composed = frozenset(key(p) for p in predictions
                         if (config := configuration(p.strategy, p.world_size, p.options)) is not None
                         and config.dims.composed)
    return WorkedOut(across, tp_machinery_seconds(probe) if probe.tp_step is not None else None, composed)


def measured_lines(probe: Probe, machine: Machine, steps: dict, rounds: int, worked: WorkedOut) -> list[str]:
    fp = probe.footprint
    parts = []
    for t, c in sorted(probe.compute.items(), reverse=True):
        s = steps.get(t)
        spread = f" ({s.low * 1e3:.1f}–{s.high * 1e3:.1f})" if s is not None and s.known else ""
        parts.append(f"{c.copies:.0f} process(es) × {t} thread(s) {c.step_s * 1e3:.1f} ms{spread}")
    lines = [f"step time of one process, batch {probe.batch_size}, without communication, median of {rounds} "
             f"round(s) (95% interval): {', '.join(parts)}",
             f"parameters {gb(fp.param_bytes)}, gradients {gb(fp.grad_bytes)}, optimizer state "
             f"{gb(fp.optimizer_bytes)}, activations {gb(fp.activation_bytes_per_sample * probe.batch_size)} per batch"]
    if probe.block_s:
        total = sum(probe.block_s)
        lines.append("forward + backward per top-level block: " +
                     ", ".join(f"{t * 1e3:.1f} ms ({t / total:.0%})" for t in probe.block_s))
    for ddp, where in ((probe.ddp_step, ""), (probe.network_ddp_step, " across the hosts")):
        if ddp is not None:
            lines.append(f"DDP step with its all-reduce{where}, {ddp.world_size} process(es) × {ddp.threads} thread(s): "
                         f"{ddp.step_s * 1e3:.1f} ms, {ddp.local_step_s * 1e3:.1f} ms without it in the same job: "
                         f"the all-reduce costs {ddp.exposed_comm_s * 1e3:.1f} ms inside a step")
    if probe.network_fsdp_step is not None:
        step, beyond = probe.network_fsdp_step, worked.fsdp_across_hosts_s
        lines.append(f"FSDP step across the hosts, {step.world_size} process(es) × {step.threads} thread(s): "
                     f"{step.step_s * 1e3:.1f} ms, of which {beyond * 1e3:.1f} ms (for a process with a core of its "
                     "own) beyond the prediction from its collectives timed alone (added, for the bytes each process "
                     "gathers across the machines, to every FSDP configuration sharded across them)")
    link = probe.link
    if link is not None:
        lines.append(f"all_reduce: bus bandwidth {link.busbw / 1e9:.2f} GB/s, latency {link.alpha_s * 1e6:.0f} µs "
                     f"per ring step ({link.source})" + _beyond_a_ring(link))
    if probe.fsdp_overhead_s > 0:
        lines.append(f"FSDP's own cost per step on one process (gathers, copies, DTensors): "
                     f"{probe.fsdp_overhead_s * 1e3:.1f} ms")
    if probe.tp_overhead_s > 0:
        lines.append(f"tensor parallel's own cost per step on one process (DTensor dispatch): "
                     f"{probe.tp_overhead_s * 1e3:.1f} ms")
    if probe.tp_step is not None:
        crowded = probe.tp_step.world_size / probe.cores if probe.tp_step.world_size > probe.cores else 1.0
        per_core = (f" for a process with a core of its own ({crowded:g}× that in this job of "
                    f"{probe.tp_step.world_size} processes on {probe.cores} core(s))") if crowded > 1 else ""
        lines.append(f"tensor-parallel step across {probe.tp_step.world_size} process(es) × {probe.tp_step.threads} "
                     f"thread(s): {probe.tp_step.step_s * 1e3:.1f} ms, of which {worked.tp_machinery_s * 1e3:.1f} "
                     f"ms beyond the arithmetic's share and the all-reduces{per_core} (added to every tensor-parallel "
                     "configuration)")
    network = probe.network.fitted() if probe.network is not None else None
    between = (f"between machines (measured: {network.source}) {network.busbw * 8 / 1e9:.2f} Gbit/s bus bandwidth, "
               f"{network.alpha_s * 1e6:.0f} µs per ring step{_beyond_a_ring(network)}" if network is not None else
               f"between machines {machine.link_gbps:g} Gbit/s, {machine.link_latency_s * 1e6:.0f} µs "
               "(--link-gbps, --link-latency-us)")
    lines.append(f"machines like this one: {machine.nproc_per_node} process(es) each on {machine.cores} core(s); "
                 f"{between}; overlap {machine.overlap:g}")
    return lines


def prediction_table(predictions: list[Prediction], spreads: dict, composed: frozenset,
                     title: str = "predicted") -> Table:
    table = Table(title=title, title_justify="left")
    for column in ("strategy", "procs", "nodes", "threads", "step ms", "comm ms", "samples/s", "speedup",
                   "95% interval", "efficiency", "memory/device", "fits"):
        table.add_column(column, justify="left" if column == "strategy" else "right")
    for p in predictions:
        spread = spreads.get(key(p))
        table.add_row(p.strategy + (f" ({p.mesh})" if key(p) in composed else ""), str(p.world_size), str(p.nodes), str(p.threads), f"{p.step_s * 1e3:.1f}",
                      f"{p.exposed_comm_s * 1e3:.1f}", f"{p.samples_per_s:,.0f}", f"{p.speedup:.2f}×",
                      interval_text(spread), f"{p.efficiency:.0%}", gb(p.memory_bytes), "yes" if p.fits else "NO")
    return table


def show_plan(plan) -> None:
    """A plan's measurements, its predictions with their intervals, its conclusions."""
    _print(plan.probe, plan.machine, plan.predictions, plan.spreads, plan.step_spreads, len(plan.probes),
           plan.conclusions, plan.worked_out)


def show_choice(plan, command: list[str]) -> None:
    """A choice in words, and the command that trains it (`train_command`)."""
    for line in plan.lines():
        print(line)
    if plan.choice.chosen:
        print(f"Train with it: {shlex.join(command)}")


def train_command(plan, training, process_flags: list[str]) -> list[str]:
    """`scaletrain train` that trains what was planned: the model and data, the batch per
    process, the sequence length and seed measured, on the processes chosen, with the
    allocator and memory mode the plan measured under (`process_flags`). Every model flag is
    given, as plan's default workload is not train's."""
    if plan.choice is None or plan.choice.chosen is None:
        return []
    named = [("--workload", training.workload), ("--model", training.model), ("--dataset", training.dataset),
             ("--seq-len", training.seq_len), ("--batch-size", training.batch_size),
             ("--seed", training.seed or None)]
    return ["scaletrain", "train", *(w for flag, value in named if value is not None for w in (flag, str(value))),
            "--nproc-per-node", str(plan.choice.chosen.world_size), *process_flags, *plan.choice.flags()]


def print_plan(probe: Probe, machine: Machine, predictions: list[Prediction], spreads: dict, steps: dict,
               rounds: int, conclusions: list[str]) -> None:
    _print(probe, machine, predictions, spreads, steps, rounds, conclusions, worked_out(probe, predictions))


def _print(probe: Probe, machine: Machine, predictions: list[Prediction], spreads: dict, steps: dict, rounds: int,
           conclusions: list[str], worked: WorkedOut) -> None:
    console = table_console()
    console.print(f"plan for {probe.workload} on {probe.device_type}")
    for line in measured_lines(probe, machine, steps, rounds, worked):
        console.print(f"  measured: {line}", soft_wrap=True)
    console.print(prediction_table(predictions, spreads, worked.composed))
    notes = [f"  {p.strategy} ×{p.world_size}: {p.note}" for p in predictions if p.note]
    for line in notes:
        console.print(line, soft_wrap=True)
    for line in conclusions:
        console.print(line, soft_wrap=True)


def _beyond_a_ring(link) -> str:
    """all_gather's and reduce_scatter's measured times against a ring's, where measured."""
    if link.gather_ratio == 1.0 and link.scatter_ratio == 1.0:
        return ""
    return (f"; all_gather takes {link.gather_ratio:.1f}×, reduce_scatter {link.scatter_ratio:.1f}× "
            "a ring's time (FSDP's collectives)")
