"""A workload's model built on the meta device: shapes and names only, no memory and next to
no time, for the checks made before any process starts (a strategy's split, tensor-parallel
plan, micro-batches)."""

from __future__ import annotations

from ..foundation.errors import UsageError


def meta_model(workload):
    """The workload's model with its parameters on the meta device (shapes and names only).
    A factory that cannot build there (it loads weights from a file, say) is built as it is."""
    import torch

    try:
        with torch.device("meta"):
            return workload.build_model()
    except UsageError:
        raise
    except Exception:  # noqa: BLE001 - whatever the factory needs that meta tensors lack
        return workload.build_model()
