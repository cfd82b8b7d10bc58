"""Built-in workloads (model + data + defaults) and users' own, behind one `Workload` value."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from torch import nn
from torch.utils.data import Dataset

from ..errors import UsageError
from .digits import digits_datasets
from .factories import build_user_datasets, build_user_model
from .gpt import byte_gpt
from .models import cifar_cnn, digits_cnn, digits_mlp, wide_mlp
from .synthetic import synthetic_images
from .text import stdlib_text_datasets


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    build_model: Callable[[], nn.Module]
    build_datasets: Callable[[int], tuple[Dataset, Dataset]]  # seed -> (train, held_out)
    lr: float = 1e-3
    epochs: int = 10
    task: Optional[str] = "classification"  # see workloads.tasks; None: derived from the data

    def training_task(self, sample=None):
        """The workload's task (`workloads.tasks.Task`: loss and held-out metrics), told from a
        training sample when the workload does not say."""
        from .tasks import derive, get_task

        return get_task(self.task or (derive(sample) if sample is not None else "classification"))


BUILTIN: dict[str, Workload] = {w.name: w for w in (
    Workload("digits-cnn", "small CNN on scikit-learn's handwritten digits (real data)", digits_cnn, digits_datasets,
             lr=2e-3, epochs=8),
    Workload("digits-mlp", "MLP on scikit-learn's handwritten digits (real data)", digits_mlp, digits_datasets,
             lr=1e-3, epochs=10),
    Workload("synthetic-cnn", "the 32×32 colour-image CNN on synthetic images (speed work)", cifar_cnn,
             synthetic_images, lr=1e-3, epochs=2),
    Workload("synthetic-mlp", "a wide MLP (10.5 M parameters) on synthetic images: communication-bound (speed work)",
             wide_mlp, synthetic_images, lr=1e-4, epochs=2),
    Workload("stdlib-gpt", "a byte-level GPT (3 blocks, 0.4 M parameters) on the Python standard library's own "
             "source (real text, on every machine): held-out loss and perplexity", byte_gpt, stdlib_text_datasets,
             lr=3e-3, epochs=1, task="lm"),
)}


def get_workload(name: str, model: Optional[str] = None, dataset: Optional[str] = None) -> Workload:
    """A built-in workload, with its model and/or dataset replaced by the user's factories."""
    if name not in BUILTIN:
        raise UsageError(f"unknown workload {name!r}; choose one of: {', '.join(BUILTIN)} (--workload)")
    base = BUILTIN[name]
    if model is None and dataset is None:
        return base
    build_model = (lambda: build_user_model(model)) if model else base.build_model
    build_datasets = (lambda seed: build_user_datasets(dataset, seed)) if dataset else base.build_datasets
    label = " + ".join(filter(None, [model and f"model {model}", dataset and f"dataset {dataset}"]))
    # The user's data may be another kind of problem: told from its samples unless --task says.
    return Workload(f"{name} ({label})", base.description, build_model, build_datasets, base.lr, base.epochs,
                    task=None if dataset else base.task)
