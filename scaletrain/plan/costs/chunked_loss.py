"""The chunked loss's cost terms: none of their own. It computes the same loss a chunk of
tokens at a time, with less memory at the loss; the step the probe measures (one process,
with the run's defaults) already has it, so nothing is added or taken away here."""

from __future__ import annotations

from .registry import CostTerms, register

COSTS = register(CostTerms("chunked_loss", distributes=False))
