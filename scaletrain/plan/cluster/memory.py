"""Memory per GPU at the step's peak, in parts:

- parameters, gradients and optimizer state: FSDP keeps fp32 parameters, fp32 gradients and
  AdamW's two fp32 moments sharded over dp_shard × cp (16 bytes a parameter ÷ that); without
  sharding (DDP, Megatron-LM) each GPU holds bf16 parameters and fp32 main gradients,
  master weights and moments of its tensor- and pipeline-parallel share (18 bytes), the
  master weights and moments divided over the data-parallel ranks where the optimizer is
  sharded (ZeRO-1, Megatron-LM's distributed optimizer: `optimizer_sharded`);
- gathered blocks: the bf16 blocks FSDP has gathered (the one computing and the one prefetched,
  in forward and in backward; a pipeline stage keeps its whole stage gathered for the step)
  and a block's gradients on their way to the reduce-scatter; a mixture's experts in them
  are this GPU's (1/ep of them under expert parallel, gathered over the GPUs holding the same);
- activations: what the traced layer keeps for backward (under the configuration's activation
  checkpointing, measured from the trace: torch's own checkpointing ran there), × the layers
  of the stage × the micro-batches a pipeline stage holds at once (1F1B: the stage's distance
  from the end; interleaved: a little more);
- the step's transient: the rest of the traced step's peak (the output head's logits and what
  the loss keeps of them — `loss.py`: an eager fp32 loss about 8 × the bf16 logits, a fused or
  chunked one 2 × and a chunk —, a layer's recomputation and gradients);
- allocator: what PyTorch's caching allocator reserves beyond the tensors live at the peak,
  as a fragmentation fraction (FRAGMENTATION) of what is allocated and freed every step
  (activations, the transient, gathered blocks): blocks split for one size and cached, which
  differently sized tensors later cannot reuse. GMLake (Guo et al., ASPLOS 2024) measured the
  caching allocator's fragmentation on eight LLMs' training on A100 80 GB at 15% of the
  reserved memory on average under recomputation, ZeRO and offloading (up to 33%); a
  training step's fixed shapes repeat, and 10% of the step's own allocations is taken;
- buffers: NCCL's communicators and buffers (a job of more than one GPU).
A pipeline stage under FSDP keeps its gradients unsharded, in fp32, until the last
micro-batch's backward reduces them (torch's pipeline schedules turn the reduction off for the
others).
"""

from __future__ import annotations

from .compute import activation_bytes, peak_bytes
from .config import ClusterConfig, ClusterScenario, layer_parameters
from .costs.pipeline import in_flight
from .loss import loss_extra

#: The caching allocator's reserve beyond the tensors live at the peak, as a share of the step's
#: own allocations (activations, transient, gathered blocks): see the module's docstring.
FRAGMENTATION = 0.10

#: NCCL's communicators and buffers, per GPU of a job of several (bytes).
COMMUNICATION_BUFFERS = 1.0e9


def memory_parts(config: ClusterConfig, scenario: ClusterScenario, layer_costs, one_layer_costs, params_rank: float,
                 chunks: list, microbatches: int) -> dict:
    shape = scenario.shape
    mb = config.microbatch
    layer_params = sum(layer_parameters(shape, config))  # gathered: a mixture's experts ÷ ep
    if config.fsdp:
        params = 4 * params_rank / config.shards
        grads = 4 * params_rank / config.shards
        optimizer = 8 * params_rank / config.shards
        gathered = params_rank * 2 if config.pp > 1 else 2 * 2 * layer_params
        gathered += 4 * layer_params  # one block's fp32 gradients before their reduce-scatter
        if config.pp > 1 and microbatches > 1:  # the stage's gradients accumulate unsharded, fp32
            gathered += 4 * params_rank
    else:
        params = 2 * params_rank
        grads = 4 * params_rank
        optimizer = 12 * params_rank / (config.dp if config.optimizer_sharded else 1)
        gathered = 0.0
    saved = activation_bytes(layer_costs, mb)
    layers_here = max(chunks)
    activations = saved * layers_here * in_flight(config, microbatches)
    tokens = mb * scenario.seq // config.cp
    transient = max(0.0, peak_bytes(one_layer_costs, mb) - saved) + \
        loss_extra(config.software.loss, tokens, shape.vocab // config.tp).live_bytes
    return {"parameters": params, "gradients": grads, "optimizer": optimizer, "gathered_blocks": gathered,
            "activations": activations, "transient": transient,
            "allocator": FRAGMENTATION * (activations + transient + gathered),
            "buffers": COMMUNICATION_BUFFERS if scenario.gpus > 1 else 0.0}


def traced_step_bytes(build_model, make_batch) -> dict:
    """The method above applied to any model: one training step's forward and backward traced
    under fake tensors (on this machine's CPU: its kernels, e.g. its flash attention), the
    live memory of its activations and transient tensors at their highest, and the
    parameters' bytes — from which gradients and optimizer state follow by parts."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from ...flops import TraceMode

    with FakeTensorMode():
        model = build_model()
        for p in model.parameters():  # gradients are counted by parts, as the planner does
            p.register_post_accumulate_grad_hook(lambda p: setattr(p, "grad", None))
        batch = make_batch()
        mode = TraceMode(detail=True)
        with mode:
            output = model(**batch)
            loss = output.loss if hasattr(output, "loss") else output
            mode.mark_forward_end()
            loss.backward()
        parameters = sum(p.numel() * p.element_size() for p in model.parameters())
    peak = max((sum(point) for point in mode.trace.timeline), default=0)
    return {"parameters": parameters, "activations_and_transient": peak}
