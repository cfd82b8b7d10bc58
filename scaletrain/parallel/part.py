"""What the parallelisms transform: a model being prepared for one process.

A parallelism (see `scaletrain.parallel.PARALLELISMS`) is a small object with a `name`, an
`enabled(config)` test and an `apply(part, config, topology)` that changes the `ModelPart` in
place, following the configuration (`config.ParallelConfig`) on this process's place in the
mesh (`topology.Topology`): it may
replace `module` by this process's share (a pipeline stage), wrap `model` (DDP), change the
parameters (tensor parallel and FSDP make them DTensors), and say how the part trains
(`runner`), synchronises (`no_sync`) and what it holds (`facts`, `banner`).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from torch import nn


@dataclass
class ModelPart:
    """A model on its way to being trained by one process."""
    module: nn.Module
    """The user's module, or this process's stage of it: parameters under the user's names."""
    model: nn.Module
    """What training calls (the module itself, or a wrapper around it such as DDP)."""
    runner: Any = None
    """How a forward and backward run, when not as one call of `model` (a pipeline's schedule)."""
    no_sync: Callable[[], Any] = contextlib.nullcontext
    """A context in which backward does not synchronise gradients (accumulation)."""
    casts_itself: bool = False
    """True when the model computes in the chosen precision by itself (FSDP's policy): no autocast."""
    returned: Optional[nn.Module] = None
    """What `run.setup` hands back, when not `model` (a pipeline stage, which only the run drives)."""
    facts: dict = field(default_factory=dict)
    """What this run holds, for summary.json."""
    banner: list = field(default_factory=list)
    """Lines the run prints on rank 0 (the split it made, ...)."""
    after_optimizer_step: list = field(default_factory=list)
    """Calls to make after each step of the optimizer (float8's scales, computed at once)."""
    tp_rules: dict = field(default_factory=dict)
    """Tensor parallel's rules ({module path or pattern: style}), read from the whole model
    before any cut."""
    sharded_apart: dict = field(default_factory=dict)
    """{module path: borrowing dimension}: modules whose parameters a parallelism split over a
    dimension that borrows the data-parallel processes (expert parallel's experts, over "ep"):
    FSDP shards each over the processes that dimension leaves, as a group of its own."""
