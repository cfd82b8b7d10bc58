"""Does its distributed work, destroys the process group, then keeps the GIL without a break
(as torch's Gloo teardown deadlock does: a C call that holds the GIL and never returns)."""
import ctypes

import torch
import torch.distributed as dist

if __name__ == "__main__":
    dist.init_process_group("gloo")
    total = torch.ones(1)
    dist.all_reduce(total)
    print(f"rank {dist.get_rank()} done: {total.item()}", flush=True)
    dist.destroy_process_group()
    ctypes.PyDLL(None).sleep(3600)  # PyDLL keeps the GIL during the call
