"""Two hang-detection cases in one launch. First, both ranks in one watched operation, rank 0
busy in it for 2.5 × the timeout: a long operation that every rank is in is not a hang, so
nobody may be stopped. Then rank 0 is late before `run.setup` (building its data, say) while
rank 1 waits in DDP's construction: that is watched too, so rank 1 names rank 0 and exits 3
within the timeout instead of failing later in Gloo's own timeout, blaming itself."""

import sys
import time
from datetime import timedelta

import torch

import scaletrain

TIMEOUT_S = 3.0

run = scaletrain.init(strategy="ddp", timeout=timedelta(seconds=TIMEOUT_S))
with run.watch("slow operation"):
    if run.rank == 0:
        time.sleep(2.5 * TIMEOUT_S)
    run.barrier()
run.print("both ranks came through")
if run.rank == 0:
    time.sleep(10 * TIMEOUT_S)  # late: rank 1 gives up long before this ends
model = torch.nn.Linear(4, 2)
run.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
run.print("rank 0 was not named")
run.close()
sys.exit(0)
