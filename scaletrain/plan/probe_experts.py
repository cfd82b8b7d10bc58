"""What a plan measures of a mixture of experts, for expert parallel's cost terms
(costs/expert_parallel.py, which registers these as its measurements): in the probe's
one-process job, the model's experts and its routing (`expert_facts`); in its job of several
processes, the all-to-all and a real expert-parallel step (`job_facts`); both read into one
`ExpertFacts`, the probe's `facts["expert_parallel"]` (`read_facts`).

- the experts' shapes: layers, experts, the top-k each token chooses, the width of a row the
  dispatch sends, the tokens of a sample, the stacked weights' bytes;
- the experts' share of a step's arithmetic, counted by torch's FLOP counter module by module
  on one forward and backward (`FlopCounterMode`);
- the routing: the tokens each expert received over a few training steps of the model as built
  — how evenly each expert-parallel degree's groups of experts would be loaded;
- what the dispatch's bookkeeping adds to a step (sorting the choices, the counts read on the
  host, grouping the rows and putting them back): steps with every experts module computed
  through expert parallel's dispatch with one process's group (no exchange), against the same
  steps computed by the module's own forward, in alternating blocks;
- the all-to-all between the job's processes at sizes from a latency's to a few megabytes,
  timed as `scaletrain comm` times it (a line through them: latency and bandwidth);
- a real step of the model under expert parallel across the job's processes (fsdp, ep = the
  job's processes), as a run prepares it: what it takes beyond the plan's own prediction of it —
  the ranks waiting for each other at every all-to-all, the dispatch's bookkeeping on the
  job's threads, whatever else the model does not see of that step — is expert parallel's
  machinery at that degree (as tensor parallel's step across the job is its own).
"""

from __future__ import annotations

import functools
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Optional

import torch

#: Sizes the all-to-all is timed at (bytes per process): a latency's, then rows of experts.
ALL_TO_ALL_SIZES = (4096, 256 * 1024, 1 << 20, 4 << 20)
#: The all-to-all's timing at each size: at most this many iterations, or this many seconds.
ALL_TO_ALL_ITERS = 200
ALL_TO_ALL_SECONDS_PER_SIZE = 0.25
#: Blocks of steps alternating the module's own forward and the dispatch's, and steps in each
#: at most: the difference is a few percent of a step, told apart by the medians of the blocks.
DISPATCH_BLOCKS = 3
DISPATCH_STEPS = 5


@dataclass(frozen=True)
class ExpertFacts:
    layers: int
    experts: int
    top_k: int
    width: int
    tokens_per_sample: int
    element_bytes: int
    """Bytes of one element of the rows dispatched (the activations' dtype)."""
    param_bytes: float
    """Every layer's stacked experts."""
    flop_share: float
    """The experts' share of a step's forward and backward arithmetic."""
    counts: tuple
    """(layers × experts) tokens each expert received over the measured steps."""
    dispatch_s: float
    """What the dispatch's bookkeeping adds to a step of one process (seconds)."""
    all_to_all: tuple = ()
    """((bytes per process, seconds), ...) across the job of several processes."""
    all_to_all_world: int = 0
    mesh_step_s: float = 0.0
    """A real expert-parallel step across the job of several processes (0: not measured)."""
    mesh_world: int = 0
    mesh_threads: int = 0

    def imbalance(self, ep: int) -> float:
        """The busiest process's experts' tokens over the mean, at `ep` (mean over layers):
        each layer's all-to-all waits for the slowest."""
        ratios = []
        for layer in self.counts:
            per = [sum(layer[i * len(layer) // ep:(i + 1) * len(layer) // ep]) for i in range(ep)]
            if sum(per):
                ratios.append(max(per) / (sum(per) / ep))
        return statistics.fmean(ratios) if ratios else 1.0

    def link(self) -> Optional[tuple[float, float]]:
        """(latency per peer, bandwidth) of the all-to-all measured: the least-squares line
        through its sizes' times, S (n-1)/n bytes sent in each; None where not measured."""
        n = self.all_to_all_world
        if n < 2 or len(self.all_to_all) < 2:
            return None
        points = [((n - 1) / n * b, s) for b, s in self.all_to_all]
        mean_b = statistics.fmean(b for b, _ in points)
        mean_s = statistics.fmean(s for _, s in points)
        spread = sum((b - mean_b) ** 2 for b, _ in points)
        slope = sum((b - mean_b) * (s - mean_s) for b, s in points) / spread if spread else 0.0
        if slope <= 0:
            return None
        return max(0.0, (mean_s - slope * mean_b) / (n - 1)), 1 / slope

    def as_dict(self) -> dict:
        return asdict(self)


def facts_from_dict(doc: Optional[dict]) -> Optional[ExpertFacts]:
    if not doc:
        return None
    return ExpertFacts(**{**doc, "counts": tuple(tuple(layer) for layer in doc["counts"]),
                          "all_to_all": tuple(tuple(p) for p in doc.get("all_to_all", ()))})


def _flop_share(module, step) -> float:
    from torch.utils.flop_counter import FlopCounterMode

    from ..parallel.experts import expert_modules

    counter = FlopCounterMode(display=False)
    with counter:
        step()
    by_module = counter.get_flop_counts()
    total = sum(by_module.get("Global", {}).values())
    experts = 0
    for path in expert_modules(module):
        # The counter names a module by the root's class, then its path ("MoEGPT.1.moe.experts").
        found = next((v for k, v in by_module.items() if k.partition(".")[2] == path), {})
        experts += sum(found.values())
    return experts / total if total else 0.0


def expert_facts(context) -> dict:
    """ExpertFacts as a dict for a mixture of experts, {} otherwise (the probe's job of one
    process; `context`: costs.registry.ProbeContext)."""
    module, batches, loss_fn, steps = context.module, context.batches, context.loss_fn, context.steps
    from ..data.batches import batch_size_of, call_model, compute_loss, move_to, split
    from ..parallel.expert_load import ExpertLoad
    from ..parallel.experts import expert_count, expert_modules

    found = expert_modules(module)
    if not found:
        return {}
    device = next(module.parameters()).device
    load = ExpertLoad(module, device)
    shapes: dict = {}

    def shape_of(_module, args, kwargs):
        hidden, chosen = args[0], args[1]
        shapes.update(rows=hidden.shape[0], top_k=chosen.shape[1], width=hidden.shape[1],
                      element_bytes=hidden.element_size())

    watch = next(iter(found.values())).register_forward_pre_hook(shape_of, with_kwargs=True)
    inputs, rest = move_to(split(*next(batches)), device)

    def step() -> None:
        module.zero_grad(set_to_none=True)
        compute_loss(call_model(module, inputs), rest, loss_fn, inputs).backward()

    def timed(count: int) -> float:
        started = time.perf_counter()
        for _ in range(count):
            step()
            load.step_done()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return (time.perf_counter() - started) / count

    step()
    watch.remove()
    own, dispatched = [], []
    steps = max(1, min(steps, DISPATCH_STEPS))
    for _ in range(DISPATCH_BLOCKS):
        own.append(timed(steps))
        for experts in found.values():
            experts.forward = functools.partial(_dispatched_alone, experts)
        dispatched.append(timed(steps))
        for experts in found.values():
            del experts.forward  # the class's own again
    load.sync()
    load.close()
    samples = batch_size_of(inputs)
    facts = ExpertFacts(layers=len(found), experts=max(expert_count(m) for m in found.values()), top_k=shapes["top_k"],
                        width=shapes["width"], tokens_per_sample=shapes["rows"] // max(1, samples),
                        element_bytes=shapes["element_bytes"],
                        param_bytes=float(sum(p.numel() * p.element_size() for m in found.values()
                                              for p in m.parameters())),
                        flop_share=_flop_share(module, step), counts=tuple(map(tuple, load.total.tolist())),
                        dispatch_s=max(0.0, statistics.median(dispatched) - statistics.median(own)))
    module.zero_grad(set_to_none=True)
    return facts.as_dict()


def _dispatched_alone(experts, hidden_states, top_k_index, top_k_weights):
    from ..parallel.expert_dispatch import dispatch_and_combine

    return dispatch_and_combine(experts, hidden_states, top_k_index, top_k_weights, None, 1)


def job_facts(context) -> dict:
    """{"all_to_all_rows": [...], "expert_mesh_step_s": seconds, "world_size", "threads"} across
    the probe's job of several processes for a mixture of experts, {} otherwise (every rank
    alike); `context`: costs.registry.ProbeContext."""
    from ..comm.runner import iterations_for, time_op
    from ..parallel.experts import is_mixture

    run = context.run
    if not is_mixture(context.module):
        return {}
    rows = [time_op("all_to_all", size, run.device, warmup=2,
                    iters=iterations_for("all_to_all", size, run.device, ALL_TO_ALL_ITERS, ALL_TO_ALL_SECONDS_PER_SIZE))
            for size in ALL_TO_ALL_SIZES]
    found = {"all_to_all_rows": rows, "world_size": run.world_size, "threads": run.threads}
    seconds = mesh_step_seconds(context.workload, context.batches, context.loss_fn, run, context.steps,
                                context.warmup)
    if seconds is not None:  # the ranks wait for each other at every all-to-all: one figure
        found["expert_mesh_step_s"] = run.mean(torch.tensor([seconds], dtype=torch.float64)).item()
    return found


def mesh_step_seconds(workload, batches, loss_fn, run, steps: int, warmup: int) -> Optional[float]:
    """Mean seconds of a training step of a fresh model prepared as `fsdp` with `ep` = every
    process of the job prepares it (parallelize, on a topology of its own); None where the
    experts do not split so."""
    from ..parallel import ParallelConfig, Topology, parallelize
    from ..parallel.config import FSDP
    from ..parallel.dims import ParallelDims
    from ..parallel.experts import expert_count, expert_modules
    from ..strategies.fsdp import FSDPOptions
    from ..train.optimizer import adam

    ep = run.world_size
    model = workload.build_model()
    if any(expert_count(m) % ep for m in expert_modules(model).values()):
        return None
    dims = ParallelDims(dp_shard=ep, ep=ep)
    optimizer = adam(model.parameters(), lr=workload.lr)
    prepared = parallelize(ParallelConfig("fsdp", FSDPOptions(ep=ep), dims, FSDP), Topology(dims, run.ctx), model,
                           optimizer)

    def step() -> None:
        inputs, targets = next(batches)
        optimizer.zero_grad(set_to_none=True)
        prepared.forward_backward(inputs, targets, loss_fn)
        optimizer.step()

    for _ in range(warmup):
        step()
    run.barrier()
    started = time.perf_counter()
    for _ in range(steps):
        step()
    if run.device.type == "cuda":
        torch.cuda.synchronize(run.device)
    return (time.perf_counter() - started) / steps


def read_facts(alone: Optional[dict], job: Optional[dict]) -> Optional[ExpertFacts]:
    """The one-process job's facts with the job of several processes' all-to-all and step (or
    the facts a saved probe holds, with no job)."""
    facts = facts_from_dict(alone)
    if facts is None or not job:
        return facts
    from dataclasses import replace

    rows = job["all_to_all_rows"]
    return replace(facts, all_to_all=tuple((r["bytes"], r["seconds"]) for r in rows),
                   all_to_all_world=rows[0]["world_size"], mesh_step_s=job.get("expert_mesh_step_s", 0.0),
                   mesh_world=job["world_size"] if job.get("expert_mesh_step_s") else 0,
                   mesh_threads=job["threads"] if job.get("expert_mesh_step_s") else 0)
