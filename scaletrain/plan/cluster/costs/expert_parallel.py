"""Expert parallel's cluster costs, per layer and micro-batch (the experts' own computation —
this GPU's `experts ÷ ep` experts on the rows it receives — is the traced layer's:
`mixture.py`; FSDP's gathers of 1/ep of the experts over the GPUs that hold the same ones are
data parallel's: `data_parallel.layer_collective`):

- the all-to-alls: this GPU's rows — its tokens (its share of the sequence: ÷ cp, and ÷ tp
  under sequence parallel) × top-k × hidden × 2 bytes, dropless — dispatched to the GPUs
  holding their experts and the outputs combined back, in forward and again in backward (the
  gradients the same ways), (ep − 1)/ep of them leaving the GPU; forward's small exchange of
  the counts; a layer whose forward runs again in backward (full activation checkpointing,
  and selective: scaletrain's policy keeps products and attention outputs, so the layer's
  forward, all-to-alls and all, runs again) dispatches and combines once more. The formula is
  `plan/formulas.py`'s `expert_parallel_seconds`, the local planner's too, at the link of the
  ep group (`comm.Network.all_to_all_link`: NVLink inside a node; across nodes, when ep × tp
  exceeds a node's GPUs, each GPU's port). None of it overlaps: scaletrain's dispatch is
  eager and dropless — an expert cannot start before its rows arrive, and the layer's next
  operator needs them back (OVERLAP);
- the dispatch's bookkeeping on the host: the counts are read on the host (one
  synchronisation per layer's forward: the GPU's queue drains), and the rows' order is built
  there, row by row (`expert_dispatch._grouping`), while the GPU waits: HOST_SECONDS_PER_ROW
  a received row;
- the routing's imbalance: with `expert_load` L (the busiest GPU's rows over the mean; 1.0,
  balanced, unless given), every all-to-all and every layer waits for the busiest GPU, which
  receives L × the rows and computes its experts on them: its excess (L − 1) × its experts'
  products, and L × the rows in the all-to-alls and its activations.
"""

from __future__ import annotations

from ... import formulas
from ..comm import mesh_group
from ..compute import step_efficiency
from .parts import StepParts
from .registry import ClusterCostTerms, register

#: Share of the all-to-alls hidden behind computation: none (see the module's text).
OVERLAP = 0.0
#: The host's time per received row to build the regrouping order in scaletrain's dispatch
#: (`expert_dispatch._grouping`, a Python list of the rows' indices): 8,192 rows (a Mixtral
#: micro-batch of 4,096 tokens, top-2) took 0.55–0.62 ms on this project's 2-core CPU, at ep 2,
#: 4 and 8 alike.
HOST_SECONDS_PER_ROW = 70e-9
#: Bytes an expert's row keeps for backward, per hidden unit and expert unit: the rows in (h)
#: and back (h), the gate and up projections' output (2f), SiLU(gate) (f) and its product
#: with up (f), in bf16 — what the trace of `mixture.Mixture` keeps of a row.
ROW_KEPT_HIDDEN, ROW_KEPT_FFN = 2 * 2, 4 * 2


def routed_tokens(parts: StepParts) -> float:
    """Tokens one GPU routes per micro-batch (its share of each sequence)."""
    config = parts.config
    return parts.tokens_mb / (config.tp if config.sequence_parallel and config.tp > 1 else 1)


def recomputed(parts: StepParts) -> float:
    """1 where activation checkpointing runs a layer's forward again in backward."""
    return 0.0 if parts.config.checkpointing == "none" else 1.0


def experts_seconds(parts: StepParts) -> float:
    """This GPU's experts' products in one layer's forward and backward (and a full
    checkpointing's recomputation), balanced: each of its experts on tokens × top-k × ep ÷
    experts rows — the work the busiest GPU does (L − 1) × more of."""
    shape, config, profile = parts.scenario.shape, parts.config, parts.scenario.profile
    h, f, local = shape.hidden, shape.expert_ffn, shape.experts // config.ep
    rows = max(1, round(routed_tokens(parts) * shape.experts_per_token / local))
    forward = profile.matmul_seconds(rows, 2 * f, h) + profile.matmul_seconds(rows, h, f)
    backward = profile.matmul_seconds(rows, h, 2 * f) + profile.matmul_seconds(2 * f, h, rows) + \
        profile.matmul_seconds(rows, f, h) + profile.matmul_seconds(h, f, rows)
    again = forward if config.checkpointing == "full" else 0.0
    return local * (forward + backward + again) / step_efficiency(profile, parts.scenario.gpus)


def per_layer(parts: StepParts) -> dict:
    config, shape = parts.config, parts.scenario.shape
    ep_group = mesh_group(config.dims, ("ep",), parts.gpus_per_node)
    busbw, alpha = parts.net.all_to_all_link(ep_group)
    load = config.expert_load
    tokens = routed_tokens(parts) * load  # the busiest GPU's, which everyone waits for
    exchanged = formulas.expert_parallel_seconds(tokens, shape.experts_per_token, shape.hidden, 2, 1, config.ep,
                                                 busbw, alpha, recomputed(parts))
    host = (1 + recomputed(parts)) * tokens * shape.experts_per_token * HOST_SECONDS_PER_ROW
    return {"ep_all_to_all_per_layer_s": exchanged * (1 - OVERLAP), "ep_dispatch_host_per_layer_s": host,
            "ep_imbalance_per_layer_s": (load - 1) * experts_seconds(parts)}


def memory(parts: StepParts) -> dict:
    """The busiest GPU's rows beyond the mean, kept for backward in every layer (none when
    balanced — the mean's are the traced layer's activations — or under full checkpointing)."""
    config, shape = parts.config, parts.scenario.shape
    if config.checkpointing == "full" or config.expert_load <= 1:
        return {}
    rows = routed_tokens(parts) * shape.experts_per_token * (config.expert_load - 1)
    kept = rows * (ROW_KEPT_HIDDEN * shape.hidden + ROW_KEPT_FFN * shape.expert_ffn)
    return {"activations": kept * max(parts.chunks)}


COSTS = register(ClusterCostTerms("expert_parallel", enabled=lambda config: config.ep > 1, per_layer=per_layer,
                                  memory=memory))
