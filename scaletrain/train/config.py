"""The settings of one `scaletrain train` run, as one frozen, validated value.

Every setting is declared once, as a field (`scaletrain.foundation.options.option`): its default, its
help, its flag and --help section. `scaletrain train`'s command line is generated from these
declarations (the strategies' own options are generated from theirs, the launch options from
`LaunchSettings`), so a configuration file's keys — the flags' names, `_` for `-` — are too:
adding a setting is adding a field. The command converts its parsed arguments into a
TrainConfig once (`from_args`); whatever it resolves later (the workload's epochs, auto's
choice, the output folder) is a new TrainConfig (`dataclasses.replace`), never a change to
the arguments. Each rank gets it as JSON in its argv (`to_json`, `from_json`).

Nothing here imports torch: help texts and choices that list strategies or workloads are
worked out when the parser is built.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional

from ..foundation.defaults import (
    BENCH_MAX_OTHER_CORES,
    HANG_TIMEOUT_S,
    KEEP_CHECKPOINTS,
    LOG_EVERY_SECONDS,
    LOG_EVERY_STEPS,
    MAX_RESTARTS,
)
from ..foundation.durations import RULE, format_duration
from ..foundation.options import flag_values, option, parsed_values
from ..foundation.text_values import duration, non_negative_int, positive_float, positive_int
from ..foundation.text_values import AUTO
from ..launchers.settings import LaunchSettings
from ..memory.allocator import ALLOCATOR_HELP, NAMES as ALLOCATOR_NAMES
from ..memory.steady import STEADY_MEMORY_HELP

MAX_SEED = 2**32 - 1  # NumPy's and scikit-learn's seeds are 32-bit; torch's would take more


def seed_value(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number from 0 to {MAX_SEED}, got {text!r}") from None
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"must be from 0 to {MAX_SEED}, got {text}")
    return value


def resume_source(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("expected auto or a checkpoint path, got an empty value")
    return text


def _strategy_help() -> str:
    from ..strategies import REGISTRY

    return (f"how to spread the work: {', '.join(f'{n} ({c.help})' for n, c in REGISTRY.items())}; auto (a short "
            f"measurement, every configuration that fits predicted, the fastest chosen). Default: ddp, or what the "
            f"degrees given imply (--pp: pipeline; --dp-shard or --dp-replicate: fsdp; --tp: tp)")


def _strategy_choices() -> list[str]:
    from ..strategies import strategy_names

    return [*dict.fromkeys([*strategy_names(), "auto"])]


def _workloads() -> list[str]:
    from ..workloads import BUILTIN

    return list(BUILTIN)


def _workload_help() -> str:
    from ..workloads import BUILTIN

    return "built-in workload: " + "; ".join(f"{w.name}: {w.description}" for w in BUILTIN.values())


def _tasks() -> list[str]:
    from ..workloads.tasks import TASKS

    return ["auto", *TASKS]


def _trackers() -> tuple:
    from ..track import TRACKER_NAMES

    return TRACKER_NAMES


def _unreachable() -> tuple:
    from ..track import UNREACHABLE_CHOICES

    return UNREACHABLE_CHOICES


def _layouts() -> tuple:
    from ..checkpoint import LAYOUTS

    return LAYOUTS


DEFAULT_BATCH_SIZE = 32  # samples per process per step, where the workload says nothing else
FAULTS = "fault tolerance (see docs/fault-tolerance.md)"
SPEED, MEMORY = "speed", "memory"
WATCHING = "watching the run (see docs/tracking.md)"


@dataclass(frozen=True)
class TrainConfig:
    config_file: Optional[Path] = option(
        None, "take the settings from a YAML or TOML file whose keys are these flags' long names with _ for - "
              "(batch_size: 64); flags given here override it. Every run writes its own as OUT/config.yaml: "
              "--config runs/X/config.yaml repeats run X", flag="--config", metavar="FILE", parse=Path)
    strategy: Optional[str] = option(None, _strategy_help, choices=_strategy_choices, metavar="NAME")
    """Name of the strategy (see `scaletrain.strategies`); None: what the degrees given imply."""
    workload: str = option("digits-cnn", _workload_help, choices=_workloads, metavar="NAME")
    """Built-in workload: model, data and default learning rate and epochs."""
    model: Optional[str] = option(None, "your model factory, returning a torch.nn.Module", metavar="MODULE:FUNCTION")
    dataset: Optional[str] = option(None, "your dataset factory, returning a Dataset (split by --seed) or a "
                                          "(train, held_out) pair", metavar="MODULE:FUNCTION")
    model_config: Optional[str] = option(
        None, "a causal language model built from a transformers config.json or a built-in shape (llama3-8b, "
              "llama3-70b, llama3-405b), trained on synthetic tokens (speed work; as `scaletrain plan --hardware` "
              "plans it)", metavar="NAME|FILE")
    seq_len: Optional[int] = option(None, "tokens per sequence of a language model: stdlib-gpt (default 64), "
                                          "--model-config (default 2048)", metavar="S",
                                    parse=positive_int)
    epochs: Optional[int] = option(None, "passes over the training data (default: the workload's; with --max-steps, "
                                         "as many as it takes)", parse=positive_int)
    max_steps: Optional[int] = option(None, "stop after N optimizer steps, with the final evaluation and checkpoint as "
                                            "at an epoch's end", metavar="N", parse=positive_int)
    batch_size: Optional[int] = option(None, "samples per process per step (default 32; stdlib-gpt with --seq-len: as "
                                             "many as make 2,048 tokens, at least 1)", parse=positive_int)
    eval_batch_size: int = option(256, "samples per process per evaluation step", parse=positive_int)
    lr: Optional[float] = option(None, "learning rate (default: the workload's)", parse=positive_float)
    task: str = option("auto", "what the model learns, which decides loss and held-out metrics: classification "
                               "(accuracy), regression (MSE), lm (per-position cross-entropy; perplexity), own (the "
                               "model returns its loss, e.g. dict batches with labels); auto: the workload's, or told "
                               "from your dataset's samples", choices=_tasks)
    clip_grad_norm: Optional[float] = option(None, "scale gradients down to this norm (the whole model's, across "
                                                   "shards and stages) before each optimizer step", metavar="MAX",
                                             parse=positive_float)
    seed: int = option(0, f"seeds weights, held-out split and shuffling, 0 to {MAX_SEED} (default 0)",
                       parse=seed_value)
    backend: str = option("auto", "communication backend (default: nccl on CUDA, gloo on CPU)",
                          choices=("auto", "gloo", "nccl", "mpi", "ccl"))
    device: str = option("auto", "cpu, cuda or cuda:N (default: cuda when visible)")
    threads: Optional[int] = option(None, "CPU threads per process (default: cores ÷ processes)", parse=positive_int)
    out: Optional[Path] = option(None, "output folder (default: a new folder under runs/)", parse=Path)
    auto_choice: Optional[str] = option(None, "why --strategy auto chose what this run trains", hidden=True)
    max_other_load: float = option(
        BENCH_MAX_OTHER_CORES, f"with --strategy auto: a round of its measurement during which other processes kept "
                               f"more than this many cores busy is left out and run again (default "
                               f"{BENCH_MAX_OTHER_CORES:g})", metavar="CORES", parse=positive_float)
    launch: LaunchSettings = field(default_factory=LaunchSettings)
    """How the processes start (their flags are LaunchSettings'; `launch_cmd` shares them)."""
    checkpoint_every: int = option(0, "save a checkpoint into OUT/checkpoints every STEPS training steps, and at "
                                      "the end", group=FAULTS, metavar="STEPS", parse=positive_int)
    keep_checkpoints: int = option(KEEP_CHECKPOINTS, f"keep the newest K checkpoints (default {KEEP_CHECKPOINTS})",
                                   group=FAULTS, metavar="K", parse=positive_int)
    checkpoint_layout: str = option(
        "auto", "full: one file with the whole model, written by rank 0, readable by any strategy on any number of "
                "processes; sharded: each rank writes its own share (no rank holds the whole model; needs a folder "
                "all nodes share); auto (default): sharded for fsdp when the model's state is 1 GiB or more, else "
                "full", group=FAULTS, choices=_layouts)
    checkpoint_async: bool = option(
        False, "write checkpoints in the background: training stops only while the state is copied into host memory "
               "(pinned on CUDA), and DCP's asynchronous save (or, for the full layout, rank 0's thread) writes it "
               "while training goes on; one is written at a time (the next waits, saying so) and the last is "
               "finished before the run ends; a checkpoint becomes the newest only once complete", group=FAULTS)
    resume: Optional[str] = option(None, "auto: continue from the newest checkpoint in --out if there is one; PATH: "
                                         "a checkpoint folder, a checkpoints folder or an earlier run's --out",
                                   group=FAULTS, metavar="auto|PATH", parse=resume_source)
    max_restarts: int = option(MAX_RESTARTS, "when a process dies, stop the group and restart it up to K times, "
                                             "resuming from the last checkpoint (spawn; under torchrun use its "
                                             "--max-restarts)", group=FAULTS, metavar="K", parse=non_negative_int)
    allow_nonfinite: bool = option(
        False, "keep training when the loss, gradients or weights become NaN or inf (default: stop at the next "
               "check, every --log-every-steps steps and before every checkpoint, naming the step and the likely "
               "cause); checkpoints of non-finite weights are never written", group=FAULTS)
    timeout_seconds: float = option(
        HANG_TIMEOUT_S, f"how long a rank waits for its peers (at start-up and in every collective) before naming "
                        f"the missing ones and exiting; {RULE} (default {format_duration(HANG_TIMEOUT_S)})",
        flag="--timeout", group=FAULTS, metavar="DURATION", parse=duration)
    strategy_options: dict = field(default_factory=dict)
    """Options particular to the strategy, as given (their flags are generated from the strategies')."""
    pin_cores: bool = option(True, "do not bind each process to its own CPU cores (default: bind, when this "
                                   "machine's cores can be shared out and no launcher bound them already)",
                             flag="--no-pin-cores", group=SPEED)
    meta_init: str = option(
        "auto", "build the model on the meta device (no memory) and give each process only its share: always, "
                "never, or auto (default: where no process holds the whole model, such as fsdp, tp and pipeline, and "
                "the model's modules can initialise themselves: reset_parameters or a Hugging Face model); the "
                "weights are those of an ordinary build from the same seed — where replaying the modules' "
                "initialisation would not give them (a buffer or an init of the constructor's own), the model is "
                "built whole, with a line saying why", group=MEMORY,
        choices=("auto", "always", "never"))
    allocator: str = option("auto", ALLOCATOR_HELP, group=MEMORY, choices=ALLOCATOR_NAMES)
    """The CPU memory allocator of the run's processes (scaletrain/memory/allocator.py)."""
    steady_memory: bool = option(False, STEADY_MEMORY_HELP, group=MEMORY)
    trackers: tuple = option(
        (), "also record the run with an experiment tracker, on rank 0: tensorboard (OUT/tensorboard), wandb "
            "(OUT/wandb; offline without a W&B login or network), mlflow (OUT/mlruns, or MLFLOW_TRACKING_URI), csv "
            "(OUT/csv); give it several times for several", flag="--tracker", group=WATCHING, metavar="NAME",
        choices=_trackers, many=True)
    if_tracker_unreachable: str = option(
        "stop", "a tracker whose server does not answer (MLFLOW_TRACKING_URI down) is found in seconds, before "
                "training: stop (default) refuses the run in one line; skip trains without it, with a note",
        group=WATCHING, choices=_unreachable)
    log_every_steps: int = option(
        LOG_EVERY_STEPS, f"record the training loss, learning rate and samples/s every N steps (default "
                         f"{LOG_EVERY_STEPS}) or every --log-every-seconds, whichever comes first: a plain line when "
                         "stdout is not a terminal, a step line in metrics.jsonl, the trackers' scalars",
        group=WATCHING, metavar="N", parse=positive_int)
    log_every_seconds: float = option(LOG_EVERY_SECONDS, f"... or every T seconds (default {LOG_EVERY_SECONDS:g})",
                                      group=WATCHING, metavar="T", parse=positive_float)

    def __post_init__(self) -> None:
        if self.batch_size is None:  # the workload's (a language model's with --seq-len holds its tokens per batch)
            object.__setattr__(self, "batch_size", self._workload_batch_size())

    def _workload_batch_size(self) -> int:
        if self.model_config:
            return DEFAULT_BATCH_SIZE
        from ..workloads import BUILTIN, get_workload

        if self.workload not in BUILTIN:
            return DEFAULT_BATCH_SIZE  # (the unknown name is refused where the workload is built)
        return get_workload(self.workload, self.model, self.dataset, self.seq_len).batch_size

    # -- from and to a command line, and JSON ----------------------------------------------
    @classmethod
    def from_args(cls, args: argparse.Namespace, environ=None) -> "TrainConfig":
        """The configuration a parsed command line gives: the strategy its degrees imply where
        none is named; each tracker once; "auto" for a process that torchrun's agent restarted
        in a run with checkpoints (it resumes, as one restarted by scaletrain does)."""
        from ..strategies import implied_strategy
        from ..strategies.flags import strategy_options_from_args

        values = parsed_values(cls, args)
        options = strategy_options_from_args(args)
        values.update(strategy=values.get("strategy") or implied_strategy(options), strategy_options=options,
                      trackers=tuple(dict.fromkeys(values.get("trackers") or ())))
        config = cls(**values)
        return replace(config, resume=config.resume_after_agent_restart(os.environ if environ is None else environ))

    def resume_after_agent_restart(self, environ) -> Optional[str]:
        """"auto" for a process that torchrun's agent restarted (TORCHELASTIC_RESTART_COUNT > 0)
        in a run with checkpoints, when no --resume was given; else `resume`."""
        restarted = int(environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0) > 0
        return "auto" if self.resume is None and restarted and self.checkpoint_every else self.resume

    def flag_values(self) -> dict:
        """{key: value} as the command line holds them: what config.yaml records."""
        return {**flag_values(self), **self.strategy_options}

    def as_dict(self) -> dict:
        """Every setting, in plain JSON types (the trackers' record of the run)."""
        return json.loads(self.to_json())

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), default=str)

    @classmethod
    def from_json(cls, text: str) -> "TrainConfig":
        values = json.loads(text)
        launch = values.pop("launch", {})
        for name in ("sbatch",):
            launch[name] = Path(launch[name]) if launch.get(name) else None
        launch["launcher_args"] = tuple(launch.get("launcher_args", ()))
        paths = {name: Path(values[name]) if values.get(name) else None for name in ("out", "config_file")}
        return cls(**{**values, **paths,
                      "trackers": tuple(values.get("trackers", ())), "launch": LaunchSettings(**launch)})

    # -- what the settings mean ------------------------------------------------------------
    def with_workload_defaults(self) -> "TrainConfig":
        """Epochs and learning rate left to the workload made explicit (so the recorded
        configuration says what ran); with --max-steps alone the ranks take the epochs it needs."""
        from ..workloads.model_config import workload_for

        workload = workload_for(self)
        epochs = self.epochs if self.max_steps is not None else self.epochs or workload.epochs
        return replace(self, epochs=epochs, lr=self.lr if self.lr is not None else workload.lr)

    @property
    def task_name(self) -> Optional[str]:
        """The task asked for; None: the workload's, or told from the data."""
        return None if self.task == AUTO else self.task
