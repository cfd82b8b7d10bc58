"""What a strategy is: everything that happens inside one process to spread training.

Two objects per strategy, with different lifetimes:

- a `Strategy` is the plan: its typed, frozen options and what follows from them alone —
  the checks that can run before any process or model exists, how the data is sharded,
  which processes hold the model's outputs, the facts for the run's summary;
- `strategy.setup(ctx, model, optimizer)` returns a `Prepared`: the per-run state (the
  wrapped model, the split, the stages, the groups) and everything that uses it — a
  forward and backward, skipping gradient synchronisation, prediction, the description of
  what each process holds, and the model's and optimizer's state for checkpoints.

Strategies see a `ProcessContext` (rank, sizes, device, backend), never the library's
`Run`. The registry in `scaletrain.strategies` maps names to strategy classes; nothing else
switches on a strategy's name.
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass
from typing import Any, Callable, ClassVar, Optional

import torch
from torch import nn

from ..batches import NO_TARGETS, call_model, compute_loss, split
from ..context import ProcessContext
from ..errors import UsageError, arg
from ..options import build, check_choice, check_count, option
from ..precision import PRECISIONS
from ..values import positive_int
from . import model_state


@dataclass(frozen=True)
class CommonOptions:
    """Options every strategy takes."""

    precision: str = option("fp32", "fp32; bf16 (autocast around forward and loss); fp16 (autocast and a gradient "
                                    "scaler against underflow); fsdp casts through its mixed-precision policy "
                                    "instead", choices=tuple(PRECISIONS))
    grad_accum: int = option(1, "micro-steps per optimizer step; gradients are synchronised on the last one only, "
                                "so the batch per optimizer step grows N times", metavar="N", parse=positive_int)
    compile: bool = option(False, "torch.compile each block of the model in place (names, sharding and unwrap "
                                  "unchanged); the first steps are slow while it compiles")

    def __post_init__(self) -> None:
        check_choice("precision", self.precision, PRECISIONS)
        check_count("grad_accum", self.grad_accum, 1, "a whole number of micro-steps")


class Strategy:
    name: ClassVar[str] = "base"
    help: ClassVar[str] = ""
    #: The options this strategy takes; a subclass of CommonOptions.
    Options: ClassVar[type] = CommonOptions
    #: False for strategies that must run as exactly one process (single, dp, mp).
    multi_process: ClassVar[bool] = True
    #: True when each process holds only a shard of the gradients (fsdp): gradient norms and
    #: fp16 overflow checks are then agreed over all processes.
    shards_gradients: ClassVar[bool] = False

    def __init__(self, options: Optional[CommonOptions] = None, **values: Any):
        self.options = options if options is not None else build(self.Options, arg("strategy", self.name), values)

    @property
    def precision(self) -> str:
        return self.options.precision

    @property
    def grad_accum(self) -> int:
        return self.options.grad_accum

    def option_values(self) -> dict:
        """Every option with its value (defaults included): for summaries and configurations."""
        return asdict(self.options)

    # -- checks, before any process or model exists where possible --------------------------
    def check_world_size(self, world_size: int) -> None:
        """Raise UsageError when this strategy cannot run on `world_size` processes."""
        if not self.multi_process and world_size > 1:
            raise UsageError(f"strategy {self.name!r} runs one process, but {world_size} were asked for; "
                             f"use {arg('nproc_per_node', 1)}, or strategy ddp for one process per device")

    def check_plan(self, world_size: int, model: Optional[nn.Module], batch_size: Optional[int]) -> None:
        """Raise UsageError for a model or batch size this strategy cannot split."""

    def preflight(self, world_size: int, model: Optional[nn.Module] = None, batch_size: Optional[int] = None) -> None:
        """Every check that can run in the parent, before processes start."""
        self.check_world_size(world_size)
        self.check_plan(world_size, model, batch_size)

    def validate(self, ctx: ProcessContext) -> None:
        """Raise UsageError for a combination that cannot work (before any model exists)."""
        self.check_world_size(ctx.world_size)

    def device_slot(self, local_rank: int, local_world_size: int) -> int:
        """Which of the machine's devices is this process's (first) one: its local rank,
        unless each process owns several devices."""
        return local_rank

    # -- data and outputs -------------------------------------------------------------------
    def data_parallel(self, ctx: ProcessContext) -> tuple[int, int]:
        """(this process's data shard, number of shards). Data parallel: one shard per rank."""
        return ctx.rank, ctx.world_size

    def whole_batches_only(self) -> bool:
        """True when every training batch must have the full batch size (the loader then
        drops an epoch's last, incomplete batch)."""
        return False

    def holds_outputs(self, ctx: ProcessContext) -> bool:
        """Whether this process computes the model's outputs and so the loss (pipeline: last stage)."""
        return True

    def output_holders(self, ctx: ProcessContext) -> int:
        """How many processes hold outputs; metrics are averaged over those."""
        return ctx.world_size

    # -- the run ----------------------------------------------------------------------------
    def setup(self, ctx: ProcessContext, model: nn.Module, optimizer: Optional[torch.optim.Optimizer]) -> "Prepared":
        model.to(ctx.device)
        return Prepared(self, ctx, model, optimizer, module=model)

    def describe(self, ctx: ProcessContext) -> dict:
        """What the plan says, for summary.json (no model needed; no collective)."""
        return {"precision": self.precision, "grad_accum": self.grad_accum}


class Prepared:
    """A model prepared by a strategy for one run, and the calls that use its state.

    `model` is what `run.setup` hands back (possibly a wrapper), `module` the user's own
    module (or, for a pipeline, this process's stage of it): checkpoints and `run.unwrap`
    use `module`, so parameter names are the user's own whatever the wrapper."""

    banner: Optional[str] = None  # one line the run prints on rank 0 (the split it made, ...)

    def __init__(self, strategy: Strategy, ctx: ProcessContext, model: nn.Module,
                 optimizer: Optional[torch.optim.Optimizer], module: nn.Module):
        self.strategy, self.ctx = strategy, ctx
        self.model, self.optimizer, self.module = model, optimizer, module

    def autocast(self):
        """Mixed precision: bf16/fp16 autocast around forward and loss; fp32 does nothing."""
        dtype = PRECISIONS[self.strategy.precision]
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.ctx.device.type, dtype=dtype)

    # -- training ---------------------------------------------------------------------------
    def forward_backward(self, batch: Any, targets: Any = NO_TARGETS, loss_fn: Optional[Callable] = None,
                         scale: float = 1.0) -> torch.Tensor:
        """Forward and backward on one batch; returns the detached, unscaled loss."""
        inputs, rest = split(batch, targets)
        with self.autocast():
            output = call_model(self.model, inputs)
            loss = compute_loss(output, rest, loss_fn, inputs)
        (loss if isinstance(scale, float) and scale == 1.0 else loss * scale).backward()
        return loss.detach()

    def grad_norm(self, parameters: list, norm_type: float = 2.0) -> torch.Tensor:
        """The norm of the whole model's gradient (what one process training the whole model
        on the global batch would compute), from this process's `parameters`. Data parallel
        strategies hold the whole, synchronised gradient in every process."""
        grads = [p.grad for p in parameters if p.grad is not None]
        if not grads:
            return torch.zeros((), device=self.ctx.device)
        return torch.nn.utils.get_total_norm(grads, norm_type).to(self.ctx.device)

    def no_sync(self):
        """Context in which backward does not synchronise gradients (accumulation)."""
        return contextlib.nullcontext()

    def predict(self, inputs: Any) -> Any:
        """The model's output for evaluation, or None on a process that does not produce one."""
        with self.autocast():
            return call_model(self.module, inputs)

    # -- reporting --------------------------------------------------------------------------
    def describe(self) -> dict:
        """Facts about what this run holds, for summary.json. Collective: every rank calls it."""
        return {"memory_per_process": model_state.gather_memory(self.ctx, self.module, self.optimizer)}

    # -- state for checkpoints ----------------------------------------------------------------
    def state_dict(self, full: bool, optimizer: Optional[torch.optim.Optimizer] = None) -> dict:
        """{"model": ..., "optimizer": ...}, keyed by the user's parameter names.
        full=True: collective; rank 0 gets the whole state on the CPU, the others {}.
        full=False: this process's shares (DTensors where sharded), for a sharded save."""
        return model_state.ModuleState(self.module).state_dict(full, optimizer)

    def load_state_dict(self, state: dict, full: bool, optimizer: Optional[torch.optim.Optimizer] = None) -> None:
        """Puts a state from `state_dict(full)` back. full=True: collective; rank 0 passes
        the whole state, the others `{"model": {}, "optimizer": {}}`."""
        model_state.ModuleState(self.module).load_state_dict(state, full, optimizer)
