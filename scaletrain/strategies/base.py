"""What a strategy is: a named preset of the parallelisms (scaletrain.parallel) — which
degrees it fills, how its data-parallel dimensions synchronise, which options it takes.

A `Strategy` answers what follows from its options and the world size alone, before any
process or model exists: the parallel dimensions (`dims`, validated once, with every factor
named in the error), the checks of a model's split or tensor-parallel plan (`check_model`,
which takes a model built on the meta device), the facts for the run's summary. Its
`setup(topology, model, optimizer)` applies the parallelisms in their fixed order and
returns a `Prepared` model (scaletrain.parallel.prepared).

Strategies see a `Topology` (rank, sizes, device, backend, the mesh), never the library's
`Run`. What a strategy fills in for a number of processes is a `ParallelConfig` (pure: the
mesh's degrees, the data-parallel kind, the pipeline, the local devices, the options), the
same value the planner predicts. The registry in `scaletrain.strategies` maps names to
strategy classes; nothing else switches on a strategy's name.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Optional

import torch
from torch import nn

from ..foundation.errors import UsageError, arg
from ..foundation.options import build, check_choice, check_count, declared, option, spellings
from ..foundation.text_values import factory_name, non_negative_int, on_off, positive_int, reshard_value
from ..parallel import ParallelConfig, Prepared, Topology, parallelize
from ..parallel.checkpointing import MODES as AC_MODES
from ..parallel.dims import BY_NAME, CP, DP_REPLICATE, DP_SHARD, EP, MESH_DIMS, TP, ParallelDims, resolve_dims
from ..parallel.float8 import check_float8
from ..parallel.precision import PRECISIONS
from ..process.process_context import ProcessContext


@dataclass(frozen=True)
class CommonOptions:
    """Options every strategy takes."""

    precision: str = option("fp32", "fp32; bf16 (autocast around forward and loss); fp16 (autocast and a gradient "
                                    "scaler against underflow); fsdp casts through its mixed-precision policy "
                                    "instead; float8 (GPUs with compute capability 8.9+, torchao: the linear "
                                    "layers large enough to gain compute in float8, compiled, the rest bf16; FSDP "
                                    "all-gathers them in float8 where it shards them)",
                            choices=tuple(PRECISIONS))
    grad_accum: int = option(1, "micro-steps per optimizer step; gradients are synchronised on the last one only, "
                                "so the batch per optimizer step grows N times", metavar="N", parse=positive_int)
    compile: bool = option(False, "torch.compile each block of the model in place (names, sharding and unwrap "
                                  "unchanged); the first steps are slow while it compiles")
    activation_checkpointing: str = option(
        "none", "keep only each block's input for backward and compute the rest again there: full (every block), "
                "selective (torch's operator policy: matrix products kept, the rest recomputed; or every k-th block "
                "with ac_every), none", choices=AC_MODES)
    ac_every: Optional[int] = option(None, "with activation_checkpointing selective: checkpoint every k-th block "
                                           "whole instead of the operator policy", metavar="K", parse=positive_int)
    fused_norms: bool = option(True, "compute the model's hand-written RMSNorm modules (Hugging Face's Llama, "
                                     "Mistral, Qwen, Gemma and their kin, recognised by their code) with torch's "
                                     "fused rms_norm: the same maths in one kernel; false keeps them",
                               metavar="true|false", parse=on_off)
    chunked_loss: bool = option(True, "compute a language model's cross-entropy a chunk of tokens at a time, never "
                                      "holding all its float32 logits (the lm task's loss, and a Hugging Face causal "
                                      "LM's own loss, with its semantics): the same loss, less memory; false: the "
                                      "plain loss", metavar="true|false", parse=on_off)
    gc_every: int = option(50, "Python's garbage collector: frozen after setup, automatic collection off, and a "
                               "collection every N training steps (no pause at a random step); 0 leaves it as "
                               "it is", metavar="N", parse=non_negative_int)

    def __post_init__(self) -> None:
        check_choice("precision", self.precision, PRECISIONS)
        check_count("grad_accum", self.grad_accum, 1, "a whole number of micro-steps")
        check_choice("activation_checkpointing", self.activation_checkpointing, AC_MODES)
        for name in ("fused_norms", "chunked_loss"):
            if not isinstance(getattr(self, name), bool):
                try:
                    object.__setattr__(self, name, on_off(getattr(self, name)))
                except argparse.ArgumentTypeError:
                    raise UsageError(f"{arg(name, getattr(self, name))}: give true or false") from None
        if isinstance(self.gc_every, bool) or not isinstance(self.gc_every, int) or self.gc_every < 0:
            raise UsageError(f"{arg('gc_every', self.gc_every)}: give a whole number of steps, or 0 to leave "
                             "Python's garbage collector as it is")
        if self.ac_every is not None:
            check_count("ac_every", self.ac_every, 1, "a whole number of blocks")
            if self.activation_checkpointing != "selective":
                raise UsageError(f"{arg('ac_every', self.ac_every)} chooses blocks for "
                                 f"{arg('activation_checkpointing', 'selective')}; give that too, or drop it")


def degree(name: str, **kwargs) -> Any:
    """The option that gives the degree of mesh dimension `name` (its help from dims.MESH)."""
    return option(None, BY_NAME[name].help, metavar=BY_NAME[name].metavar, parse=positive_int, **kwargs)


@dataclass(frozen=True)
class MeshOptions(CommonOptions):
    """The degrees of the mesh a composable strategy takes (every dimension of dims.MESH that
    composes); the one its preset fills takes the processes the others leave."""

    tp: Optional[int] = degree(TP)
    dp_replicate: Optional[int] = degree(DP_REPLICATE)
    dp_shard: Optional[int] = degree(DP_SHARD)
    cp: Optional[int] = degree(CP)
    ep: Optional[int] = degree(EP)
    reshard_after_forward: Optional[Any] = option(
        None, "FSDP after each block's forward: true frees the gathered parameters (ZeRO-3, least memory), false "
              "keeps them for backward (ZeRO-2: one all-gather less per block), N keeps them sharded N ways "
              "(in between; N divides dp_shard) (default true)", metavar="true|false|N", parse=reshard_value)
    offload: bool = option(False, "FSDP keeps parameters, gradients and optimizer state in CPU memory between "
                                  "uses (CUDA runs: frees GPU memory at the cost of copies)")
    parallelize: Optional[Any] = option(
        None, "your tensor-parallel plan, for a model without one: a function fn(model, tp_mesh) that applies "
              "torch.distributed.tensor.parallel.parallelize_module itself (library: the function; command line: "
              "its MODULE:FUNCTION)", metavar="MODULE:FUNCTION", parse=factory_name)

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in MESH_DIMS:
            if getattr(self, name, None) is not None:
                check_count(name, getattr(self, name), 1, "a whole number of processes")
        if self.precision == "float8" and (self.tp or 1) > 1:
            raise UsageError(f"{arg('precision', 'float8')} does not combine with tensor parallel here (its layers "
                             f"would need float8's own tensor-parallel styles): use {arg('tp', 1)} or "
                             f"{arg('precision', 'bf16')}")
        if self.reshard_after_forward is not None:
            try:
                object.__setattr__(self, "reshard_after_forward", reshard_value(self.reshard_after_forward))
            except argparse.ArgumentTypeError as exc:
                raise UsageError(f"{arg('reshard_after_forward', self.reshard_after_forward)}: {exc}") from None
        if self.parallelize is not None and not callable(self.parallelize):
            try:  # a module:function name, imported where it is used
                factory_name(self.parallelize)
            except argparse.ArgumentTypeError as exc:
                raise UsageError(f"{arg('parallelize')}: give a function fn(model, tp_mesh), or its name: {exc}") from None


class Strategy:
    name: ClassVar[str] = "base"
    help: ClassVar[str] = ""
    #: The options this strategy takes; a subclass of CommonOptions.
    Options: ClassVar[type] = CommonOptions
    #: False for strategies that must run as exactly one process (single, dp, mp).
    multi_process: ClassVar[bool] = True
    #: The dimension that takes the processes the given degrees leave.
    fill: ClassVar[Optional[str]] = DP_REPLICATE
    #: How the data-parallel dimensions synchronise: DDP, FSDP (parallel.config), or None.
    data_parallel_kind: ClassVar[Optional[str]] = None
    #: How one process drives several devices: SPLIT (mp, DDP + model parallel), REPLICATE (dp), or None.
    local_devices: ClassVar[Optional[str]] = None
    #: Whether the model runs as pipeline stages.
    pipelined: ClassVar[bool] = False
    #: A degree given to a strategy that does not take it: the strategy to use instead.
    instead: ClassVar[dict] = {}
    #: The one-process, one-device reference every speedup is measured against.
    baseline: ClassVar[bool] = False
    #: The command line chooses this strategy's configuration by measuring, before any rank
    #: starts (`train --strategy auto`), and trains the choice instead.
    measured_choice: ClassVar[bool] = False
    #: Its configuration is known before the model is (False: decided at setup), so it can be planned.
    plannable: ClassVar[bool] = True

    def __init__(self, options: Optional[CommonOptions] = None, **values: Any):
        #: The degrees given by another name (a pipeline's pipeline_stages is its pp): messages use it.
        self.labels: dict[str, str] = {}
        if options is None:
            self._refuse_degrees(values)
            self.labels = spellings(self.Options, values)
            options = build(self.Options, arg("strategy", self.name), values)
        self.options = options

    def _refuse_degrees(self, values: dict) -> None:
        takes = {f.name for f in declared(self.Options)}
        for name in MESH_DIMS:
            if values.get(name) is not None and name not in takes:
                hint = self.instead.get(name, f"{arg('strategy', 'fsdp')} or tp (FSDP over dp_shard × cp)"
                                        if name in (CP, EP) else f"{arg('strategy', 'fsdp')}, tp or pipeline")
                raise UsageError(f"{arg(name, values[name])} does not apply to {arg('strategy', self.name)}; "
                                 f"use {hint}")

    @property
    def precision(self) -> str:
        return self.options.precision

    @property
    def grad_accum(self) -> int:
        return self.options.grad_accum

    # -- the topology, from the options and the world size ------------------------------------
    def given_degrees(self) -> dict[str, Optional[int]]:
        return {name: getattr(self.options, name, None) for name in MESH_DIMS}

    def devices_per_process(self, local_world_size: int = 1) -> int:
        return 1

    def dims(self, world_size: int, local_world_size: int = 1) -> ParallelDims:
        """The parallel dimensions of `world_size` processes; UsageError naming every factor."""
        if not self.multi_process and world_size > 1:
            raise UsageError(f"strategy {self.name!r} runs one process, but {world_size} were asked for; "
                             f"use {arg('nproc_per_node', 1)}, or strategy ddp for one process per device")
        given = self.given_degrees()
        return resolve_dims(world_size, given, self.fill_for(given), self.devices_per_process(local_world_size),
                            self.degree_labels())

    def degree_labels(self) -> dict[str, str]:
        """Degrees the user named otherwise (a pipeline's `pipeline_stages` is its `pp`)."""
        return self.labels

    def fill_for(self, given: dict[str, Optional[int]]) -> Optional[str]:
        """The dimension that takes the processes the `given` degrees leave."""
        return self.fill

    def data_parallel(self, dims: ParallelDims) -> Optional[str]:
        return self.data_parallel_kind

    # -- checks, before any process or model exists where possible --------------------------
    def check_world_size(self, world_size: int) -> None:
        """Raise UsageError when this strategy cannot run on `world_size` processes."""
        dims = self.dims(world_size)
        if dims.cp > 1 and self.pipelined:
            # A schedule feeds each stage micro-batches of whole sequences; splitting them round
            # a ring in every stage is not built.
            raise UsageError(f"{arg('cp', dims.cp)} does not compose with {arg('strategy', self.name)}: its stages run "
                             f"micro-batches of whole sequences; use {arg('strategy', 'fsdp')} with {arg('cp')} (and "
                             f"{arg('tp')}), or drop {arg('cp')}")
        if dims.ep > 1 and self.pipelined:
            raise UsageError(f"{arg('ep', dims.ep)} does not compose with {arg('strategy', self.name)}: its stages "
                             f"would each need the experts' all-to-all; use {arg('strategy', 'fsdp')} with "
                             f"{arg('ep')} (and {arg('tp')}), or drop {arg('ep')}")
        if getattr(self.options, "parallelize", None) is not None and dims.tp == 1:
            raise UsageError(f"{arg('parallelize')} is a tensor-parallel plan, but this run has no tensor parallel "
                             f"(tp 1): give {arg('tp', 2)} or more, or leave {arg('parallelize')} out")
        reshard = getattr(self.options, "reshard_after_forward", None)
        if isinstance(reshard, int) and not isinstance(reshard, bool) and dims.shards % reshard:
            over = "dp_shard × cp" if dims.cp > 1 else "dp_shard"  # FSDP shards over both
            raise UsageError(f"{arg('reshard_after_forward', reshard)}: keeps the parameters sharded {reshard} ways "
                             f"after forward, which must divide {over} ({dims.shards}); use a divisor of it, or "
                             f"true or false")

    def check_model(self, world_size: int, model: Optional[nn.Module], batch_size: Optional[int]) -> None:
        """Raise UsageError for a model or batch size this strategy cannot split. `model` may
        be built on the meta device: only its structure and shapes are read."""
        from ..parallel.context_parallel import check_context_parallel
        from ..parallel.experts import check_expert_parallel, is_mixture
        from ..parallel.tensor_parallel import check_tensor_parallel

        dims = self.dims(world_size)
        if model is not None and dims.tp > 1:
            check_tensor_parallel(model, dims.tp, getattr(self.options, "parallelize", None))
        if model is not None and dims.cp > 1:
            check_context_parallel(model)
        if model is not None and dims.ep > 1:
            check_expert_parallel(model, dims.ep)
        if model is not None and self.pipelined and is_mixture(model):
            # A stage's units pass one tensor on: the router's balance loss of the earlier
            # stages would not reach the loss, and the experts' tokens could not be counted.
            raise UsageError(f"{type(model).__name__} is a mixture of experts, which {arg('strategy', self.name)} does "
                             f"not cut into stages here (its router's balance loss would be lost between them); use "
                             f"{arg('strategy', 'fsdp')} (with {arg('ep')}), ddp or tp")

    def preflight(self, world_size: int, model: Optional[nn.Module] = None, batch_size: Optional[int] = None) -> None:
        """Every check that can run in the parent, before processes start."""
        self.check_world_size(world_size)
        self.check_model(world_size, model, batch_size)

    def validate(self, ctx: ProcessContext) -> None:
        """Raise UsageError for a combination that cannot work (before any model exists)."""
        self.dims(ctx.world_size, ctx.local_world_size)
        self.check_world_size(ctx.world_size)
        self.check_device(ctx.device.type)

    def check_device(self, device_type: str) -> None:
        """Raise UsageError for options this device cannot honour."""
        if self.options.precision == "float8":
            check_float8(device_type)
        if getattr(self.options, "offload", False) and device_type != "cuda":
            raise UsageError(f"{arg('offload')} moves FSDP's parameters, gradients and optimizer state from the GPU to "
                             f"the CPU's memory, but this run is on the {device_type}, where they are already: drop "
                             f"{arg('offload')}")

    def device_slot(self, local_rank: int, local_world_size: int) -> int:
        """Which of the machine's devices is this process's (first) one: its local rank,
        unless each process owns several devices."""
        return local_rank * self.devices_per_process(local_world_size)

    def whole_batches_only(self) -> bool:
        """True when every training batch must have the full batch size (the loader then
        drops an epoch's last, incomplete batch): a pipeline's equal micro-batches."""
        return self.pipelined

    # -- the configuration, and the run ------------------------------------------------------
    def microbatches(self, world_size: int) -> int:
        """Micro-batches a batch is cut into on `world_size` processes."""
        return getattr(self.options, "microbatches", None) or 1

    def configuration(self, world_size: int, local_world_size: int = 1) -> ParallelConfig:
        """What this strategy runs on `world_size` processes (UsageError where it cannot)."""
        dims = self.dims(world_size, local_world_size)
        return ParallelConfig(self.name, self.options, dims, data_parallel=self.data_parallel(dims),
                              pipelined=self.pipelined, local_devices=self.local_devices,
                              microbatches=self.microbatches(world_size))

    def topology(self, ctx: ProcessContext) -> Topology:
        return Topology(self.dims(ctx.world_size, ctx.local_world_size), ctx)

    def setup(self, topology: Topology, model: nn.Module, optimizer: Optional[torch.optim.Optimizer],
              meta_rng: Optional[torch.Tensor] = None, init_fn: Optional[Callable] = None) -> Prepared:
        config = self.configuration(topology.ctx.world_size, topology.ctx.local_world_size)
        return parallelize(config, topology, model, optimizer, meta_rng, init_fn)

    def describe(self, topology: Topology) -> dict:
        """What the plan says, for summary.json (no model needed; no collective)."""
        return {"precision": self.precision, "grad_accum": self.grad_accum, **topology.describe()}
