"""`scaletrain.plan.cluster`: GPU clusters the user has not got, predicted from a hardware
profile and a model's shape — nothing measured (`scaletrain plan --hardware`). One entry:
`plan_cluster(ClusterRequest) -> ClusterPlan`, which `scaletrain.plan.make_plan` calls."""

from .planner import ClusterPlan, ClusterRequest, plan_cluster

__all__ = ["plan_cluster", "ClusterRequest", "ClusterPlan"]
