"""Context parallel, applied after tensor parallel and before activation checkpointing,
compilation and the data-parallel wrappers: every sequence split among the `cp` processes
of the mesh's "cp" dimension, attention computed across them (cp_attention.py,
ring_attention.py).

The processes of a context-parallel group read the same batch (the loaders give them the
same data-parallel shard) and hold the same weights (FSDP shards over dp_shard × cp, DDP
averages over dp_replicate × cp). What `run.setup` returns splits each call itself, so a
training step — `run.train_step`, or a hand-written `model(**batch)` — takes whole
sequences as without context parallel:

- every tensor of the call with the sequence's length in dimension 1 (token ids, embeddings,
  labels, a targets tensor given to train_step) is cut to this process's part by the
  load-balanced split (sequence_split.py);
- positions follow the split: a Hugging Face model gets `position_ids`, others read
  `token_positions` (the built-in GPT's learned position table does);
- a causal language model's own loss (`labels`): the labels are shifted before the split, and
  the loss is divided by the whole batch's count of labelled tokens (÷ cp, as the gradients
  are averaged over the group), so that it is the mean over every token of the batch, not
  over each process's part; a loss function given to train_step is averaged over the
  processes' parts (the same when every part has as many tokens that count: always, for a
  loss over every position);
- the loss a process sees is the whole batch's (its gradient flows through this process's
  part alone).

Evaluation (`run.evaluate`) runs whole sequences through the model, unsplit.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

import torch
import torch.distributed as dist
from torch import nn

from ..data.batches import call_model, compute_loss, first_tensor, own_loss, split
from ..foundation.errors import UsageError, arg
from . import cp_attention
from .blocks import model_blocks
from .config import ParallelConfig
from .dims import CP
from .part import ModelPart
from .sequence_split import IGNORE_INDEX, SequenceSplit, shifted_labels
from .topology import Topology


def sequence_part(tensor: torch.Tensor, dim: int = 1) -> torch.Tensor:
    """This process's part of a whole-sequence tensor (targets for a loss of your own) in the
    context-parallel forward in progress; the tensor itself without context parallel."""
    active = cp_attention.current()
    if active is None or tensor.dim() <= dim or tensor.shape[dim] != active.split.length:
        return tensor
    return active.split.part(tensor, dim)


class Splitter:
    """Cuts the calls of one context-parallel group's model, and makes its losses whole."""

    def __init__(self, topology: Topology, hf: bool):
        self.cp, self.index = topology.dims.cp, topology.coords[CP]
        self.group = topology.group(CP)
        ctx = topology.ctx
        self.path = "torch" if cp_attention.torch_path_available(ctx.device.type, ctx.backend) else "ring"
        self.mesh = topology.submesh(CP) if self.path == "torch" else None
        self.hf = hf
        self.checked = False
        self._splits: dict[int, SequenceSplit] = {}

    # -- the call --------------------------------------------------------------------------
    def split_call(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        length = _sequence_length(args, kwargs)
        if args and self.hf and "input_ids" not in kwargs:  # model(ids, ...): named, as the rules below read it
            kwargs, args = {"input_ids": args[0], **kwargs}, args[1:]
        if length not in self._splits:
            self._splits[length] = SequenceSplit(length, self.index, self.cp)
        split_ = self._splits[length]
        cp_attention.activate(cp_attention.Active(split_, self.group, self.mesh, self.path))
        if self.hf:
            kwargs = self._hf_kwargs(kwargs, split_)
        memo: dict[int, Any] = {}
        return self.split_tree(args, memo), {k: self.split_tree(v, memo) for k, v in kwargs.items()}

    def split_tree(self, value: Any, memo: Optional[dict] = None) -> Any:
        """`value` (tensors, possibly in tuples, lists and dicts) with every whole-sequence
        tensor cut to this process's part, each tensor once."""
        memo = {} if memo is None else memo
        if isinstance(value, torch.Tensor):
            if id(value) not in memo:
                memo[id(value)] = sequence_part(value)
            return memo[id(value)]
        if isinstance(value, Mapping):
            return {k: self.split_tree(v, memo) for k, v in value.items()}
        if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
            return type(value)(self.split_tree(v, memo) for v in value)
        return value

    def _hf_kwargs(self, kwargs: dict, split_: SequenceSplit) -> dict:
        kwargs = dict(kwargs)
        mask = kwargs.pop("attention_mask", None)
        if mask is not None and not bool(mask.bool().all()):
            raise UsageError("context parallel splits whole sequences, but this batch's attention_mask has padding; "
                             "pack the sequences to their full length (no padding), or use another parallelism "
                             "than cp")
        labels = kwargs.get("labels")
        if labels is not None:
            # Shift before splitting: the next token of a part's last position is in another part.
            shifted = kwargs.get("shift_labels")
            shifted = shifted_labels(labels) if shifted is None else shifted
            counted = kwargs.get("num_items_in_batch")
            counted = (shifted != IGNORE_INDEX).sum() if counted is None else torch.as_tensor(counted)
            kwargs["labels"] = kwargs["shift_labels"] = shifted
            kwargs["num_items_in_batch"] = counted.to(shifted.device, torch.float32) / self.cp
        if kwargs.get("position_ids") is None:  # this part's positions (not cut again: not the whole length)
            device = first_tensor(kwargs).device
            kwargs["position_ids"] = split_.positions(device).unsqueeze(0)
        kwargs["use_cache"] = False
        return kwargs

    # -- after the call ----------------------------------------------------------------------
    def finish(self, output: Any) -> Any:
        self._check_attention()
        loss = own_loss(output)
        if loss is not None:
            whole = self.whole_value(loss)
            if isinstance(output, Mapping) or hasattr(output, "__setitem__"):
                output["loss"] = whole
            else:
                output.loss = whole
        return output

    def _check_attention(self) -> None:
        if self.checked:
            return
        active = cp_attention.current()
        if active is not None and active.calls == 0:
            raise UsageError("context parallel split the sequences, but the model computed no attention that could be "
                             "sent round the context-parallel group (it must call torch's scaled_dot_product_attention "
                             "inside its blocks, be a Hugging Face model, or call "
                             "scaletrain.context_parallel_attention); without it the parts would not see each other: "
                             f"drop {arg('cp')}")
        self.checked = True

    def whole_value(self, loss: torch.Tensor) -> torch.Tensor:
        """The loss with the group's mean as its value and this process's part as its gradient."""
        mean = loss.detach().clone()
        dist.all_reduce(mean, group=self.group)
        return loss + (mean / self.cp - loss.detach())


def _sequence_length(args: tuple, kwargs: dict) -> int:
    for value in (kwargs.get("input_ids"), kwargs.get("inputs_embeds"), *args, *kwargs.values()):
        if isinstance(value, torch.Tensor) and value.dim() >= 2:
            return int(value.shape[1])
    raise UsageError(f"context parallel splits sequences, but the model was called without a tensor of (batch, "
                     f"tokens, ...) to split; drop {arg('cp')} for this model")


class ContextParallelModel(nn.Module):
    """What `run.setup` returns under context parallel: the model, called with whole
    sequences, runs on this process's part of them."""

    def __init__(self, module: nn.Module, splitter: Splitter):
        super().__init__()
        self.module = module
        self.splitter = splitter

    def forward(self, *args, **kwargs):
        args, kwargs = self.splitter.split_call(args, kwargs)
        return self.splitter.finish(self.module(*args, **kwargs))

    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._modules["module"], name)  # the model's own attributes (config, generate, ...)


class ContextParallelRunner:
    """A training step under context parallel (the targets split like the inputs), and
    predictions on whole sequences."""

    def __init__(self, part: ModelPart, splitter: Splitter, hf_attention: Optional[str]):
        self.part, self.splitter, self.hf_attention = part, splitter, hf_attention

    def forward_backward(self, batch, targets, loss_fn, scale, autocast) -> torch.Tensor:
        inputs, rest = split(batch, targets)
        with autocast():
            output = call_model(self.part.model, inputs)  # the wrapper (inside DDP, if any) splits
            rest = self.splitter.split_tree(rest)
            loss = compute_loss(output, rest, loss_fn, inputs)
            if loss_fn is not None or own_loss(output) is None:
                loss = self.splitter.whole_value(loss)
        del output  # the logits are not kept through backward
        (loss if isinstance(scale, float) and scale == 1.0 else loss * scale).backward()
        return loss.detach()

    def predict(self, inputs, autocast):
        cp_attention.activate(None)
        module = self.part.module
        if self.hf_attention is not None:
            module.set_attn_implementation(self.hf_attention)  # its own masks, for padded evaluation data
        try:
            with autocast():
                return call_model(module, inputs)
        finally:
            if self.hf_attention is not None:
                module.set_attn_implementation(cp_attention.HF_NAME)


class ContextParallel:
    name = "context_parallel"

    def enabled(self, config: ParallelConfig) -> bool:
        return config.dims.cp > 1

    def apply(self, part: ModelPart, config: ParallelConfig, topology: Topology) -> None:
        module = part.module
        check_context_parallel(module)
        hf = cp_attention.is_hf_model(module)
        splitter = Splitter(topology, hf)
        if splitter.path == "torch":
            cp_attention.enable_torch_path()
        hf_attention = None
        if hf:
            hf_attention = cp_attention.use_hf_interface(module)
            how = "transformers' attention interface"
        else:
            blocks = model_blocks(module)
            cp_attention.route_blocks(module, blocks)
            how = f"scaled_dot_product_attention in {len(blocks) or 1} block(s)"
        part.model = ContextParallelModel(part.model, splitter)
        part.runner = ContextParallelRunner(part, splitter, hf_attention)
        cp = config.dims.cp
        kernel = "torch's context parallel" if splitter.path == "torch" else "scaletrain's ring"
        part.facts["context_parallel"] = {"cp": cp, "attention": splitter.path, "split": "load-balanced"}
        part.banner.append(f"context parallel: sequences split {cp} ways (chunks i and {2 * cp - 1}−i), attention "
                           f"round the ring through {how} ({kernel})")


def check_context_parallel(model: nn.Module) -> None:
    """Refuses, in one line, a model context parallel cannot split (read from its structure
    only: a model built on the meta device serves). A model whose attention cannot be routed
    round the ring is found at its first step."""
    if cp_attention.is_hf_model(model):
        implementation = model.config._attn_implementation
        if implementation not in ("sdpa", "eager", cp_attention.HF_NAME, None):
            raise UsageError(f"{arg('cp')}: the model's attention is {implementation!r}, which context parallel cannot "
                             f"replace; build it with attn_implementation='sdpa', or drop {arg('cp')}")
        if getattr(model.config, "is_encoder_decoder", False):
            raise UsageError(f"{arg('cp')}: {type(model).__name__} is an encoder-decoder, whose cross-attention "
                             f"context parallel does not split; drop {arg('cp')}")
