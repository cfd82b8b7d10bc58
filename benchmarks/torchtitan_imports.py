"""Importing torchtitan (0.2.2) on a machine that has only what training needs.

torchtitan's modules import, at module level, packages only its command line, datasets,
tokenizers and TensorBoard logging use — `datasets`, `tokenizers`, `tensorboard` (through
torch.utils.tensorboard), `torchdata` — whichever package of a model is imported. The GPU
benchmarks use its model, parallelisation, float8, garbage collection and Trainer with
their own synthetic tokens, none of those. `install()` puts a small stand-in into
sys.modules for each of them that is missing (never for one that is installed), before
torchtitan is imported; nothing the benchmarks run calls into a stand-in.

scripts/gpu-proof.sh installs what torchtitan needs that is small (tyro and its three
dependencies, torchdata, tomli) from the wheels in scripts/gpu-wheels/ without a network.
"""

from __future__ import annotations

import importlib.util
import sys
import types


def _missing(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is None
    except (ImportError, ValueError):
        return True


def _module(name: str, **attrs) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    module.__path__ = []  # a package: submodules can hang off it
    sys.modules[name] = module
    return module


class _Unused:
    """What a stand-in's names are: anything may be looked up, called, or subclassed at
    import time; nothing the benchmarks run uses it."""

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        return _Unused()

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Unused()


def install() -> list[str]:
    """Stand-ins for the missing packages; returns their names."""
    stood_in = []
    if _missing("tyro"):
        constructors = types.SimpleNamespace(ConstructorRegistry=_Unused, PrimitiveTypeInfo=_Unused,
                                             PrimitiveConstructorSpec=_Unused)
        _module("tyro", constructors=constructors, cli=_Unused(), conf=_Unused())
        stood_in.append("tyro")
    try:
        import torchdata.stateful_dataloader  # noqa: F401  (needs requests and urllib3)
    except ImportError:
        from torch.utils.data import DataLoader

        _module("torchdata")
        _module("torchdata.stateful_dataloader", StatefulDataLoader=DataLoader)
        stood_in.append("torchdata")
    if _missing("datasets"):
        _module("datasets", Dataset=type("Dataset", (), {}), IterableDataset=type("IterableDataset", (), {}),
                load_dataset=_Unused())
        _module("datasets.distributed", split_dataset_by_node=_Unused())
        stood_in.append("datasets")
    if _missing("tokenizers"):
        _module("tokenizers", AddedToken=_Unused, Tokenizer=_Unused)
        stood_in.append("tokenizers")
    if _missing("tensorboard"):
        _module("torch.utils.tensorboard", SummaryWriter=_Unused)  # torch's raises ImportError without it
        stood_in.append("tensorboard")
    if _missing("triton"):  # a CPU machine (CUDA builds of torch bring triton): torchtitan's MoE kernels
        _module("torchtitan.models.moe.kernels", generate_permute_indices=_Unused())
        stood_in.append("triton (torchtitan's MoE kernels)")
    return stood_in
