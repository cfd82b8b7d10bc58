"""The data-parallel dimensions, applied last (after tensor parallel, checkpointing and
compilation): DistributedDataParallel, or FSDP2 over the mesh's data-parallel dimensions.

- DDP: `DistributedDataParallel` over the dp_replicate group: gradients all-reduced in
  buckets while backward still runs. Used where every process holds the whole model (ddp,
  and DDP + model parallel, whose replicas are split over each process's devices).
- FSDP: `fully_shard` block by block, then the root, over the data-parallel mesh (the
  replicas, and the shards: every dimension FSDP shards over, `MeshDim.shards_state`): with
  dp_replicate 1 plain FSDP (each process holds 1/dp_shard of parameters, gradients and
  optimizer state), with both above 1 hybrid sharding (HSDP: shards within a group, replicas
  across groups), with dp_shard 1 replication by FSDP's means. It composes
  with tensor parallel (2-D parameters) and with pipeline stages, which DDP does not.
  Sharding each block separately lets one block's all-gather overlap another's compute
  and keeps one block's full parameters alive at a time. Modules a borrowing dimension split
  (`ModelPart.sharded_apart`: expert parallel's experts) are groups of their own, first,
  sharded over the processes that dimension leaves; their gradients, already summed over its
  groups, are divided by every data-parallel process.
"""

from __future__ import annotations

import contextlib
import warnings

import torch
from torch import nn

from .blocks import model_blocks
from .config import DDP, ParallelConfig
from .dims import DP_REPLICATE
from .part import ModelPart
from .precision import PRECISIONS
from .topology import Topology


def fsdp_policy(precision: str):
    """bf16/fp16: blocks compute in that dtype, parameters and gradient reduction stay fp32
    (a reduction in 16 bits loses the small gradients' precision)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    dtype = PRECISIONS[precision]
    if dtype is None:
        return MixedPrecisionPolicy()
    return MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)


class DataParallel:
    name = "data_parallel"

    def enabled(self, config: ParallelConfig) -> bool:
        return config.data_parallel is not None

    def needs_values(self, config: ParallelConfig) -> bool:
        """DDP compares and broadcasts the weights it wraps: a model built on the meta device
        is materialised before (whole: every DDP process holds all of it)."""
        return config.data_parallel == DDP

    def apply(self, part: ModelPart, config: ParallelConfig, topology: Topology) -> None:
        if config.data_parallel == DDP:
            _apply_ddp(part, config, topology)
        else:
            _apply_fsdp(part, config, topology)


def _apply_ddp(part: ModelPart, config: ParallelConfig, topology: Topology) -> None:
    from torch.nn.parallel import DistributedDataParallel

    from .ddp_compression import register_compression

    ctx = topology.ctx
    kwargs = {
        # A replica spread over several devices (DDP + model parallel) must leave device_ids to DDP.
        "device_ids": [ctx.device.index] if ctx.device.type == "cuda" and part.model is part.module else None,
        # Gradients live in the communication buckets: one copy less per step.
        "gradient_as_bucket_view": True,
        "static_graph": bool(config.option("static_graph", False)),
        "process_group": topology.group(DP_REPLICATE),
    }
    if config.option("bucket_cap_mb") is not None:
        kwargs["bucket_cap_mb"] = float(config.option("bucket_cap_mb"))
    ddp = DistributedDataParallel(part.model, **kwargs)
    register_compression(ddp, config.option("grad_compression", "none"), powersgd_rank=config.option("powersgd_rank", 2))
    part.model, part.no_sync = ddp, ddp.no_sync


def _apply_fsdp(part: ModelPart, config: ParallelConfig, topology: Topology) -> None:
    from torch.distributed.fsdp import fully_shard

    # torch warns, once per module and process, that a block returning a view (what any
    # Linear on a batch of sequences returns) must not be changed in place afterwards; the
    # training step never does, and N processes printing it twice each bury the output.
    warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module .* returned a view tensor")

    dims = topology.dims
    # HSDP's 2-D mesh (replicate, shard) where there are replicas; the shard dimension alone otherwise.
    mesh = topology.data_parallel_mesh()
    kwargs = {"mesh": mesh, "mp_policy": fsdp_policy(config.option("precision", "fp32"))}
    reshard = config.option("reshard_after_forward")
    if reshard is not None:
        kwargs["reshard_after_forward"] = torch_reshard(reshard, dims.dp_shard)
    if config.option("offload", False):
        from torch.distributed.fsdp import CPUOffloadPolicy

        kwargs["offload_policy"] = CPUOffloadPolicy()
    module = part.module
    for path, borrowing in part.sharded_apart.items():
        apart = fully_shard(module.get_submodule(path), **{**kwargs, "mesh": topology.data_parallel_mesh(borrowing)})
        # Every data-parallel process's gradients reach these weights: by the all-to-all's
        # backward within the borrowing dimension's group, by this group's reduction beyond it.
        apart.set_gradient_divide_factor(float(dims.dp_replicate * dims.lent(borrowing)))
        if topology.ctx.backend != "nccl" and dims.lent(borrowing) > dims[borrowing]:
            # Reduce-scattered with a factor of its own is NCCL's PREMUL_SUM: Gloo sums, then
            # divides. (Not over one process: torch 2.13 divides that copy already, and again.)
            apart.set_force_sum_reduction_for_comms(True)
    blocks, tied = blocks_sharded_alone(module, model_blocks(module))
    for name in blocks:
        fully_shard(module.get_submodule(name), **kwargs)
    fully_shard(module, **kwargs)  # the root: every parameter no block took, tied ones included
    part.casts_itself = True
    part.no_sync = lambda: _fsdp_no_sync(module)
    kind = "replicated" if dims.shards == 1 else "sharded"
    part.facts.update({"sharded_blocks": blocks, "shards": dims.shards, "replicas": dims.dp_replicate,
                       "reshard_after_forward": True if reshard is None else reshard,
                       "offload": bool(config.option("offload", False))})
    how = (f"{dims.shards} ways" if dims.dp_replicate == 1 else
           f"{dims.shards} ways within each of {dims.dp_replicate} replica groups" if dims.shards > 1 else
           f"across {dims.dp_replicate} replicas")
    part.banner.append(f"fsdp: {len(blocks)} block(s) ({', '.join(blocks)}) and the root {kind} {how}"
                       + (f"; {', '.join(tied)} share weights with another part of the model (tied), so the root's "
                          "group holds them" if tied else ""))


def blocks_sharded_alone(model: nn.Module, blocks: list[str]) -> tuple[list[str], list[str]]:
    """(blocks that can each be an FSDP group of their own, blocks that cannot). A parameter
    belongs to one FSDP group: a block sharing one with another part of the model (an
    embedding tied to the output head, the usual language model) is left to the root's
    group, which then holds every user of the tied weight."""
    def owner(path: str) -> str:
        return next((b for b in blocks if path == b or path.startswith(b + ".")), "")

    owners: dict[int, set] = {}
    for path, sub in model.named_modules(remove_duplicate=False):
        for param in sub.parameters(recurse=False):
            owners.setdefault(id(param), set()).add(owner(path))
    tied = {b for found in owners.values() if len(found) > 1 for b in found if b}
    return [b for b in blocks if b not in tied], [b for b in blocks if b in tied]


def torch_reshard(reshard, dp_shard: int):
    """reshard_after_forward as torch takes it without a warning on every rank: sharded 1 way
    is the whole parameter kept (False), sharded dp_shard ways is resharding fully (True)."""
    if isinstance(reshard, bool) or not isinstance(reshard, int):
        return reshard
    return False if reshard == 1 else True if reshard == dp_shard else reshard


@contextlib.contextmanager
def _fsdp_no_sync(module: nn.Module):
    module.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        module.set_requires_gradient_sync(True)
