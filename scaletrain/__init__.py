"""scaletrain: ordinary PyTorch training on many processes, devices and machines.

    import scaletrain
    with scaletrain.init(strategy="ddp") as run:
        model, optimizer = run.setup(model, optimizer)
        ...
"""

from .api import Run, init
from .checkpoint import CheckpointError, Checkpointer
from .environment import DistEnv, detect
from .errors import UsageError
from .version import __version__


__all__ = ["init", "Run", "detect", "DistEnv", "UsageError", "Checkpointer", "CheckpointError", "__version__"]
