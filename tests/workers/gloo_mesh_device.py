"""Run under torchrun (2 processes, Gloo): scaletrain joins the job's process group for a CUDA
device over Gloo, then a device mesh with dimensions of size 1 is built over it, on a CPU made
to look like a CUDA machine to torch's device mesh (it asks `torch.accelerator` whether to
build the mesh's groups by splitting the default group, as it does on a GPU machine). Then the
same mesh over a group bound to a device, which is what torch does with a Gloo group given a
`device_id`. Rank 0 prints one `MESH {json}` line."""

from __future__ import annotations

import json
import os

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

from scaletrain.process import process_group
from scaletrain.process.environment import detect


def looks_like_a_cuda_machine() -> None:
    torch.accelerator.is_available = lambda: True
    torch.accelerator.current_accelerator = lambda *args, **kwargs: torch.device("cpu")


def mesh_sum(names: tuple, shape: tuple) -> str | float:
    try:
        mesh = init_device_mesh("cpu", shape, mesh_dim_names=names)
        total = torch.ones(1)
        dist.all_reduce(total, group=mesh.get_group(names[0]))
        return total.item()
    except Exception as exc:  # noqa: BLE001 - the result is the error, reported
        return f"{type(exc).__name__}: {exc}"


def main() -> None:
    env = detect(os.environ)
    result = {}
    try:
        process_group.init_process_group(env, "gloo", torch.device("cuda", env.local_rank))
        result["joined"] = "yes"
    except Exception as exc:  # noqa: BLE001 - reported; joined without a device to go on
        result["joined"] = f"{type(exc).__name__}: {exc}"
        dist.init_process_group("gloo")
    group = dist.distributed_c10d._get_default_group()
    result["bound_device"] = str(group.bound_device_id)
    looks_like_a_cuda_machine()
    result["mesh"] = mesh_sum(("dp_shard", "tp", "cp"), (2, 1, 1))
    group.bound_device_id = torch.device("cpu", 0)  # what device_id=cuda:N gives the group on a GPU machine
    result["bound_mesh"] = mesh_sum(("dp", "tp"), (2, 1))
    if dist.get_rank() == 0:
        print("MESH " + json.dumps(result), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
