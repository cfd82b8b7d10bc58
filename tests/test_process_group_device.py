"""Process groups get a CUDA device only where the backend uses one (NCCL), so that Gloo on a
CUDA machine builds any device mesh: given a device, a Gloo group is split for each of the
mesh's dimensions smaller than the world, and splitting fails copying Gloo's options
(`TypeError: cannot pickle '_Options'`, torch 2.11 to 2.13). No GPU here: the worker makes
the CPU look like a CUDA machine to torch's device mesh, which is all its choice reads."""

from __future__ import annotations

import json

import torch

from tests.helpers import REPO, torchrun


def test_only_nccl_is_given_the_device():
    from scaletrain.process.process_group import bound_device

    gpu = torch.device("cuda", 1)
    assert bound_device("nccl", gpu) == gpu and bound_device("cpu:gloo,cuda:nccl", gpu) == gpu
    assert bound_device("gloo", gpu) is None and bound_device("mpi", gpu) is None
    assert bound_device("nccl", torch.device("cpu")) is None


def test_gloo_for_a_cuda_device_builds_a_mesh_with_size_1_dimensions():
    done = torchrun(REPO / "tests" / "workers" / "gloo_mesh_device.py", nproc=2, timeout=120, check=True)
    result = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("MESH "))[5:])
    assert result["joined"] == "yes" and result["bound_device"] == "None", result
    assert result["mesh"] == 2.0, result  # every dimension built, the size-2 one sums over both processes
    # What the choice avoids: the same mesh over a Gloo group bound to a device.
    assert "cannot pickle" in result["bound_mesh"], result
