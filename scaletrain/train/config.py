"""The settings of one `scaletrain train` run, as one validated value."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Optional

from ..defaults import LOG_EVERY_SECONDS, LOG_EVERY_STEPS


@dataclass
class TrainConfig:
    strategy: str = "ddp"
    """Name of the strategy (see `scaletrain.strategies`)."""
    workload: str = "digits-cnn"
    """Built-in workload: model, data and default learning rate and epochs."""
    model: Optional[str] = None
    """The user's model factory, `module:function`, replacing the workload's model."""
    dataset: Optional[str] = None
    """The user's dataset factory, `module:function`, replacing the workload's data."""
    model_config: Optional[str] = None
    """A causal language model built from a transformers config.json or a built-in shape (llama3-8b, ...),
    trained on synthetic tokens, in place of the workload."""
    seq_len: Optional[int] = None
    """Tokens per sequence of a language-model workload (--model-config: default 2048)."""
    epochs: Optional[int] = None
    """Passes over the training data; None: the workload's default (with `max_steps`: as many as it takes)."""
    max_steps: Optional[int] = None
    """Stop after this many optimizer steps (the final evaluation and checkpoint as at an epoch's end)."""
    batch_size: int = 32
    """Samples per process per step; the global batch is this × data-parallel size."""
    eval_batch_size: int = 256
    """Samples per process per evaluation forward."""
    lr: Optional[float] = None
    """Adam's learning rate; None: the workload's default."""
    task: Optional[str] = None
    """classification, regression, lm or own (the model's own loss); None: the workload's, or derived."""
    clip_grad_norm: Optional[float] = None
    """Clip the gradients' norm to this before every optimizer step; None: no clipping."""
    seed: int = 0
    """Seeds the initial weights, the held-out split and the shuffling."""
    backend: Optional[str] = None
    """gloo, nccl, mpi or ccl; None: NCCL for CUDA, Gloo for CPU."""
    device: Optional[str] = None
    """cpu, cuda or cuda:N; None: CUDA when visible."""
    threads: Optional[int] = None
    """CPU threads per process; None: cores ÷ processes on the node."""
    checkpoint_every: int = 0
    """Save a checkpoint every this many steps (and at the end); 0: never."""
    keep_checkpoints: int = 2
    """How many of the newest checkpoints to keep."""
    checkpoint_layout: str = "auto"
    """full (one file, written by rank 0), sharded (a file per rank), or auto: sharded for a large fsdp model."""
    resume: Optional[str] = None
    """None, "auto" (the newest checkpoint under the output folder, if any) or a checkpoint path."""
    timeout_seconds: Optional[float] = None
    """How long a rank waits for its peers before naming the missing ones and exiting."""
    pin_cores: bool = True
    """Bind each process of a node to its own cores (see `scaletrain.devices.pin_cores`)."""
    auto_choice: Optional[str] = None
    """Why `--strategy auto` chose this run's strategy and options (the plan's two lines)."""
    meta_init: str = "auto"
    """Build the model on the meta device and give each process only its share: auto (where no
    process holds the whole model and the model can initialise itself there), always, never."""
    strategy_options: dict = field(default_factory=dict)
    """Options particular to the strategy."""
    trackers: list = field(default_factory=list)
    """Experiment trackers on rank 0: tensorboard, wandb, mlflow, csv (see `scaletrain.track`)."""
    log_every_steps: int = LOG_EVERY_STEPS
    """A training record (line, metrics.jsonl, trackers) every this many steps ..."""
    log_every_seconds: float = LOG_EVERY_SECONDS
    """... or every this many seconds, whichever comes first."""
    allow_nonfinite: bool = False
    """Keep training when the loss, gradients or weights go NaN/inf (default: stop at the
    next check, every `log_every_steps` steps, with one line naming the step and cause)."""

    def as_dict(self) -> dict:
        return asdict(self)
