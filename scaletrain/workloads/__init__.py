"""Built-in workloads (model + data + defaults) and users' own, behind one `Workload` value."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Callable, Optional

from torch import nn
from torch.utils.data import Dataset

from ..foundation.errors import UsageError, arg
from .digits import digits_datasets
from .factories import build_user_datasets, build_user_model
from .gpt import byte_gpt
from .models import cifar_cnn, digits_cnn, digits_mlp, wide_mlp
from .moe_gpt import EXPERTS, TOP_K, byte_moe
from .synthetic import synthetic_images
from .text import CONTEXT, check_seq_len, stdlib_text_datasets


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    build_model: Callable[[], nn.Module]
    build_datasets: Callable[[int], tuple[Dataset, Dataset]]  # seed -> (train, held_out)
    lr: float = 1e-3
    epochs: int = 10
    task: Optional[str] = "classification"  # see workloads.tasks; None: derived from the data
    seq_len: Optional[int] = None
    """Tokens per sequence of a language model (--seq-len changes it); None: not one."""
    batch_size: int = 32
    """Samples per process per step when --batch-size is not given."""

    def training_task(self, sample=None):
        """The workload's task (`workloads.tasks.Task`: loss and held-out metrics), told from a
        training sample when the workload does not say."""
        from .tasks import derive, get_task

        return get_task(self.task or (derive(sample) if sample is not None else "classification"))

    def check_context_parallel(self, cp: int) -> None:
        """Refuses, in one line, context parallel over `cp` processes for a workload whose
        sequences it cannot split (a user's data is checked at its first step)."""
        from ..parallel.sequence_split import check_length

        if cp == 1:
            return
        if self.task in ("classification", "regression"):
            raise UsageError(f"{arg('cp', cp)} splits sequences, but {self.name} has none ({self.task}); use a language "
                             f"model ({arg('workload', 'stdlib-gpt')}, --model-config) or drop {arg('cp')}")
        if self.seq_len is not None:
            check_length(self.seq_len, cp, seq_len_flag=True)


BUILTIN: dict[str, Workload] = {w.name: w for w in (
    Workload("digits-cnn", "small CNN on scikit-learn's handwritten digits (real data)", digits_cnn, digits_datasets,
             lr=2e-3, epochs=8),
    Workload("digits-mlp", "MLP on scikit-learn's handwritten digits (real data)", digits_mlp, digits_datasets,
             lr=1e-3, epochs=10),
    Workload("synthetic-cnn", "the 32×32 colour-image CNN on synthetic images (speed work)", cifar_cnn,
             synthetic_images, lr=1e-3, epochs=2),
    Workload("synthetic-mlp", "a wide MLP (10.5 M parameters) on synthetic images: communication-bound (speed work)",
             wide_mlp, synthetic_images, lr=1e-4, epochs=2),
)}

#: Tokens in a batch of the language models' default: 32 sequences of CONTEXT tokens; longer
#: sequences come fewer to a batch (at least one), so a step costs about as much.
BATCH_TOKENS = 32 * CONTEXT


def stdlib_gpt(seq_len: int = CONTEXT) -> Workload:
    check_seq_len(seq_len)
    return Workload("stdlib-gpt", "a byte-level GPT (3 blocks, 0.4 M parameters) on the Python standard library's own "
                    f"source (real text, on every machine): held-out loss and perplexity; {CONTEXT} tokens per "
                    "sequence, or --seq-len", partial(byte_gpt, context=seq_len),
                    partial(stdlib_text_datasets, context=seq_len), lr=3e-3, epochs=1, task="lm", seq_len=seq_len,
                    batch_size=max(1, BATCH_TOKENS // seq_len))


def stdlib_moe(seq_len: int = CONTEXT) -> Workload:
    check_seq_len(seq_len)
    return Workload("stdlib-moe", f"a byte-level mixture of experts (the stdlib-gpt's attention, 2 blocks whose "
                    f"feed-forwards are {EXPERTS} experts, each token routed to {TOP_K}; 0.47 M parameters) on the "
                    "standard library's source, its router's balance loss added: held-out loss and perplexity, the "
                    f"tokens each expert received; {CONTEXT} tokens per sequence, or --seq-len; --ep splits its "
                    "experts", partial(byte_moe, context=seq_len), partial(stdlib_text_datasets, context=seq_len),
                    lr=3e-3, epochs=1, task="lm", seq_len=seq_len, batch_size=max(1, BATCH_TOKENS // seq_len))


#: The language models, by the tokens per sequence they are built for.
SEQUENCE_WORKLOADS: dict[str, Callable[[int], Workload]] = {"stdlib-gpt": stdlib_gpt, "stdlib-moe": stdlib_moe}
BUILTIN["stdlib-gpt"] = stdlib_gpt()
BUILTIN["stdlib-moe"] = stdlib_moe()


def get_workload(name: str, model: Optional[str] = None, dataset: Optional[str] = None,
                 seq_len: Optional[int] = None) -> Workload:
    """A built-in workload (a language model built for `seq_len` tokens per sequence), with its
    model and/or dataset replaced by the user's factories."""
    if name not in BUILTIN:
        raise UsageError(f"unknown workload {name!r}; choose one of: {', '.join(BUILTIN)} (--workload)")
    base = BUILTIN[name]
    if seq_len is not None and seq_len != base.seq_len:
        if name not in SEQUENCE_WORKLOADS:
            models = ", ".join(SEQUENCE_WORKLOADS)
            raise UsageError(f"{arg('seq_len', seq_len)} sets the tokens per sequence of a language model ({models}, "
                             f"or --model-config), but {name} reads none; drop it, or use {arg('workload', models)}")
        base = SEQUENCE_WORKLOADS[name](seq_len)
    if model is None and dataset is None:
        return base
    build_model = (lambda: build_user_model(model)) if model else base.build_model
    build_datasets = (lambda seed: build_user_datasets(dataset, seed)) if dataset else base.build_datasets
    # Named for what trains: the user's model (on the workload's data), the workload's model on
    # the user's data, or both the user's (the workload then gives only its settings).
    label = (f"model {model} on dataset {dataset}" if model and dataset else
             f"model {model} on {name}'s data" if model else f"{name}'s model on dataset {dataset}")
    # The user's data may be another kind of problem: told from its samples unless --task says.
    return Workload(label, base.description, build_model, build_datasets, base.lr, base.epochs,
                    task=None if dataset else base.task, seq_len=None if dataset else base.seq_len,
                    batch_size=base.batch_size)
