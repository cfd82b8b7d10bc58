"""Hang detection on the device: one rank of a `scaletrain train` on the GPUs stops
responding (SIGSTOP) and the other must exit non-zero within the timeout + 15 s with one
line naming it — with NCCL between two GPUs; with one GPU, its two processes share it over
Gloo (NCCL takes a GPU per process)."""

from __future__ import annotations

import os
import re
import signal
import time

import pytest

from scaletrain.checkpoint import latest_checkpoint
from tests.faults import Background, scaletrain_argv, spawned_workers, wait_for

from .target import TARGET

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not TARGET.available, reason=TARGET.skip_reason)]

TIMEOUT_S = 10


@pytest.mark.timeout(400)
def test_a_stopped_rank_is_named(target, check, out_dir):
    backend = target.backend if target.count >= 2 else "gloo"
    how = f"{backend} between 2 {target.noun}s" if target.count >= 2 else f"{backend}, 2 processes on one {target.noun}"
    out = out_dir / "hang"
    argv = scaletrain_argv("train", "--nproc-per-node", "2", "--workload", "digits-mlp", "--epochs", "50",
                           "--batch-size", "8", "--checkpoint-every", "5", "--timeout", f"{TIMEOUT_S}s",
                           "--device", target.device, "--backend", backend, "--out", str(out))
    with Background(argv) as job:
        wait_for(lambda: latest_checkpoint(out / "checkpoints"), 200, "training to be under way", job.proc)
        workers = wait_for(lambda: spawned_workers(job.proc.pid), 10, "the workers", job.proc)
        assert len(workers) == 2, workers
        os.kill(workers[1], signal.SIGSTOP)
        stopped_at = time.monotonic()
        status, _, stderr = job.finish(timeout=TIMEOUT_S + 60)
        took = time.monotonic() - stopped_at
    errors = [line for line in stderr.splitlines() if line.startswith("scaletrain: error:")]
    check(f"rank 1 stopped ({how}): exit {status} after {took:.1f} s (timeout {TIMEOUT_S} s): "
          f"{errors[0] if errors else 'no error line'}", seconds=took, status=status, errors=errors, backend=backend)
    assert status != 0, "the job went on as if nothing had happened"
    assert took <= TIMEOUT_S + 15, f"took {took:.1f} s"
    assert len(errors) == 1, stderr[-3000:]
    named = re.search(r"rank (\d+) stopped responding \(pid (\d+)", errors[0])
    assert named and named.group(1) == "1" and int(named.group(2)) == workers[1], errors[0]
