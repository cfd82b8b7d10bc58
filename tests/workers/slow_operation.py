"""Both ranks in one watched operation, rank 0 busy in it for 2.5 × the timeout: a long
operation that every rank is in is not a hang, so nobody may be stopped."""

import sys
import time
from datetime import timedelta

import scaletrain

TIMEOUT_S = 3.0

run = scaletrain.init(strategy="ddp", timeout=timedelta(seconds=TIMEOUT_S))
with run.watch("slow operation"):
    if run.rank == 0:
        time.sleep(2.5 * TIMEOUT_S)
    run.barrier()
run.print("both ranks came through")
run.close()
sys.exit(0)
