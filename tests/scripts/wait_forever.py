"""Joins the group, says it is ready (`ready RANK PID`), then waits for a signal to end it."""
import os
import sys
import time

import torch.distributed as dist

if __name__ == "__main__":
    dist.init_process_group("gloo")
    dist.barrier()
    sys.stdout.write(f"ready {dist.get_rank()} {os.getpid()}\n")  # one write: lines of two ranks never mix
    sys.stdout.flush()
    time.sleep(120)
