"""Rank 1 never joins the process group (it stops itself with SIGSTOP, or with --sleep
just sleeps); the others wait for it in init_process_group."""
import os
import signal
import sys
import time

if __name__ == "__main__":
    if os.environ["RANK"] == "1":
        if "--sleep" in sys.argv:
            time.sleep(120)
        os.kill(os.getpid(), signal.SIGSTOP)
    import torch.distributed as dist

    dist.init_process_group("gloo")
    print("joined", flush=True)
