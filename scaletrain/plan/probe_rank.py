"""One round of the plan's measurements, as one rank of a job of n processes on this machine.

The job runs what a DDP job of n processes runs — the same launcher, the same core pinning,
threads, optimizer, loader and DDP wrapper — with one difference on several processes: DDP's
all-reduce is replaced by a hook that does only its local part (dividing each bucket by the
world size).
So the step time measured is a rank's computation as it will be in the real job, next to its
neighbours, minus the communication; a synchronous step waits for the slowest rank, so the
step time is, step by step, the slowest rank's, and (as in bench) the mean over the steps:
what training gets, hiccups included. Then the same processes time the all-reduce
alone, for a small message (latency) and for each of DDP's gradient buckets (bandwidth).

On one process the job also counts the model's bytes and times each top-level block
(forward + backward) at the pipeline's micro-batch size and at the whole batch.
"""

from __future__ import annotations

import statistics

import torch
import torch.distributed as dist

from ..measure.clock import Clock
from ..measure.steps import NOSYNC, SYNC, forever, steps_to_measure, timed_steps

#: The small message whose all-reduce gives the latency α.
LATENCY_BYTES = 4096

#: Each message size is timed for about this long (at most LINK_ITERS calls, at least 3):
#: a fixed ten calls of a millisecond each moved the latency by ×3 between rounds on a
#: 2-core machine (one scheduler hiccup is a large part of 10 ms), and a small model's
#: predicted communication with it.
LINK_SECONDS_PER_SIZE = 0.25
LINK_ITERS = 200


def _local_part_only(state, bucket):
    """A DDP communication hook that keeps the default hook's local work and skips the
    all-reduce: the bucket, divided by the world size, is its own result."""
    future = torch.futures.Future()
    future.set_result(bucket.buffer().div_(dist.get_world_size()))
    return future


def _slowest_per_step(walls: list[float], device: torch.device) -> list[float]:
    """Every rank's step times, step by step the largest (what a synchronous step waits for)."""
    tensor = torch.tensor(walls, dtype=torch.float64, device=device)
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return tensor.tolist()


def _link_rows(grad_tensor_bytes: list[int], device: torch.device) -> list[dict]:
    from ..comm.runner import iterations_for, time_op
    from .formulas import ddp_buckets

    sizes = sorted({LATENCY_BYTES, *ddp_buckets(grad_tensor_bytes)})
    return [time_op("all_reduce", size, device, warmup=2,
                    iters=iterations_for("all_reduce", size, device, LINK_ITERS, LINK_SECONDS_PER_SIZE))
            for size in sizes]


def measure_probe_round(spec: dict) -> dict:
    """`spec`: workload, model, dataset, batch_size, seed, device, backend, threads, steps,
    warmup, min_seconds, microbatches. Returns this job's figures (every rank returns the same)."""
    from ..api import init
    from ..workloads import get_workload

    workload = get_workload(spec["workload"], spec.get("model"), spec.get("dataset"))
    with init(strategy="ddp", backend=spec.get("backend"), device=spec.get("device"), threads=spec.get("threads"),
              seed=spec["seed"]) as run:
        train_set, _ = workload.build_datasets(spec["seed"])
        model = workload.build_model()
        optimizer = torch.optim.Adam(model.parameters(), lr=workload.lr)
        model, optimizer = run.setup(model, optimizer)
        kind = SYNC
        if run.world_size > 1:
            # On one process the job is exactly what the one-process run does (its group of
            # one still passes every bucket through the backend: a cost of its own).
            if hasattr(model, "register_comm_hook"):
                model.register_comm_hook(None, _local_part_only)
            else:  # not wrapped by DDP: steps without gradient synchronisation instead
                kind = NOSYNC
        loss_fn = workload.training_task(train_set[0]).loss_fn
        batches = forever(run.loader(train_set, batch_size=spec["batch_size"], shuffle=True, drop_last=True))
        clock = Clock(run.device)
        timed_steps(run, model, optimizer, batches, loss_fn, [kind] * spec["warmup"], clock)
        steps = steps_to_measure(run, clock, kind, spec["steps"], spec["min_seconds"])
        run.barrier()  # every rank measures while the others run
        timed_steps(run, model, optimizer, batches, loss_fn, [kind] * steps, clock)
        skip = spec["warmup"]
        slowest = _slowest_per_step(clock.step_walls(kind, skip), run.device)
        parts = [statistics.median(clock.intervals(a, b, kind, skip)) for a, b in
                 (("start", "data"), ("data", "fb"), ("fb", "opt"))]
        parts = run.mean(torch.tensor(parts, dtype=torch.float64)).tolist()
        result = {"world_size": run.world_size, "threads": run.threads, "device": str(run.device),
                  "backend": run.backend, "pinned_cores": run.cores, "step_s": sum(slowest) / len(slowest),
                  "data_s": parts[0], "fb_s": parts[1], "optimizer_s": parts[2], "steps": len(slowest)}
        module = run.unwrap(model)
        grads = [p.numel() * p.element_size() for p in reversed(list(module.parameters())) if p.requires_grad]
        if run.world_size > 1:
            result["link_rows"] = _link_rows(grads, run.device)
        else:
            result.update(_model_facts(module, optimizer, batches, spec, loss_fn))
        return result


def _model_facts(module, optimizer, batches, spec: dict, loss_fn) -> dict:
    """Bytes of the model and the time of each block, in this (one-process) job."""
    from ..measure.footprint import measure_footprint
    from .block_times import block_seconds

    inputs, targets = next(batches)
    footprint = measure_footprint(module, optimizer, inputs, targets, loss_fn)
    micro = max(1, len(targets) // spec["microbatches"])
    return {"footprint": footprint.as_dict(),
            "block_s": block_seconds(module, inputs, targets, loss_fn),
            "block_micro_s": block_seconds(module, inputs[:micro], targets[:micro], loss_fn),
            "microbatch_size": micro,
            "block_params": [sum(p.numel() for p in block.parameters()) for block in module.children()] or
            [sum(p.numel() for p in module.parameters())]}
