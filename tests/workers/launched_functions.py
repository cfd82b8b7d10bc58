"""Functions for `scaletrain.launch(fn, nproc=2)`: importable by name, as spawned ranks need."""

import torch
import torch.distributed as dist


def sum_of_ranks(scale: float) -> dict:
    """Joins the group; returns what this rank saw (rank 0's result is the launch's)."""
    dist.init_process_group("gloo")
    total = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(total)
    seen = {"rank": dist.get_rank(), "world_size": dist.get_world_size(), "total": total.item() * scale}
    dist.destroy_process_group()
    return seen


def fail_on_rank_1() -> None:
    dist.init_process_group("gloo")
    if dist.get_rank() == 1:
        raise ValueError("boom on rank 1")
    dist.barrier()  # rank 0 waits here until rank 1's failure reaches it
