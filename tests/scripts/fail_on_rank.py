"""Raises on one rank (default 1) after joining the group; the others wait in a collective."""
import sys
import time

import torch
import torch.distributed as dist


def explode(rank):
    raise ValueError(f"boom on rank {rank}")


if __name__ == "__main__":
    failing = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    dist.barrier()
    if rank == failing:
        time.sleep(0.5)
        explode(rank)
    # The others block here until the launcher stops them (or their peer's loss reaches them).
    dist.all_reduce(torch.ones(1))
    time.sleep(60)
