"""The load-balanced split of sequences among the processes of a context-parallel group.

Causal attention makes later tokens costlier (a token attends to every one before it), so
cutting a sequence into cp consecutive pieces would give the last process most of the
work. Instead the sequence is cut into 2·cp chunks and process i keeps chunks i and
2·cp − 1 − i: an early chunk and its mirror image at the end, the same work for everyone
(ring_attention.py relies on this order). For cp 2 and 8 tokens:

    tokens   0 1 | 2 3 | 4 5 | 6 7
    process  0     1     1     0        process 0 holds 0 1 6 7, process 1 holds 2 3 4 5

`SequenceSplit` is that split for one length: which positions a process holds (its
position ids, for rotary or learned position embeddings), its part of any tensor with a
sequence dimension, and the whole again from every process's parts.

A causal language model's labels are shifted by one token (position t predicts token
t + 1): a shift done after the split would cross the chunks' boundaries, so the labels are
shifted first (`shifted_labels`) and then split like everything else.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..foundation.errors import UsageError, arg

IGNORE_INDEX = -100  # the label of positions that do not count (transformers' convention)


def check_length(length: int, cp: int, seq_len_flag: bool = False) -> None:
    """Refuses a sequence the load-balanced split cannot cut evenly. `seq_len_flag`: the length
    is a built-in language model's, which --seq-len sets; otherwise it is the data's own (a
    --dataset, a user's script), which only the data can change."""
    if length % (2 * cp):
        fit = max(2 * cp, length // (2 * cp) * (2 * cp))
        fix = (f"use sequences of a multiple of {2 * cp} tokens (e.g. {arg('seq_len', fit)})" if seq_len_flag else
               f"pad or cut the data's sequences to a multiple of {2 * cp} tokens (e.g. {fit})")
        raise UsageError(f"context parallel over {cp} processes cuts each sequence into 2 × cp = {2 * cp} equal chunks, "
                         f"but the sequences have {length} tokens; {fix} or another {arg('cp')}")


@dataclass
class SequenceSplit:
    """The positions process `index` of `size` holds of sequences of `length` tokens."""
    length: int
    index: int
    size: int
    _positions: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        check_length(self.length, self.size)

    @property
    def chunk(self) -> int:
        return self.length // (2 * self.size)

    @property
    def local_length(self) -> int:
        return self.length // self.size

    def chunks_of(self, index: int) -> tuple[int, int]:
        return index, 2 * self.size - 1 - index

    def positions(self, device: torch.device | str = "cpu") -> torch.Tensor:
        """The positions (int64, local_length) this process holds, in the order it holds them."""
        device = torch.device(device)
        if device not in self._positions:
            c = self.chunk
            self._positions[device] = torch.cat([torch.arange(i * c, (i + 1) * c, device=device)
                                                 for i in self.chunks_of(self.index)])
        return self._positions[device]

    def part(self, tensor: torch.Tensor, dim: int = 1) -> torch.Tensor:
        """This process's part of `tensor` along its sequence dimension `dim`."""
        if tensor.shape[dim] != self.length:
            raise ValueError(f"expected {self.length} positions along dimension {dim}, got {tuple(tensor.shape)}")
        return tensor.index_select(dim, self.positions(tensor.device))

    def whole(self, parts: list[torch.Tensor], dim: int = 1) -> torch.Tensor:
        """The whole tensor from every process's part (parts in process order)."""
        c = self.chunk
        chunks = [None] * (2 * self.size)
        for index, piece in enumerate(parts):
            first, second = self.chunks_of(index)
            chunks[first], chunks[second] = piece.narrow(dim, 0, c), piece.narrow(dim, c, c)
        return torch.cat(chunks, dim=dim)


def shifted_labels(labels: torch.Tensor, ignore_index: int = IGNORE_INDEX) -> torch.Tensor:
    """The next token's label at every position (the last one ignored): what a causal
    language model's loss compares position t's logits with, computed before the split."""
    return torch.nn.functional.pad(labels[:, 1:], (0, 1), value=ignore_index)
