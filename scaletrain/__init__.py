"""scaletrain: ordinary PyTorch training on many processes, devices and machines.

    import scaletrain
    with scaletrain.init(strategy="ddp") as run:
        model, optimizer = run.setup(model, optimizer)
        ...

    scaletrain.launch(train_fn, nproc=2, args=(config,))   # from a notebook: N local ranks

The names below are imported on first use, not with the package: `import scaletrain.x`
must not pull in torch when `x` does not need it (the command line's --help, the rank
runner that starts every rank before the user's program, `scaletrain env`).
"""

from __future__ import annotations

import importlib

from .version import __version__

_LAZY = {
    "init": ".api", "Run": ".run.run",
    "Checkpointer": ".checkpoint", "CheckpointError": ".checkpoint",
    "detect": ".process.environment", "DistEnv": ".process.environment",
    "UsageError": ".foundation.errors",
    "launch": ".launchers.function", "LaunchError": ".launchers.function",
    # Context parallel's hooks for a model's own attention, positions and loss (docs/context-parallel.md).
    "context_parallel_attention": ".parallel.cp_attention", "token_positions": ".parallel.cp_attention",
    "sequence_part": ".parallel.context_parallel",
}

__all__ = ["init", "Run", "launch", "LaunchError", "detect", "DistEnv", "UsageError", "Checkpointer",
           "CheckpointError", "context_parallel_attention", "token_positions", "sequence_part", "__version__"]


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'scaletrain' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # once imported, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
