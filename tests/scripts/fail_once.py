"""Rank 1 fails on the first attempt (it leaves the file named by argv[1] behind); on the
next attempt every rank joins, all-reduces and says which attempt it was."""
import sys
from pathlib import Path

import torch
import torch.distributed as dist

if __name__ == "__main__":
    marker = Path(sys.argv[1])
    dist.init_process_group("gloo")
    if dist.get_rank() == 1 and not marker.exists():
        marker.write_text("failed")
        raise RuntimeError("the first attempt fails")
    total = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(total)
    print(f"rank {dist.get_rank()} attempt 2 done: {total.item()}", flush=True)
    dist.destroy_process_group()
