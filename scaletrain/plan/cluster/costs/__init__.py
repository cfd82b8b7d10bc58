"""The cluster planner's cost terms, one module per parallelism of
`scaletrain.parallel.PARALLELISMS` that talks across GPUs (named as the parallelism), each
registering what it adds to a step (`registry.ClusterCostTerms`); `cluster/step.py` sums them.
A new parallelism's cluster costs are a module here and its line below (expert parallel's:
`expert_parallel.py`, a `per_layer` term for its all-to-alls and a `memory` term)."""

from . import (  # noqa: F401 - imported to register their cost terms
    context_parallel,
    data_parallel,
    expert_parallel,
    pipeline,
    tensor_parallel,
)
from .registry import ClusterCostTerms, Schedule, enabled, register, registered  # noqa: F401
