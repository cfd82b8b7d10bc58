"""float8 training's cost terms here: none. The plan of this machine times its steps as they
run here, and float8 runs only on GPUs with float8 matrix units, where a probe would time it
as it runs; a configuration with float8 is predicted as the same configuration without it.
The cluster planner (`plan --hardware`) prices float8 from the GPU's fp8 matrix speed."""

from __future__ import annotations

from .registry import CostTerms, register


COSTS = register(CostTerms("float8", distributes=False))
