"""What a parallelism's cost terms read of the step they add to (`StepParts`)."""

from __future__ import annotations

from dataclasses import dataclass

from ..comm import Network
from ..compute import PartTime
from ..config import ClusterConfig, ClusterScenario


@dataclass(frozen=True)
class StepParts:
    config: ClusterConfig
    scenario: ClusterScenario
    net: Network
    layer: PartTime
    """One decoder layer's computation at the micro-batch on this GPU."""
    rest: PartTime
    """The embedding, the final norm, the head and the loss."""
    layer_costs: object
    """The traced layer (`traced.Costs`)."""
    microbatches: int
    chunks: tuple
    """Layers each pipeline rank holds (its stages together)."""
    params_rank: float
    """Parameters of the pipeline rank holding the most, ÷ tp, before FSDP shards them."""
    layer_seconds: float = 0.0
    """One layer's micro-batch with what the parallelisms add to it per layer (set once they have)."""

    @property
    def gpus_per_node(self) -> int:
        return self.scenario.gpus_per_node

    @property
    def tokens_mb(self) -> int:
        """Tokens of one micro-batch on this GPU."""
        return self.config.microbatch * self.scenario.seq // self.config.cp

    @property
    def activation_bytes(self) -> float:
        """One layer's bf16 input on this GPU."""
        return self.tokens_mb * self.scenario.shape.hidden * 2

    @property
    def forwards(self) -> int:
        """Forwards per micro-batch: a layer under full checkpointing runs its forward again."""
        return 2 if self.config.checkpointing == "full" else 1

    @property
    def forward_share(self) -> float:
        layer = self.layer
        return (layer.forward + layer.recompute) / max(layer.total, 1e-12)
