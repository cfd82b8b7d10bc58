"""What a process holds of the model (parameters, gradients, optimizer state), pointing an
optimizer at the parameters a strategy replaced or dropped, and turning model and
optimizer into state dicts keyed by the user's own parameter names and back.

State goes through torch.distributed.checkpoint.state_dict whatever wraps the model: it
drops DDP's `module.` prefix, knows FSDP2's DTensor shards, and — with the optimizer state
flattened to one key per parameter and setting (`state.fc1.weight.exp_avg`,
`param_groups.fc1.weight.lr`) — gives state dicts in which a process's share of the model
is a plain subset of the whole. So pipeline stages' shares merge into one checkpoint, and
any share of it loads into any layout.
"""

from __future__ import annotations

import contextlib
from typing import Iterable, Optional

import torch
import torch.distributed as dist
from torch import nn

from ..process.process_context import ProcessContext


def _state_dict():
    """torch.distributed.checkpoint.state_dict, imported when a state is first taken or put
    back: it takes most of a second, which a process that never does should not pay."""
    from torch.distributed.checkpoint import state_dict

    return state_dict


def local_part(t: torch.Tensor) -> torch.Tensor:
    """The part of a (possibly sharded DTensor) tensor that lives in this process."""
    to_local = getattr(t, "to_local", None)
    return to_local() if callable(to_local) else t


def _bytes(tensors: Iterable[torch.Tensor]) -> int:
    seen, total = set(), 0
    for t in tensors:
        local = local_part(t)
        key = (local.device, local.data_ptr(), local.numel())
        if local.numel() and key not in seen:  # tensors that share memory count once
            seen.add(key)
            total += local.numel() * local.element_size()
    return total


def memory_report(model: nn.Module, optimizer: Optional[torch.optim.Optimizer]) -> dict:
    """Bytes this process holds for parameters, gradients and optimizer state."""
    params = list(model.parameters())
    state = []
    if optimizer is not None:
        for entry in optimizer.state.values():
            state.extend(v for v in entry.values() if isinstance(v, torch.Tensor) and v.dim() > 0)
    report = {"parameters_bytes": _bytes(params),
              "gradients_bytes": _bytes(p.grad for p in params if p.grad is not None),
              "optimizer_state_bytes": _bytes(state)}
    report["total_bytes"] = sum(report.values())
    return report


def gather_memory(ctx: ProcessContext, model: nn.Module, optimizer: Optional[torch.optim.Optimizer]) -> list[dict]:
    """Every rank's memory report, in rank order. Collective."""
    mine = memory_report(model, optimizer)
    keys = list(mine)
    local = torch.tensor([mine[k] for k in keys], dtype=torch.float64, device=ctx.gather_device)
    if ctx.distributed:
        gathered = [torch.zeros_like(local) for _ in range(dist.get_world_size())]
        dist.all_gather(gathered, local)
    else:
        gathered = [local]
    return [{"rank": r, **{k: int(v) for k, v in zip(keys, row.tolist())}} for r, row in enumerate(gathered)]


def retarget_optimizer(optimizer: Optional[torch.optim.Optimizer], before: dict[str, nn.Parameter],
                       after: nn.Module) -> Optional[torch.optim.Optimizer]:
    """Points the user's optimizer, in place, at `after`'s parameters.

    `before` maps the names of the parameters the optimizer was built on; parameters that
    `after` no longer has (another pipeline stage's) are dropped, parameters it replaced
    (FSDP's sharded ones) are swapped in. In place, so the user's own optimizer object — and
    any learning-rate scheduler already bound to it — drives the parameters that train."""
    if optimizer is None:
        return None
    if optimizer.state:
        raise ValueError("call run.setup(model, optimizer) before the optimizer's first step")
    name_of = {id(p): name for name, p in before.items()}
    now = dict(after.named_parameters())
    for group in optimizer.param_groups:
        group["params"] = [now[name_of[id(p)]] for p in group["params"] if name_of.get(id(p)) in now]
        _one_tensor_at_a_time_if_mixed(group)
    return optimizer


def _one_tensor_at_a_time_if_mixed(group: dict) -> None:
    """Tensor parallel without FSDP leaves the layers outside its plan (embeddings, norms) as
    plain tensors beside its DTensors; a fused or foreach optimizer step cannot take both in one
    call ("got mixed torch.Tensor and DTensor"), so such a group steps one tensor at a time."""
    from torch.distributed.tensor import DTensor

    kinds = {isinstance(p, DTensor) for p in group["params"]}
    if len(kinds) > 1:
        if group.get("fused"):
            group["fused"] = False
        if "foreach" in group:
            group["foreach"] = False


#: Settings of a parameter group that choose how the optimizer computes, not what: they belong
#: to the layout that runs (tensor parallel alone steps one tensor at a time, see above), not
#: to the checkpoint. A layout without mixed tensors saves fused=True; loading it must not
#: put that back into a group that cannot take it.
IMPLEMENTATION_SETTINGS = ("fused", "foreach", "capturable", "differentiable")


@contextlib.contextmanager
def keeping_implementation(optimizer: Optional[torch.optim.Optimizer]):
    """Around loading an optimizer's state: its groups keep their own IMPLEMENTATION_SETTINGS."""
    groups = optimizer.param_groups if optimizer is not None else []
    kept = [{k: group[k] for k in IMPLEMENTATION_SETTINGS if k in group} for group in groups]
    yield
    for group, settings in zip(optimizer.param_groups if optimizer is not None else [], kept):
        group.update(settings)


def _options(**kwargs):
    return _state_dict().StateDictOptions(flatten_optimizer_state_dict=True, **kwargs)


def _optimizers(optimizer: Optional[torch.optim.Optimizer]) -> tuple:
    return (optimizer,) if optimizer is not None else ()


def _has_params(optimizer: Optional[torch.optim.Optimizer]) -> bool:
    return optimizer is not None and any(group["params"] for group in optimizer.param_groups)


def full_state(module: nn.Module, optimizer: Optional[torch.optim.Optimizer]) -> dict:
    """Collective: rank 0 gets the whole, unsharded state on the CPU, the others {}
    (no rank but the writer holds a second copy of the model)."""
    model_sd, optim_sd = _state_dict().get_state_dict(module, _optimizers(optimizer),
                                        options=_options(full_state_dict=True, cpu_offload=True))
    if not model_sd:
        return {}
    return {"model": model_sd, "optimizer": optim_sd if optimizer is not None else {}}


def load_full_state(module: nn.Module, optimizer: Optional[torch.optim.Optimizer], state: dict) -> None:
    """Collective: rank 0 passes the whole state, the others `{"model": {}, "optimizer": {}}`
    (`"optimizer": None` on every rank when there is none to load); rank 0's copy is sent to
    every rank and re-sharded for the current layout.

    Two calls rather than set_state_dict: given an empty model state (as every rank but 0
    has with broadcast_from_rank0), set_state_dict treats the call as optimizer-only on
    those ranks and skips the model's broadcast that rank 0 then waits for (torch 2.13).
    The optimizer goes first, as in set_state_dict: initialising its state takes a step."""
    sd = _state_dict()
    options = sd.StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    if optimizer is not None and state.get("optimizer") is not None:  # the same answer on every rank
        # Nested here: torch 2.13 cannot load a flattened optimizer state in this mode (it
        # flattens its own local copy too and hands the optimizer a flat dict).
        nested = nest_optimizer_state(module, optimizer, state["optimizer"]) if state["optimizer"] else {}
        with keeping_implementation(optimizer):
            sd.set_optimizer_state_dict(module, (optimizer,), nested, options=options)
    sd.set_model_state_dict(module, state.get("model", {}), options=options)


def nest_optimizer_state(module: nn.Module, optimizer: torch.optim.Optimizer, flat: dict) -> dict:
    """The flattened optimizer state (`state.<param>.<key>`, `param_groups.<param>.<key>`)
    of this optimizer's parameters, in the nested form keyed by parameter name."""
    names = {id(p): name for name, p in module.named_parameters()}
    per_param: dict[str, dict] = {}
    for key, value in flat.items():
        kind, _, rest = key.partition(".")
        fqn, _, setting = rest.rpartition(".")  # settings have no dots; parameter names do
        per_param.setdefault(fqn, {"state": {}, "param_groups": {}})[kind][setting] = value
    state, groups = {}, []
    for group in optimizer.param_groups:
        fqns = [names[id(p)] for p in group["params"]]
        settings: dict = {}
        for fqn in fqns:
            found = per_param.get(fqn, {"state": {}, "param_groups": {}})
            if found["state"]:
                state[fqn] = found["state"]
            settings.update(found["param_groups"])
        groups.append({**{k: v for k, v in group.items() if k != "params"}, **settings, "params": fqns})
    return {"state": state, "param_groups": groups}


def local_state(module: nn.Module, optimizer: Optional[torch.optim.Optimizer]) -> dict:
    """This process's own state, not gathered: DTensor shards under FSDP, plain tensors
    elsewhere. Moved nowhere: a sharded save writes it as it is."""
    model_sd, optim_sd = _state_dict().get_state_dict(module, _optimizers(optimizer), options=_options())
    return {"model": model_sd, "optimizer": optim_sd if _has_params(optimizer) else {}}


def load_local_state(module: nn.Module, optimizer: Optional[torch.optim.Optimizer], state: dict) -> None:
    """Puts back a state shaped like local_state's (each process its own share)."""
    sd, options = _state_dict(), _options()
    if _has_params(optimizer) and state.get("optimizer"):
        with keeping_implementation(optimizer):
            sd.set_optimizer_state_dict(module, (optimizer,), state["optimizer"], options=options)
    sd.set_model_state_dict(module, state["model"], options=options)


class ModuleState:
    """The state of a module and its optimizer, for checkpoints: what a strategy's prepared
    model answers, and what a model the run did not prepare (wrapped by the user) gets."""

    def __init__(self, module: nn.Module):
        self.module = module

    def state_dict(self, full: bool, optimizer: Optional[torch.optim.Optimizer] = None) -> dict:
        return full_state(self.module, optimizer) if full else local_state(self.module, optimizer)

    def load_state_dict(self, state: dict, full: bool, optimizer: Optional[torch.optim.Optimizer] = None) -> None:
        if full:
            load_full_state(self.module, optimizer, state)
        else:
            load_local_state(self.module, optimizer, state)
