"""Turning a training process's state into plain tensors and containers, and back.

Model and optimizer go through torch.distributed.checkpoint.state_dict: with
`full_state_dict=True` it returns the whole, unsharded state keyed by parameter names
whatever wraps the model (DDP's `module.` prefix dropped, FSDP2's DTensor shards
gathered), and `set_state_dict(broadcast_from_rank0=True)` sends rank 0's copy to every
rank and re-shards it for the current layout. So one code path serves one process, DDP and
FSDP on any world size, and a checkpoint is portable between them.
"""

from __future__ import annotations

import random
from typing import Any, Optional

import numpy as np
import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_state_dict, set_model_state_dict,
                                                     set_optimizer_state_dict)


def gather_model_and_optimizer(model: nn.Module, optimizer: Optional[torch.optim.Optimizer]) -> tuple[dict, dict]:
    """Collective: every rank calls it; rank 0 gets the full state on the CPU, the others
    get empty dicts (no rank but the writer holds a second copy of the model)."""
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    optimizers = (optimizer,) if optimizer is not None else ()
    model_state, optim_state = get_state_dict(model, optimizers, options=options)
    return model_state, (optim_state if optimizer is not None else {})


def apply_model_and_optimizer(model: nn.Module, optimizer: Optional[torch.optim.Optimizer],
                              model_state: dict, optim_state: Optional[dict]) -> None:
    """Collective: rank 0 passes the loaded state, the others empty dicts.

    Two calls rather than set_state_dict: given an empty model state (as every rank but 0
    has with broadcast_from_rank0), set_state_dict treats the call as optimizer-only on
    those ranks and skips the model's broadcast that rank 0 then waits for (torch 2.13).
    The optimizer goes first, as in set_state_dict: initialising its state takes a step."""
    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    if optimizer is not None and optim_state is not None:
        set_optimizer_state_dict(model, (optimizer,), optim_state, options=options)
    set_model_state_dict(model, model_state, options=options)


def capture_rng() -> dict:
    """This process's random-number states, as tensors and plain values only (so that the
    restricted unpickler can read them back)."""
    np_state = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": {"name": np_state[0], "keys": torch.from_numpy(np_state[1].astype(np.int64)),
                  "pos": int(np_state[2]), "has_gauss": int(np_state[3]), "cached_gaussian": float(np_state[4])},
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict) -> None:
    random.setstate(_as_tuple(state["python"]))
    n = state["numpy"]
    np.random.set_state((n["name"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"],
                         n["cached_gaussian"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        states = state["cuda"]
        if len(states) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(states)


def _as_tuple(value: Any) -> Any:
    """random.setstate wants tuples all the way down; storage may have made them lists."""
    if isinstance(value, (list, tuple)):
        return tuple(_as_tuple(v) for v in value)
    return value
