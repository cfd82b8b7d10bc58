"""A 2-process all-reduce on this machine, each process started fresh, with a deadline (one
process for NCCL on a machine with one GPU: NCCL takes a GPU per process).

    python -m scaletrain.doctor.selftest   (one rank; RANK, WORLD_SIZE, MASTER_* set)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta

from ..foundation.defaults import SELF_TEST_TIMEOUT_S
from ..launchers.ports import free_port

_LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK",
                "GROUP_WORLD_SIZE", "SCALETRAIN_LAUNCHER")


def run_self_test(backend: str = "gloo", timeout_s: float = SELF_TEST_TIMEOUT_S, world_size: int = 2) -> tuple[bool, str]:
    """(passed, what happened). The processes are killed if they overrun the deadline."""
    port = free_port()
    base = {k: v for k, v in os.environ.items()
            if k not in _LAUNCH_VARS and not k.startswith(("OMPI_", "PMI_", "SLURM_", "TORCHELASTIC_"))}
    procs = []
    started = time.monotonic()
    try:
        for rank in range(world_size):
            env = {**base, "RANK": str(rank), "WORLD_SIZE": str(world_size), "MASTER_ADDR": "127.0.0.1",
                   "MASTER_PORT": str(port), "SCALETRAIN_SELFTEST_BACKEND": backend,
                   "SCALETRAIN_SELFTEST_TIMEOUT": str(timeout_s)}
            procs.append(subprocess.Popen([sys.executable, "-m", "scaletrain.doctor.selftest"], env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                          start_new_session=True))
        outputs = []
        for proc in procs:
            left = max(1.0, timeout_s - (time.monotonic() - started))
            outputs.append(proc.communicate(timeout=left))
    except subprocess.TimeoutExpired:
        return False, f"no answer within {timeout_s:g} s (the processes were killed)"
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    failed = [(rank, proc.returncode, err) for rank, (proc, (_, err)) in enumerate(zip(procs, outputs))
              if proc.returncode != 0]
    if failed:
        rank, code, err = failed[0]
        last = (err.strip().splitlines() or ["(no output)"])[-1]
        return False, f"rank {rank} exited with status {code}: {last[:200]}"
    return True, outputs[0][0].strip()


def _rank_main() -> int:
    import torch
    import torch.distributed as dist

    backend = os.environ["SCALETRAIN_SELFTEST_BACKEND"]
    timeout = timedelta(seconds=float(os.environ["SCALETRAIN_SELFTEST_TIMEOUT"]))
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{os.environ['MASTER_PORT']}", rank=rank,
                            world_size=world_size, timeout=timeout)
    device = torch.device("cuda", rank % torch.cuda.device_count()) if backend == "nccl" else torch.device("cpu")
    tensor = torch.full((1 << 20,), float(rank + 1), device=device)  # 4 MB
    dist.all_reduce(tensor)  # warm-up: connections are set up lazily
    wait = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)  # NCCL returns before it ran
    wait()
    begin = time.perf_counter()
    dist.all_reduce(tensor)
    wait()
    seconds = time.perf_counter() - begin
    expected = world_size * (world_size + 1) / 2 * world_size  # 1 + 2 + ... summed, then summed again
    ok = bool(torch.all(tensor == expected))
    dist.destroy_process_group()
    if not ok:
        print(f"all-reduce gave {tensor[0].item()} instead of {expected}", file=sys.stderr)
        return 1
    if rank == 0:
        print(f"{world_size}-rank {backend} all-reduce of 4 MB correct, {seconds * 1e3:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(_rank_main())
