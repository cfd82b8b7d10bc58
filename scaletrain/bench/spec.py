"""What one bench configuration is, and how it travels to the processes that measure it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Optional

from ..foundation.defaults import BENCH_MEASURE_S
from ..strategies.flags import option_flags


@dataclass(frozen=True)
class RunSpec:
    """One configuration: a strategy on a number of processes, measured in fresh processes."""
    strategy: str
    """A registered strategy name."""
    world_size: int
    """Processes in all."""
    threads: Optional[int] = None
    """CPU threads per process; None: cores ÷ processes."""
    lr_scaling: str = "none"
    """Learning-rate rule for the effective batch (accuracy runs): none, linear or sqrt."""
    label: str = ""
    """What the row is called in tables and plots."""
    baseline: bool = False
    """The one-process, all-cores run every speedup is measured against."""
    options: dict = field(default_factory=dict)
    """The strategy options it runs with (those of the bench's flags that this strategy takes)."""

    @property
    def key(self) -> str:
        return self.label or f"{self.strategy}×{self.world_size}"


@dataclass(frozen=True)
class BenchSettings:
    """What every configuration of one bench shares."""
    workload: str = "synthetic-cnn"
    model: Optional[str] = None
    dataset: Optional[str] = None
    seq_len: Optional[int] = None
    """Tokens per sequence of a language-model workload (None: its default)."""
    batch_size: int = 32
    steps: int = 30
    """Measured synchronised steps at least (throughput runs); as many no-sync steps are interleaved."""
    min_seconds: float = BENCH_MEASURE_S
    """More steps when `steps` would not last this long (small models)."""
    warmup: int = 5
    """Steps left out of every median first."""
    accuracy: bool = False
    """Train whole epochs and report held-out accuracy instead of a fixed number of steps."""
    epochs: Optional[int] = None
    lr: Optional[float] = None
    lr_warmup_steps: Optional[int] = None
    """Steps of linear learning-rate warm-up; None: one epoch."""
    seed: int = 0
    backend: Optional[str] = None
    device: Optional[str] = None
    strategy_options: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


def to_argv(settings: BenchSettings, spec: RunSpec) -> list[str]:
    """The `scaletrain bench` command line that measures `spec` as one rank of a job."""
    argv = ["bench", "--strategy", spec.strategy, "--workload", settings.workload,
            "--batch-size", str(settings.batch_size), "--steps", str(settings.steps),
            "--warmup", str(settings.warmup), "--seed", str(settings.seed), "--lr-scaling", spec.lr_scaling,
            "--min-seconds", str(settings.min_seconds)]
    for flag, value in (("--model", settings.model), ("--dataset", settings.dataset), ("--seq-len", settings.seq_len),
                        ("--epochs", settings.epochs), ("--lr", settings.lr),
                        ("--lr-warmup-steps", settings.lr_warmup_steps), ("--backend", settings.backend),
                        ("--device", settings.device), ("--threads", spec.threads)):
        if value is not None:
            argv += [flag, str(value)]
    if settings.accuracy:
        argv.append("--accuracy")
    return argv + option_flags(spec.options)
