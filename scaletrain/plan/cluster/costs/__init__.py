"""The cluster planner's cost terms, one module per parallelism of
`scaletrain.parallel.PARALLELISMS` that talks across GPUs (named as the parallelism), each
registering what it adds to a step (`registry.ClusterCostTerms`); `cluster/step.py` sums them.
A new parallelism's cluster costs are a module here and its line below (expert parallel's
all-to-all: `expert_parallel.py` with a `per_layer` term and, for its experts' weights, a
`memory` term)."""

from . import (  # noqa: F401 - imported to register their cost terms
    context_parallel,
    data_parallel,
    pipeline,
    tensor_parallel,
)
from .registry import ClusterCostTerms, Schedule, enabled, register, registered  # noqa: F401
