"""Expert parallel, applied after tensor parallel and context parallel and before activation
checkpointing, compilation and the data-parallel wrappers: a mixture of experts' experts split
across the `ep` processes of each expert-parallel group, tokens sent to their experts and back
by all-to-all (expert_dispatch.py).

Its processes are borrowed (`dims.MeshDim.borrows`): expert parallel adds none, it regroups the
dp_shard × cp processes, which read different batches (or parts of sequences) and hold the same
dense weights. Of every mixture-of-experts layer (experts.py: Mixtral's, Qwen3-MoE's, the
built-in stdlib-moe's), process i of a group keeps experts [i·E/ep, (i+1)·E/ep): the stacked
weights become DTensors sharded on their first dimension over the group's mesh (`Shard(0)`),
so a checkpoint holds them whole, under the model's own names, and loads into any degree. The
experts module's forward is replaced by the dispatch: the router (a dense layer, FSDP's like
the rest) still chooses for this process's tokens, the experts compute where they live.

The data-parallel wrapper then shards each process's experts over the processes that hold the
same ones (dp_shard × cp ÷ ep of them, `topology.data_parallel_mesh(within=EP)`: with
replicas, HSDP over them too), and divides their gradients by every data-parallel process, not
only those: the all-to-all's backward has already summed, into each expert, the gradients of
the tokens every peer of the group routed to it.
"""

from __future__ import annotations

import functools

from torch import nn

from .config import ParallelConfig
from .dims import EP
from .expert_dispatch import dispatch_and_combine
from .experts import WEIGHTS, check_expert_parallel, expert_count, expert_modules
from .part import ModelPart
from .topology import Topology


def _split_weights(experts: nn.Module, mesh) -> None:
    """The stacked weights as DTensors over the expert-parallel mesh: this process keeps its
    experts (cut locally: every process built the same weights, or is on the meta device)."""
    from torch.distributed.tensor import Shard, distribute_tensor

    for name in WEIGHTS:
        weight = experts._parameters[name]
        split = distribute_tensor(weight.detach(), mesh, [Shard(0)], src_data_rank=None)
        experts.register_parameter(name, nn.Parameter(split, requires_grad=weight.requires_grad))


def _dispatched(experts: nn.Module, group, ep: int, hidden_states, top_k_index, top_k_weights):
    return dispatch_and_combine(experts, hidden_states, top_k_index, top_k_weights, group, ep)


class ExpertParallel:
    name = "expert_parallel"

    def enabled(self, config: ParallelConfig) -> bool:
        return config.dims.ep > 1

    def apply(self, part: ModelPart, config: ParallelConfig, topology: Topology) -> None:
        ep = config.dims.ep
        check_expert_parallel(part.module, ep)
        mesh = topology.submesh(EP)
        group = mesh.get_group()
        found = expert_modules(part.module)
        for path, experts in found.items():
            _split_weights(experts, mesh)
            # The instance's forward: the module keeps its class, its names and its hooks.
            experts.forward = functools.partial(_dispatched, experts, group, ep)
            part.sharded_apart[path] = EP
        counts = sorted({expert_count(m) for m in found.values()})
        each = "/".join(str(c // ep) for c in counts)
        part.facts["expert_parallel"] = {"ep": ep, "layers": len(found), "experts": counts[0] if len(counts) == 1
                                         else counts, "experts_per_process": each}
        part.banner.append(f"expert parallel: {len(found)} mixture-of-experts layer(s), {'/'.join(map(str, counts))} "
                           f"experts split {ep} ways ({each} per process), tokens dispatched and combined by "
                           f"all-to-all, dropless")
