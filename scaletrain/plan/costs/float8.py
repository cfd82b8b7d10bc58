"""float8 training's cost terms: none yet. It changes how one process computes its linear
layers (and FSDP's gathers, in float8), not how processes share the work; it runs on CUDA GPUs
of compute capability 8.9 and later only, which the planner's measurements on this machine
cannot time, so a configuration with float8 is predicted as the same configuration without
it. (Without this module every choice failed: each parallelism must have one.)"""

from __future__ import annotations

#: float8 changes how one process computes, not how processes share the work.
DISTRIBUTES = False
