"""What a strategy is: everything that happens inside one process to spread training.

A strategy wraps the model and optimizer, says how the data is sharded, runs a training
step, predicts for evaluation and describes itself for the run's summary. The registry in
`scaletrain.strategies` maps names to strategies; nothing else switches on a name.

Options every strategy takes: `precision` ("fp32", or "bf16" for autocast) and
`grad_accum` (micro-steps per optimizer step). Other options are declared per strategy in
`option_flags` (option name -> command-line flag); anything else is a UsageError naming the flag.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Callable, Optional

import torch
import torch.distributed as dist
from torch import nn

from ..data import move_to
from ..errors import UsageError
from .model_state import memory_report

if TYPE_CHECKING:
    from ..api import Run

PRECISIONS = {"fp32": None, "bf16": torch.bfloat16}
COMMON_FLAGS = {"precision": "--precision", "grad_accum": "--grad-accum"}


class Strategy:
    name = "base"
    help = ""
    #: False for strategies that must run as exactly one process (single, dp, mp).
    multi_process = True
    #: Options particular to this strategy: option name -> the command-line flag that sets it.
    option_flags: dict[str, str] = {}

    def __init__(self, precision: str = "fp32", grad_accum: int = 1, **options):
        unknown = [k for k, v in options.items() if k not in self.option_flags and v is not None]
        if unknown:
            flags = ", ".join(COMMON_FLAGS.get(k) or "--" + k.replace("_", "-") for k in unknown)
            takes = ", ".join([*self.option_flags.values(), *COMMON_FLAGS.values()])
            raise UsageError(f"{flags} does not apply to --strategy {self.name}; drop it "
                             f"(--strategy {self.name} takes {takes})")
        if precision not in PRECISIONS:
            raise UsageError(f"--precision {precision!r}: choose one of {', '.join(PRECISIONS)}")
        if not isinstance(grad_accum, int) or grad_accum < 1:
            raise UsageError(f"--grad-accum {grad_accum!r}: give a whole number of micro-steps, at least 1")
        self.precision = precision
        self.grad_accum = grad_accum
        self.options = {k: v for k, v in options.items() if v is not None}
        self._model: Optional[nn.Module] = None
        self._optimizer: Optional[torch.optim.Optimizer] = None

    # -- checks, before any process or model exists where possible --------------------------
    def check_world_size(self, world_size: int) -> None:
        """Raise UsageError when this strategy cannot run on `world_size` processes."""
        if not self.multi_process and world_size > 1:
            raise UsageError(f"strategy {self.name!r} runs one process, but {world_size} were asked for; "
                             "use --nproc-per-node 1, or --strategy ddp for one process per device")

    def check_plan(self, world_size: int, model: Optional[nn.Module], batch_size: Optional[int]) -> None:
        """Raise UsageError for a model or batch size this strategy cannot split."""

    def preflight(self, world_size: int, model: Optional[nn.Module] = None,
                  batch_size: Optional[int] = None) -> None:
        """Every check that can run in the parent, before processes start."""
        self.check_world_size(world_size)
        self.check_plan(world_size, model, batch_size)

    def validate(self, run: "Run") -> None:
        """Raise UsageError for a combination that cannot work (before any model exists)."""
        self.check_world_size(run.world_size)

    def device_slot(self, local_rank: int, local_world_size: int) -> int:
        """Which of the machine's devices is this process's (first) one: its local rank,
        unless each process owns several devices."""
        return local_rank

    # -- data and outputs -------------------------------------------------------------------
    def data_parallel(self, run: "Run") -> tuple[int, int]:
        """(this process's data shard, number of shards). Data parallel: one shard per rank."""
        return run.rank, run.world_size

    def whole_batches_only(self, run: "Run") -> bool:
        """True when every training batch must have the full batch size (the loader then
        drops an epoch's last, incomplete batch)."""
        return False

    def holds_outputs(self, run: "Run") -> bool:
        """Whether this process computes the model's outputs and so the loss (pipeline: last stage)."""
        return True

    def output_holders(self, run: "Run") -> int:
        """How many processes hold outputs; metrics are averaged over those."""
        return run.world_size

    # -- training ---------------------------------------------------------------------------
    def setup(self, run: "Run", model: nn.Module, optimizer: Optional[torch.optim.Optimizer]):
        model.to(run.device)
        return self.remember(model, optimizer)

    def remember(self, model: nn.Module, optimizer: Optional[torch.optim.Optimizer]):
        """Keeps what setup returns, for describe()'s memory report."""
        self._model, self._optimizer = model, optimizer
        return model, optimizer

    def autocast(self, device: torch.device):
        """Mixed precision: bf16 autocast around forward and loss; fp32 does nothing."""
        dtype = PRECISIONS[self.precision]
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=device.type, dtype=dtype)

    def forward_backward(self, run: "Run", model: nn.Module, inputs, targets, loss_fn: Callable,
                         scale: float = 1.0) -> torch.Tensor:
        """Forward and backward on one batch; returns the detached, unscaled loss."""
        with self.autocast(run.device):
            outputs = model(inputs)
            # Model-parallel outputs come out on the last part's device: targets go there.
            loss = loss_fn(outputs, move_to(targets, outputs.device))
        (loss * scale if scale != 1.0 else loss).backward()
        return loss.detach()

    def no_sync(self, model: nn.Module):
        """Context in which backward does not synchronise gradients (accumulation)."""
        return contextlib.nullcontext()

    def predict(self, run: "Run", model: nn.Module, inputs) -> Optional[torch.Tensor]:
        """Logits for evaluation, or None on a process that does not produce outputs."""
        with self.autocast(run.device):
            return self.unwrap(model)(inputs)

    def unwrap(self, model: nn.Module) -> nn.Module:
        return getattr(model, "module", model)

    # -- reporting --------------------------------------------------------------------------
    def describe(self, run: "Run") -> dict:
        """Strategy-specific facts for summary.json. Every rank must call it (it gathers)."""
        facts = {"precision": self.precision, "grad_accum": self.grad_accum}
        if self._model is not None:
            facts["memory_per_process"] = self.gather_memory(run)
        return facts

    def gather_memory(self, run: "Run") -> list[dict]:
        """Each rank's memory report (parameters, gradients, optimizer state), in rank order."""
        mine = memory_report(self._model, self._optimizer)
        keys = list(mine)
        on = run.device if run.backend == "nccl" else torch.device("cpu")  # NCCL gathers device tensors only
        local = torch.tensor([mine[k] for k in keys], dtype=torch.float64, device=on)
        if dist.is_initialized() and dist.get_world_size() > 1:
            gathered = [torch.zeros_like(local) for _ in range(dist.get_world_size())]
            dist.all_gather(gathered, local)
        else:
            gathered = [local]
        return [{"rank": r, **{k: int(v) for k, v in zip(keys, row.tolist())}} for r, row in enumerate(gathered)]
