"""The cost terms of the parallelisms: one module per parallelism of
`scaletrain.parallel.PARALLELISMS`, named as the parallelism, each turning measurements into
what that parallelism adds to a step (`terms.Terms`, `terms.MemoryParts`) and registering the
answers it gives (`registry.CostTerms`); `step.step_cost` composes them for a configuration.
Adding a parallelism's costs is adding its module here and its line below."""

from . import (  # noqa: F401 - imported to register their cost terms
    activation_checkpointing,
    chunked_loss,
    compile,
    context_parallel,
    data_parallel,
    expert_parallel,
    float8,
    fused_norms,
    local_devices,
    pipeline,
    tensor_parallel,
)
from .registry import CostTerms, NoCost, cost_terms, enabled, every  # noqa: F401
