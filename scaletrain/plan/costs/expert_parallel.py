"""Expert parallel's cost terms: what splitting a mixture of experts' experts `ep` ways over the
data-parallel processes does to one process's step and memory, from what the probe measured of
the model (plan/probe_experts.py).

- its all-to-alls (`formulas.expert_parallel_seconds`, shared with the cluster planner): in
  every mixture-of-experts layer the rows of this process's tokens — tokens × top-k × width ×
  the activations' bytes, dropless — dispatched to the processes holding their experts and the
  outputs combined back, in forward and again in backward, (ep − 1)/ep of them leaving the
  process; forward's small exchange of the counts; a layer computed again under activation
  checkpointing dispatches once more. At the all-to-all's latency and bandwidth as the probe's
  job of several processes timed it (else the all-reduce's). On the critical path: an expert
  cannot start before its rows arrive, and the layer's next step needs them back;
- its machinery: where the probe's job of several processes ran a real expert-parallel step on
  as many processes (ep = all of them, as many threads), what that step took beyond this model's
  prediction of it — the ranks waiting for each other at every all-to-all, the dispatch's
  bookkeeping, and whatever else of that step the terms do not see (as tensor parallel's
  measured step is its machinery); elsewhere the parts modelled: the dispatch's bookkeeping
  (measured on one process), on cores shared as the arithmetic's are, and the slowest process's
  share of the experts' arithmetic — each layer waits for the process whose experts received
  the most rows: the experts' share of the step's arithmetic (counted) times the busiest
  group's load over the mean (the probe's routing, grouped as `ep` groups);
- what FSDP no longer gathers: the experts are split by expert parallel, so FSDP gathers each
  process's experts (1/ep of them) over the dp_shard × cp ÷ ep processes that hold the same
  ones, instead of every expert over dp_shard × cp — the difference taken off FSDP's own
  terms (what of it was exposed: on CPUs all of it);
- memory: the state is sharded as under FSDP alone (ep × dp_shard × cp ÷ ep ways); the rows
  dispatched, received and regrouped are kept for backward in every layer (transient here).

A model without experts, or experts that do not split `ep` ways, cannot run so (`runs`).
"""

from __future__ import annotations

from typing import Optional

from ...parallel.config import FSDP, ParallelConfig
from ...parallel.dims import DP_SHARD, EP, ParallelDims
from .. import formulas as f
from ..probe import MeshStep, Probe
from ..probe_experts import ExpertFacts, expert_facts, job_facts, read_facts
from .registry import CostTerms, register
from .step import beyond_the_model
from .terms import Step, Terms

#: Its name in PARALLELISMS, and where its measurements are on a probe (`probe.facts[NAME]`).
NAME = "expert_parallel"


def facts_of(probe: Probe) -> Optional[ExpertFacts]:
    """The mixture's facts the probe measured (None: a dense model)."""
    found = probe.facts.get(NAME)
    return read_facts(found.get("alone"), found.get("job")) if found else None

#: Row buffers of one layer kept for backward: the rows sent, those received, and the
#: received ones regrouped expert by expert.
KEPT_ROW_BUFFERS = 3


def runs(probe: Probe, config: ParallelConfig) -> bool:
    facts = facts_of(probe)
    return facts is not None and facts.experts % config.dims.ep == 0


def _tokens(step: Step) -> float:
    """The tokens one process routes in a step (its batch, its share of each sequence)."""
    facts = facts_of(step.probe)
    return step.probe.batch_size * facts.tokens_per_sample * step.token_share


def _recomputed(config: ParallelConfig) -> float:
    mode, every = config.option("activation_checkpointing", "none"), config.option("ac_every")
    return 1.0 / (every or 1) if mode == "full" or every else 0.0


def all_to_all_seconds(step: Step) -> float:
    facts, config = facts_of(step.probe), step.config
    group = step.s.group(config.dims.span(EP))
    measured = facts.link() if group.nodes == 1 else None
    alpha, busbw = measured if measured is not None else (group.alpha_s, None)
    if busbw is None:
        rows = f.expert_dispatch_bytes(_tokens(step), facts.top_k, facts.width, facts.element_bytes)
        busbw = group.busbw(rows)
    return f.expert_parallel_seconds(_tokens(step), facts.top_k, facts.width, facts.element_bytes, facts.layers,
                                     config.dims.ep, busbw, alpha, _recomputed(config))


def fsdp_gathers_saved(step: Step) -> float:
    """FSDP's collectives of the experts over dp_shard × cp, less those of 1/ep of them over the
    processes expert parallel leaves."""
    facts, dims = facts_of(step.probe), step.config.dims
    shard = step.s.group(dims.span(DP_SHARD))
    grads = facts.param_bytes * step.probe.footprint.grad_bytes / max(1, step.probe.footprint.param_bytes)
    gathers = 1 if step.config.option("reshard_after_forward") is False else 2
    ratios = shard.gather_scatter_ratios()

    def comm(param_bytes: float, grad_bytes: float, n: int) -> float:
        return f.fsdp_comm_seconds(param_bytes, grad_bytes, n, facts.layers, shard.busbw(param_bytes / facts.layers),
                                   shard.alpha_s, gathers, *ratios)

    left = dims.shards // dims.ep
    return max(0.0, comm(facts.param_bytes, grads, dims.shards) - comm(facts.param_bytes / dims.ep,
                                                                       grads / dims.ep, left))


def measured_machinery(step: Step) -> Optional[float]:
    """What the probe's real expert-parallel step across its job took beyond this model's
    prediction of it, where that step is this configuration's degree and world on as many
    threads; None elsewhere."""
    facts, config, s = facts_of(step.probe), step.config, step.s
    if not facts.mesh_step_s or config.dims.ep != facts.mesh_world or config.world_size != facts.mesh_world \
            or s.threads != facts.mesh_threads or s.nodes > 1:
        return None
    from ...strategies.fsdp import FSDPOptions

    world = facts.mesh_world
    measured = ParallelConfig("fsdp", FSDPOptions(ep=world), ParallelDims(dp_shard=world, ep=world), FSDP)
    return beyond_the_model(step.probe, MeshStep(world, facts.mesh_threads, facts.mesh_step_s), measured)


def machinery_seconds(step: Step) -> float:
    """The dispatch's bookkeeping and the ranks waiting for the busiest (see the module's text)."""
    facts, config, s = facts_of(step.probe), step.config, step.s
    recomputed = _recomputed(config)
    measured = measured_machinery(step)
    if measured is not None:
        return measured * s.oversubscription * (1 + recomputed / 2)
    bookkeeping = facts.dispatch_s * step.token_share * s.oversubscription * (1 + recomputed)
    return bookkeeping + facts.flop_share * step.compute.fb_s * step.work_share * (facts.imbalance(config.dims.ep) - 1)


def terms(step: Step) -> Terms:
    comm = all_to_all_seconds(step)
    saved = fsdp_gathers_saved(step)
    exposed = comm - saved * (1 - step.machine.overlap)
    return Terms(compute_s=machinery_seconds(step) if step.machinery else 0.0, comm_s=comm - saved, exposed_s=exposed,
                 note=f"experts' all-to-all over ep {step.config.dims.ep}")


def transient_bytes(probe: Probe, config: ParallelConfig, held: float, largest_unit: float, largest_tensor: float,
                    shards: int) -> float:
    facts = facts_of(probe)
    tokens = probe.batch_size * facts.tokens_per_sample / config.dims.cp
    rows = f.expert_dispatch_bytes(tokens, facts.top_k, facts.width, facts.element_bytes)
    return KEPT_ROW_BUFFERS * rows * facts.layers


def candidates(world_size: int, batch_size: int, blocks: int, tensor_parallel: bool,
               sequence: int = 0) -> list[tuple[str, dict]]:
    """FSDP with every expert-parallel degree of the world (a mixture's experts that do not
    split so, and dense models, are left out by `runs`)."""
    return [("fsdp", {"ep": e}) for e in range(2, world_size + 1) if world_size % e == 0]


COSTS = register(CostTerms(NAME, runs=runs, terms=terms, transient_bytes=transient_bytes,
                          candidates=candidates, measure_alone=expert_facts, measure_job=job_facts))
