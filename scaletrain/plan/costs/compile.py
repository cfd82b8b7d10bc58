"""torch.compile's cost terms: none. A compiled block runs the same arithmetic; what the
compiler saves is not predicted, and its first steps' compilation is not a step's cost, so a
configuration with compilation is predicted as the same configuration without it."""

from __future__ import annotations

#: Compilation changes how one process computes, not how processes share the work.
DISTRIBUTES = False
