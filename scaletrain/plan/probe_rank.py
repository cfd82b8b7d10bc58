"""One round of the plan's measurements, as one rank of a job of n processes on this machine.

The job runs what a DDP job of n processes runs — the same launcher, the same core pinning,
threads, optimizer, loader and DDP wrapper. On several processes its steps come in blocks of
two kinds, in turn: "local" steps, whose hook does only the local part of DDP's all-reduce
(dividing each bucket by the world size), and real DDP steps with the all-reduce. The local
steps give a rank's computation as it will be in the real job, next to its neighbours, minus
the communication; the real steps give what the all-reduce costs inside a step — the
collective plus the ranks waiting for each other, which the all-reduce timed alone does not
show (for a step of a few milliseconds that is most of it). A synchronous step waits for
the slowest rank, so each kind's step time is, step by step, the slowest rank's, and (as in
bench) the mean over the steps: what training gets, hiccups included. Then the same
processes time the all-reduce alone, for a small message (latency) and for each of DDP's
gradient buckets (bandwidth): the model for the process counts and links not measured.

On one process the job also counts the model's bytes and times each top-level block
(forward + backward) at the pipeline's micro-batch size and at the whole batch. Across the
hosts of `--hosts` (`steps_only`) it times the steps alone — DDP's as above, then FSDP's —
and the links in jobs of their own.
"""

from __future__ import annotations

import statistics
from typing import Optional

import torch
import torch.distributed as dist

from ..data.batches import split
from ..measure.clock import Clock
from ..measure.footprint import block_bytes
from ..measure.steps import NOSYNC, SYNC, forever, steps_to_measure, timed_steps
from ..memory.allocator import described as described_allocator, purge_delay, return_freed_at_once
from ..parallel.tensor_parallel import declared_plan
from ..train.optimizer import adam
from .overheads import fsdp_step_seconds, same_batches, tp_step_seconds
from .costs.registry import ProbeContext, measured
from .probe_link import FSDP_OPS
from .probe_model_facts import model_facts

#: Steps whose DDP hook skips the all-reduce (the computation alone).
LOCAL = "local"

#: Local and real DDP steps alternate in blocks of this many, so that both see the same load;
#: the first step of a block is left out of both (it absorbs the switch: ranks that drifted
#: apart during local steps wait for each other at the first all-reduce).
BLOCK_STEPS = 10

#: The small message whose all-reduce gives the latency α.
LATENCY_BYTES = 4096

#: Each message size is timed for about this long (at most LINK_ITERS calls, at least 3):
#: a fixed ten calls of a millisecond each moved the latency by ×3 between rounds on a
#: 2-core machine (one scheduler hiccup is a large part of 10 ms), and a small model's
#: predicted communication with it.
LINK_SECONDS_PER_SIZE = 0.25
LINK_ITERS = 200

#: FSDP's memory is measured over the warm-up and at most this many steps: what the allocator
#: keeps grows over the first steps (the 134 MB MLP's FSDP process of two under tcmalloc:
#: 882-947 MiB after 6 steps, 954-965 after 20).
FSDP_MEMORY_STEPS = 5

class _AllReduceSwitch:
    """A DDP communication hook that runs DDP's own all-reduce (torch's default hook) while
    `communicate` is set, and otherwise only its local part: the bucket divided by the world
    size is its own result. DDP takes one hook for its lifetime, hence a switch."""

    def __init__(self):
        self.communicate = False

    @staticmethod
    def hook(state: "_AllReduceSwitch", bucket):
        if state.communicate:
            from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

            return allreduce_hook(None, bucket)
        future = torch.futures.Future()
        future.set_result(bucket.buffer().div_(dist.get_world_size()))
        return future


def _slowest_per_step(walls: list[float], device: torch.device) -> list[float]:
    """Every rank's step times, step by step the largest (what a synchronous step waits for)."""
    tensor = torch.tensor(walls, dtype=torch.float64, device=device)
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return tensor.tolist()


def _mean_over_ranks(run, seconds: float) -> float:
    """One figure for a step every rank timed (they wait for each other inside it)."""
    return run.mean(torch.tensor([seconds], dtype=torch.float64)).item()


def _block_values(values: list[float], per_block: int, skip_first: bool) -> list[float]:
    """`values` of consecutive blocks of `per_block` steps, the first of each block left out."""
    return [v for i, v in enumerate(values) if not (skip_first and i % per_block == 0)]


def _link_rows(grad_tensor_bytes: list[int], largest_block: int, device: torch.device) -> list[dict]:
    """The all_reduce at the latency's size and DDP's buckets; all_gather and reduce_scatter
    at a block's size (what FSDP gathers and scatters), whose costs beyond a ring's differ by
    backend."""
    from ..comm.runner import iterations_for, time_op
    from .formulas import ddp_buckets

    ops = [("all_reduce", size) for size in sorted({LATENCY_BYTES, *ddp_buckets(grad_tensor_bytes)})]
    ops += [(op, largest_block) for op in FSDP_OPS if largest_block > 0]
    return [time_op(op, size, device, warmup=2,
                    iters=iterations_for(op, size, device, LINK_ITERS, LINK_SECONDS_PER_SIZE))
            for op, size in ops]



def measure_tp_round(spec: dict) -> dict:
    """A job that only times a tensor-parallel step across its processes (every rank fed the
    same batch): for machines whose cores are fewer than the processes a plan puts on them,
    where no job of several processes times the rest (their crowded compute is stretched by
    the plan itself). Empty where the model has no tensor-parallel plan."""
    from ..api import init
    from ..workloads import get_workload

    workload = get_workload(spec["workload"], spec.get("model"), spec.get("dataset"), spec.get("seq_len"))
    with init(strategy="ddp", backend=spec.get("backend"), device=spec.get("device"), threads=spec.get("threads"),
              seed=spec["seed"]) as run:
        if not declared_plan(workload.build_model()):
            return {}
        train_set, _ = workload.build_datasets(spec["seed"])
        loss_fn = workload.training_task(train_set[0]).loss_fn
        batches = forever(run.loader(train_set, batch_size=spec["batch_size"], shuffle=True, drop_last=True))
        seconds = tp_step_seconds(workload.build_model, workload.lr, same_batches(batches, run.device), loss_fn,
                                  run.device, spec["steps"], spec["warmup"], run.world_size)
        if seconds is None:
            return {}
        return {"world_size": run.world_size, "threads": run.threads,
                "tp_mesh_step_s": _mean_over_ranks(run, seconds)}


def measure_probe_round(spec: dict) -> dict:
    """`spec`: workload, model, dataset, batch_size, seed, device, backend, threads, steps,
    warmup, min_seconds, microbatches. Returns this job's figures (every rank returns the same)."""
    from ..api import init
    from ..workloads import get_workload

    workload = get_workload(spec["workload"], spec.get("model"), spec.get("dataset"), spec.get("seq_len"))
    with init(strategy="ddp", backend=spec.get("backend"), device=spec.get("device"), threads=spec.get("threads"),
              seed=spec["seed"]) as run:
        train_set, _ = workload.build_datasets(spec["seed"])
        # What a process holds before the model: the interpreter, torch, the process group and
        # the data (the constant part of every prediction of memory); the peak from here on.
        constant = run.memory.current()
        loss_fn = workload.training_task(train_set[0]).loss_fn
        batches = forever(run.loader(train_set, batch_size=spec["batch_size"], shuffle=True, drop_last=True))
        fsdp_memory = {}
        if run.world_size > 1 and not spec.get("steps_only"):
            fsdp_memory = _fsdp_memory(workload, batches, loss_fn, spec, run)
        run.memory.reset_peak()
        model = workload.build_model()
        optimizer = adam(model.parameters(), lr=workload.lr)  # the trainer's (bench's too)
        model, optimizer = run.setup(model, optimizer)
        timings, steps = _timed_steps(run, model, optimizer, batches, loss_fn, spec)
        result = {**fsdp_memory, **timings}
        result.update(_layout_facts(run, workload, model, optimizer, batches, loss_fn, spec, steps, constant))
        return result


def _timed_steps(run, model, optimizer, batches, loss_fn, spec: dict) -> tuple[dict, int]:
    """The job's steps timed: the slowest rank's step, with and (under DDP) without the
    gradients' all-reduce in alternating blocks, and a step's parts (data, forward and
    backward, optimizer) over the ranks; with the number of steps measured."""
    kind, switch = SYNC, None
    if run.world_size > 1:
        # On one process the job is exactly what the one-process run does (its group of
        # one still passes every bucket through the backend: a cost of its own).
        if hasattr(model, "register_comm_hook"):
            switch = _AllReduceSwitch()
            model.register_comm_hook(switch, _AllReduceSwitch.hook)
            kind = LOCAL
        else:  # not wrapped by DDP: steps without gradient synchronisation instead
            kind = NOSYNC

    def steps_of(step_kind: str, count: int, clock: Clock) -> None:
        if switch is not None:
            switch.communicate = step_kind == SYNC
        timed_steps(run, model, optimizer, batches, loss_fn, [step_kind] * count, clock)

    warming = Clock(run.device)
    steps_of(kind, spec["warmup"], warming)
    steps = steps_to_measure(run, warming, kind, spec["steps"], spec["min_seconds"])
    if switch is not None:
        steps_of(SYNC, spec["warmup"], Clock(run.device))  # the all-reduce's first calls set it up
    clock = Clock(run.device)
    run.barrier()  # every rank measures while the others run
    if switch is None:
        steps_of(kind, steps, clock)
        per_block, kinds = steps, (kind,)
    else:
        per_block, kinds = BLOCK_STEPS + 1, (LOCAL, SYNC)
        for _ in range(-(-steps // BLOCK_STEPS)):
            for step_kind in kinds:
                steps_of(step_kind, per_block, clock)
    skip_first = switch is not None
    slowest = {k: _slowest_per_step(_block_values(clock.step_walls(k), per_block, skip_first), run.device)
               for k in kinds}
    parts = [statistics.median(_block_values(clock.intervals(a, b, kind), per_block, skip_first))
             for a, b in (("start", "data"), ("data", "fb"), ("fb", "opt"))]
    parts = run.mean(torch.tensor(parts, dtype=torch.float64)).tolist()
    result = {"world_size": run.world_size, "threads": run.threads, "device": str(run.device),
              "backend": run.backend, "pinned_cores": run.cores, "step_s": statistics.fmean(slowest[kind]),
              "data_s": parts[0], "fb_s": parts[1], "optimizer_s": parts[2], "steps": len(slowest[kind])}
    if switch is not None:
        result["ddp_step_s"] = statistics.fmean(slowest[SYNC])
    return result, steps


def _layout_facts(run, workload, model, optimizer, batches, loss_fn, spec: dict, steps: int, constant: int) -> dict:
    """What the job measures beyond its steps, by its layout: on several processes of one
    machine the links, the ring's facts and tensor parallel across the job; across hosts an
    FSDP step; on one process its memory, the model's facts and FSDP's and tensor parallel's
    steps of one process."""
    result = {}
    module = run.unwrap(model)
    grads = [p.numel() * p.element_size() for p in reversed(list(module.parameters())) if p.requires_grad]
    if run.world_size > 1 and not spec.get("steps_only"):  # (across hosts: the steps; the links on their own)
        result["link_rows"] = _link_rows(grads, max(block_bytes(module), default=0), run.device)
        # What the parallelisms measure for their own cost terms (their registered measurements).
        result["parallelisms"] = measured("measure_job", ProbeContext(module, workload, batches, loss_fn, run,
                                                                      min(steps, spec["steps"]), spec["warmup"]))
        result.update(_ring_facts(module, split(next(batches))[0], run))
        if declared_plan(module):
            # Tensor parallel across every process of the job, as it waits in a real run.
            seconds = tp_step_seconds(workload.build_model, workload.lr, same_batches(batches, run.device), loss_fn,
                                      run.device, min(steps, spec["steps"]), spec["warmup"], run.world_size)
            if seconds is not None:  # the ranks wait for each other at every layer: one figure
                result["tp_mesh_step_s"] = _mean_over_ranks(run, seconds)
    elif run.world_size > 1:
        # Across the hosts, an FSDP step too: its gathers and reduce-scatters cross the
        # network, on cores the step needs (costs/data_parallel.fsdp_network_seconds).
        seconds = fsdp_step_seconds(workload.build_model, workload.lr, batches, loss_fn, run.device,
                                    min(steps, spec["steps"]), spec["warmup"], run.world_size)
        if seconds is not None:
            result["fsdp_mesh_step_s"] = _mean_over_ranks(run, seconds)
    else:
        result.update(memory_constant_bytes=constant, memory_peak_bytes=run.memory.peak(),
                      allocator=described_allocator())
        result.update(model_facts(module, optimizer, batches, spec, loss_fn))
        result["parallelisms"] = measured("measure_alone", ProbeContext(module, workload, batches, loss_fn, run,
                                                                        min(steps, spec["steps"]), spec["warmup"]))
        for key, measure in (("fsdp_step_s", fsdp_step_seconds), ("tp_step_s", tp_step_seconds)):
            seconds = measure(workload.build_model, workload.lr, batches, loss_fn, run.device,
                              min(steps, spec["steps"]), spec["warmup"])
            if seconds is not None:
                result[key] = seconds
    return result


def _fsdp_memory(workload, batches, loss_fn, spec: dict, run) -> dict:
    """The largest process's peak above what it held before its model, over a few FSDP steps
    of the model sharded across every process of the job, as a process of a real FSDP run
    makes them: {"fsdp_peak_above_bytes": ...}; {} for a model FSDP cannot shard. Measured
    first in the job, in a heap nothing else has used: FSDP gathers and frees every block twice
    a step, and an allocator that hands out freed spans again (tcmalloc) keeps of that churn
    what depends on what it holds already — the same steps after DDP's had filled the heap
    peaked about 200 MB lower on the 134 MB MLP than in a fresh process, which is what training
    starts from (costs/memory.py: the slack of FSDP configurations)."""
    before = run.memory.current()
    # As an FSDP run's processes do (api.init): freed memory returned at once, for these steps only.
    delay = return_freed_at_once() if run.device.type == "cpu" else None
    # From the model sharded on: a real run builds its shards alone (meta-device
    # initialisation), where this builds the whole model first.
    try:
        seconds = fsdp_step_seconds(workload.build_model, workload.lr, batches, loss_fn, run.device,
                                    min(spec["steps"], FSDP_MEMORY_STEPS), spec["warmup"], run.world_size,
                                    on_prepared=run.memory.reset_peak)
    finally:
        if delay is not None:
            purge_delay(delay)
    if seconds is None:
        return {}
    above = run.gather(torch.tensor([float(run.memory.peak() - before)], dtype=torch.float64))
    return {"fsdp_peak_above_bytes": above.max().item()}


def _ring_facts(module, inputs, run) -> dict:
    """Context parallel's ring across every process of the job, as it runs in a real step
    (communication and the ranks waiting for each other included), against the whole
    sequence's attention timed in the same processes: {"ring_mesh_ratio": a ring process's
    time × cp ÷ the whole's}; {} for a model without attention, or sequences the job's ring
    cannot split."""
    from ..measure.attention import attention_seconds

    cp = run.world_size
    whole, ring = attention_seconds(module, inputs, (cp,), group=dist.group.WORLD)
    if cp not in ring or not whole:
        return {}
    ratio = run.mean(torch.tensor([ring[cp] * cp / whole], dtype=torch.float64)).item()
    return {"ring_mesh_ratio": ratio}


def main(argv: Optional[list[str]] = None) -> int:
    """One rank of a probe job (jobs.ProbeJobs starts them): `python -m
    scaletrain.plan.probe_rank '{"spec": {...}, "kind": "round", "out": FILE}'`; rank 0 writes
    the job's figures to FILE."""
    import json
    import os
    import sys

    from pathlib import Path

    from ..process.environment import detect
    from ..foundation.errors import UsageError, arg, as_flags
    from ..foundation.safe_files import write_json_atomic
    from ..measure.failed import out_of_memory
    from ..launchers.failures import say_usage_error
    from ..launchers.interrupts import sigint_as_python
    from .jobs import STEPS_ONLY, TP_STEP

    sigint_as_python()
    settings = json.loads((sys.argv[1:] if argv is None else argv)[0])
    spec, kind = settings["spec"], settings["kind"]
    try:
        try:
            result = measure_tp_round(spec) if kind == TP_STEP else \
                measure_probe_round({**spec, "steps_only": kind == STEPS_ONLY})
        except (RuntimeError, MemoryError) as exc:
            if not out_of_memory(exc):
                raise
            raise UsageError(f"measuring {spec['workload']} at {arg('batch_size', spec['batch_size'])} ran out of "
                             f"memory in one process ({str(exc).splitlines()[0].strip()}): the measurement needs a "
                             f"step of one process with the whole batch; give a smaller {arg('batch_size')}") from None
    except UsageError as exc:
        say_usage_error(as_flags(exc.raw))
        return 2
    if detect(os.environ).rank == 0:
        write_json_atomic(Path(settings["out"]), result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
