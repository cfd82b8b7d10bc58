"""Splitting a model into consecutive parts: the one place where mp, DDP + model parallel and pipeline
decide which blocks go together.

A model can be split when it has a view as consecutive units (stage_units: an
`nn.Sequential`'s top-level blocks, or a Llama-style Hugging Face decoder's embeddings,
layers and head): any cut between two units is a valid cut. Parts keep the units' own
names, so a part's `named_parameters()` are the whole model's names ("fc1.1.weight",
"model.layers.3.mlp.up_proj.weight"), whatever the split.

Two ways to choose the cuts:
- automatically, balancing the parameter count of the parts (the contiguous partition whose
  heaviest part is lightest; parameters stand for memory and, roughly, for work);
- by name: `split_points=["conv2", "fc2"]` starts a new part at each named block.
"""

from __future__ import annotations

from typing import Optional, Sequence

from torch import nn

from ..foundation.errors import UsageError, arg
from .stage_units import stage_module, units_of


def parse_split_points(text: Optional[str | Sequence[str]]) -> Optional[tuple[str, ...]]:
    """'conv2,fc2' or ['conv2', 'fc2'] -> ('conv2', 'fc2'); None stays None."""
    if text is None:
        return None
    names = tuple(n.strip() for n in (text.split(",") if isinstance(text, str) else text))
    if not names or any(not n for n in names):
        raise UsageError(f"{arg('split_points', text)}: expected block names separated by commas, e.g. conv2,fc1")
    return names


def balanced_cuts(weights: Sequence[int], parts: int) -> list[int]:
    """Start indices of `parts` contiguous groups of `weights` (each non-empty) such that the
    heaviest group is as light as possible. Exact dynamic programme; models have few blocks."""
    n = len(weights)
    prefix = [0]
    for w in weights:
        prefix.append(prefix[-1] + w)
    inf = float("inf")
    # best[k][i]: lightest possible heaviest group when the first i blocks form k groups.
    best = [[inf] * (n + 1) for _ in range(parts + 1)]
    cut = [[0] * (n + 1) for _ in range(parts + 1)]
    best[0][0] = 0
    for k in range(1, parts + 1):
        for i in range(k, n + 1):
            for j in range(k - 1, i):
                cost = max(best[k - 1][j], prefix[i] - prefix[j])
                if cost < best[k][i]:
                    best[k][i], cut[k][i] = cost, j
    starts, i = [], n
    for k in range(parts, 0, -1):
        i = cut[k][i]
        starts.append(i)
    return starts[::-1]


def cut_blocks(model: nn.Module, parts: Optional[int], split_points: Optional[Sequence[str]],
               what: str, parts_option: str) -> list[list[str]]:
    """Block names of each part. `parts` None: as many as the split points make."""
    units = units_of(model, what)
    names = [unit.name for unit in units]
    if split_points:
        unknown = [p for p in split_points if p not in names]
        if unknown:
            raise UsageError(f"{arg('split_points')}: no block named {', '.join(map(repr, unknown))}; "
                             f"the model's blocks are {', '.join(names)}")
        starts = [names.index(p) for p in split_points]
        if 0 in starts or starts != sorted(set(starts)):
            raise UsageError(f"{arg('split_points', split_points)}: name blocks after the first ({names[0]}), "
                             f"each once, in model order ({', '.join(names)})")
        if parts is not None and parts != len(starts) + 1:
            raise UsageError(f"{arg('split_points')} makes {len(starts) + 1} parts but {arg(parts_option, parts)}; "
                             f"give {arg(parts_option, len(starts) + 1)} or drop one of them")
        starts = [0, *starts]
    else:
        parts = parts or 1
        if parts > len(names):
            raise UsageError(f"{arg(parts_option, parts)}: the model has only {len(names)} blocks "
                             f"({', '.join(names)}) to split; use {arg(parts_option, len(names))} or fewer")
        # +1 per block: among equally heavy splits, prefer ones that spread parameter-free
        # blocks (activations, pooling) instead of piling them onto one part.
        weights = [unit.parameter_count() + 1 for unit in units]
        starts = balanced_cuts(weights, parts)
    ends = [*starts[1:], len(names)]
    return [names[s:e] for s, e in zip(starts, ends)]


def split_model(model: nn.Module, cut: list[list[str]], what: str = "this strategy") -> list[nn.Module]:
    """The parts as modules that share (not copy) the model's units, under their names."""
    units = {unit.name: unit for unit in units_of(model, what)}
    return [stage_module([units[name] for name in part]) for part in cut]


def parameter_counts(parts: Sequence[nn.Module]) -> list[int]:
    return [sum(p.numel() for p in part.parameters()) for part in parts]


def describe_cut(cut: list[list[str]], params: Sequence[int]) -> str:
    """'conv1+conv2 (19k params) | fc1+fc2 (133k params)' for progress output."""
    return " | ".join(f"{'+'.join(part)} ({count / 1000:,.0f}k params)" for part, count in zip(cut, params))
