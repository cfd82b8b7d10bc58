"""torch.compile's cost terms: none. A compiled block runs the same arithmetic; what the
compiler saves is not predicted, and its first steps' compilation is not a step's cost, so a
configuration with compilation is predicted as the same configuration without it."""

from __future__ import annotations

from .registry import CostTerms, register


COSTS = register(CostTerms("compile", distributes=False))
