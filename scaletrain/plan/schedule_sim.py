"""A pipeline step under 1F1B played out micro-batch by micro-batch, with transfers that wait
for their receiver: what the stage boundaries' latency costs where it is milliseconds.

torch's schedule posts each receive just before the stage needs the message, and Gloo sends a
point-to-point message only once its receiver has posted the receive. A transfer posted by
its sender at `sent` and by its receiver at `posted` therefore arrives at
max(sent, posted + L) + L + bytes/bandwidth, L being the link's latency as the probe measures
it (α, a ring step's: on Gloo a message and its receiver's notice) — which on a link of
milliseconds (the test bed's hosts with 2 ms each way: 48–49 ms a step measured against
37–42 predicted from one transfer each way) is most of what a pipeline across machines waits
for. `StageCosts.one_f_one_b`'s closed form counts one transfer each way per micro-batch
beyond the slowest stage, which holds where L is microseconds.

Each stage runs its operations in 1F1B's order: min(m, p − s) forwards, then a backward and
a forward in turn until the forwards are done, then the remaining backwards. A forward of
stage s needs the activations from s − 1; a backward needs the stage's own forward and the
gradients from s + 1; the last stage's backward follows its forward.
"""

from __future__ import annotations

from typing import Sequence

FORWARD = "F"
BACKWARD = "B"


def _order(stage: int, stages: int, microbatches: int) -> list[tuple[str, int]]:
    warmup = min(microbatches, stages - stage)
    order = [(FORWARD, i) for i in range(warmup)]
    forwards = warmup
    for i in range(microbatches):
        order.append((BACKWARD, i))
        if forwards < microbatches:
            order.append((FORWARD, forwards))
            forwards += 1
    return order


def one_f_one_b_seconds(forward_s: Sequence[float], backward_s: Sequence[float], microbatches: int,
                        latency_s: Sequence[float], data_s: float) -> float:
    """When the last stage to finish finishes a step's forwards and backwards: `forward_s`,
    `backward_s` per stage and micro-batch; `latency_s[j]` the latency between stages j and
    j + 1; `data_s` a micro-batch's bytes at the link's bandwidth."""
    stages = len(forward_s)
    orders = [_order(s, stages, microbatches) for s in range(stages)]
    finished: dict[tuple[str, int, int], float] = {}
    free = [0.0] * stages  # when each stage finished its last operation (and posted its next receive)
    next_op = [0] * stages

    def arrival(sent_key: tuple[str, int, int], receiver: int, boundary: int) -> float:
        latency = latency_s[boundary]
        return max(finished[sent_key], free[receiver] + latency) + latency + data_s

    moved = True
    while moved:
        moved = False
        for s in range(stages):
            while next_op[s] < len(orders[s]):
                kind, i = orders[s][next_op[s]]
                if kind == FORWARD:
                    source = (FORWARD, s - 1, i)
                    if s > 0 and source not in finished:
                        break
                    ready = arrival(source, s, s - 1) if s > 0 else 0.0
                    took = forward_s[s]
                else:
                    source = (BACKWARD, s + 1, i)
                    if (FORWARD, s, i) not in finished or (s < stages - 1 and source not in finished):
                        break
                    ready = arrival(source, s, s) if s < stages - 1 else 0.0
                    took = backward_s[s]
                finished[(kind, s, i)] = free[s] = max(free[s], ready) + took
                next_op[s] += 1
                moved = True
    return max(free)
