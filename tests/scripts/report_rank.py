"""Prints what scaletrain's detection sees in this process (one `DETECTED {json}` line), then,
unless --detect-only, proves the ranks can talk: an all-reduce of rank + 1 over Gloo."""
import json
import os
import sys

from scaletrain.process.environment import detect

if __name__ == "__main__":
    env = detect(os.environ)
    facts = env.as_dict()
    facts["slurm_procid"] = os.environ.get("SLURM_PROCID")
    if "--detect-only" not in sys.argv:
        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo")
        total = torch.tensor([float(dist.get_rank() + 1)])
        dist.all_reduce(total)
        facts["all_reduce"] = total.item()
        dist.destroy_process_group()
    sys.stdout.write("DETECTED " + json.dumps(facts) + "\n")  # one write: lines of two ranks never mix
    sys.stdout.flush()
