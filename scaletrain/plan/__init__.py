"""`scaletrain.plan`: predictions of speed and memory for configurations of the parallelisms,
before running them — and the choice of one.

One entry: `make_plan(PlanRequest) -> Plan`. A request names the model and data
(`Training`), the machines (`Machine`: machines like this one, which are measured), the
configurations to predict or to choose among
(`Candidates`) and how the measurements are made (`Measuring`); the plan holds the
measurements, the predictions with their intervals, the expected error, the conclusions and,
asked to choose, the choice. `scaletrain plan`, `scaletrain bench` and `scaletrain train
--strategy auto` all plan through it. A GPU cluster the user has not got (a `ClusterRequest`,
`plan --hardware`) is planned from a hardware profile by the subpackage
`scaletrain.plan.cluster`, which `make_plan` hands it to.
"""

from .machine import Machine, default_machine
from .planner import make_plan
from .request import Candidates, Measuring, OneRound, PlanRequest, Training
from .result import Plan

__all__ = ["make_plan", "PlanRequest", "Plan", "Training", "Machine", "default_machine", "Candidates", "Measuring",
           "OneRound"]
