"""Fused norms' cost terms: none of their own. The fused kernel computes what the module did,
faster on a GPU; the step the probe measures (one process, with the run's defaults) already
has it, so nothing is added or taken away here."""

from __future__ import annotations

from .registry import CostTerms, register

COSTS = register(CostTerms("fused_norms", distributes=False))
