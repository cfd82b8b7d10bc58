"""Rank 1 is stopped (SIGSTOP) while it waits inside an all-reduce; rank 0 joins that
all-reduce later and waits for it in vain. Run under `scaletrain launch --nproc-per-node 2`:

    hang_in_allreduce.py DUMP_DIR

Three all-reduces go through first; the fourth is the one the job hangs in. Rank 1 stops
itself from a thread 1.5 s after entering it (as a frozen process or machine would), so the
moment is inside the collective whatever the machine's load.
"""

import os
import signal
import sys
import threading
import time

import torch

import scaletrain


def main() -> None:
    with scaletrain.init(strategy="ddp", timeout=5, dump_dir=sys.argv[1]) as run:
        for _ in range(3):
            run.sum(torch.ones(1024))
        run.print("three all-reduces done", flush=True)
        if run.rank == 1:
            threading.Timer(1.5, lambda: os.kill(os.getpid(), signal.SIGSTOP)).start()
        else:
            time.sleep(3)  # rank 1 is inside the all-reduce, and stopped, by the time rank 0 enters it
            print(f"rank 0 enters the fourth all-reduce at {time.time():.3f}", flush=True)
        run.sum(torch.ones(1024))
        run.print("the fourth all-reduce finished?!", flush=True)


if __name__ == "__main__":
    main()
