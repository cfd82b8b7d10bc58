"""The cost terms of one process driving several devices itself: DataParallel's replicas (the
batch split over k devices, the parameters copied to the others and the gradients summed
back at the measured bus bandwidth), or the model split into consecutive parts, one per
device, taking turns on a CPU's one device and (on GPUs) passing activations between them.

A process that splits its model has the machine's every core when it is alone (mp), the
threads the scenario gives each process otherwise (each replica of DDP + model parallel)."""

from __future__ import annotations

from typing import Optional

from ...parallel.config import SPLIT
from .. import formulas as f
from ..machine import Machine
from ..probe import Probe
from ..scenario import compute_at, one_process_threads
from ..stages import stage_costs, stage_groups
from .memory import peak_bytes
from .pipeline import activation_transfers
from .registry import CostTerms, register
from .terms import Step, Terms


def devices_per_process(probe: Probe, machine: Machine, default_on_cpu: int) -> int:
    """--devices-per-process, else the GPUs visible; on a CPU `default_on_cpu` parts share it."""
    if machine.devices_per_process:
        return machine.devices_per_process
    if probe.device_type == "cuda":
        return max(1, machine.nproc_per_node)
    return default_on_cpu


def _threads(step: Step) -> int:
    return one_process_threads(step.probe, step.machine) if step.config.world_size == 1 and \
        step.config.data_parallel is None else step.s.threads


def _split(step: Step) -> Optional[Terms]:
    """K parts on K devices (the strategy's default is 1 micro-batch: none overlap). On GPUs the
    parts pass activations between them; on a CPU every part is on the same device, so the
    parts take turns. None where the model has fewer units than parts."""
    probe, s = step.probe, step.s
    parts = devices_per_process(probe, step.machine, default_on_cpu=2)
    groups = stage_groups(probe.block_params or tuple(probe.footprint.block_param_bytes), parts)
    if groups is None:
        return None
    threads = _threads(step)
    c = compute_at(probe, threads, s.oversubscription)
    costs = stage_costs(probe, c, groups, 1, threads=threads)
    on_cpu = probe.device_type != "cuda"
    transfer = 0.0 if on_cpu else activation_transfers(probe, s, parts, 1)
    note = f"{parts} parts on the one CPU take turns" if on_cpu else \
        f"{costs.describe()}; bubble {f.pipeline_bubble(parts, 1):.0%} of an even split"
    return Terms(compute_s=c.data_s + costs.busy_seconds(1, one_process=True), comm_s=transfer, exposed_s=transfer,
                 note=note)


def _replicate(step: Step) -> Terms:
    """DataParallel: one process, the batch split over its k devices; every step copies the
    parameters to the k-1 other devices and sums their gradients back onto the first, at the
    measured bus bandwidth. With one device (a CPU) it is one process's step."""
    probe, s = step.probe, step.s
    k = devices_per_process(probe, step.machine, default_on_cpu=1)
    c = compute_at(probe, one_process_threads(probe, step.machine))
    if k == 1:
        return Terms(compute_s=c.step_s, note="one device: DataParallel runs one replica")
    fp = probe.footprint
    moved = fp.param_bytes + fp.grad_bytes
    comm = moved / s.busbw(moved) + 2 * (k - 1) * s.alpha_s
    return Terms(compute_s=c.data_s + c.fb_s / k + c.optimizer_s, comm_s=comm, exposed_s=comm,
                 note=f"{k} devices, a replica on each")


def schedule(step: Step) -> Optional[Terms]:
    return _split(step) if step.config.local_devices == SPLIT else _replicate(step)


def memory_bytes(step: Step) -> float:
    """The process's peak as the composition counts it — except a model split over GPUs, whose
    largest part's device holds its share of the states and the activations in flight."""
    probe, config = step.probe, step.config
    if not (config.local_devices == SPLIT and probe.device_type == "cuda"):
        return peak_bytes(probe, config)
    fp = probe.footprint
    parts = devices_per_process(probe, step.machine, default_on_cpu=2)
    groups = stage_groups(probe.block_params or tuple(fp.block_param_bytes), parts)
    stage_bytes = max(sum(fp.block_param_bytes[i] for i in g) for g in groups)
    return f.memory_pipeline(stage_bytes, fp.param_bytes, fp.param_bytes, fp.grad_bytes, fp.optimizer_bytes,
                             fp.activation_bytes_per_sample * probe.batch_size, parts, 1)


COSTS = register(CostTerms("local_devices", schedule=schedule, memory_bytes=memory_bytes))
