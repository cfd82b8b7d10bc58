"""Memory per device, measured against the plan: `scaletrain train` of the communication-bound
MLP (10.5 M parameters, so parameters, gradients and Adam's state dominate what a device
holds) under each strategy reports its peak (summary.json's `peak_memory_bytes`, one per
rank: on CUDA torch.cuda.max_memory_allocated), and `scaletrain plan --json` predicts
`memory_bytes` for the same strategy, world size and batch. The error is printed; a
prediction more than 2× off in either direction fails (it would choose the wrong strategy to
make a model fit)."""

from __future__ import annotations

import json

import pytest

from tests.helpers import scaletrain

from .target import TARGET

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not TARGET.available, reason=TARGET.skip_reason)]

WORKLOAD, BATCH = "synthetic-mlp", 32
MICROBATCHES = 2  # the pipeline's default for 2 stages, told to the plan too
RUNS = [("single", 1), ("ddp", 1), ("fsdp", 1), ("ddp", 2), ("fsdp", 2), ("pipeline", 2)]
WITHIN = 2.0


@pytest.fixture(scope="module")
def predictions(target) -> dict:
    """{(strategy, world size): predicted bytes per device} from one `scaletrain plan`."""
    strategies = sorted({s for s, _ in RUNS})
    # The plan times an all-reduce on the largest local world size: with NCCL, one GPU per process.
    worlds = sorted({n for _, n in RUNS if not target.lacks(n)})
    done = scaletrain("plan", "--json", "--workload", WORKLOAD, "--batch-size", str(BATCH), "--strategy",
                      ",".join(strategies), "--world-sizes", ",".join(map(str, worlds)), "--microbatches",
                      str(MICROBATCHES),
                      "--probe-rounds", "1", "--steps", "5", "--min-seconds", "0.3", *target.flags(), timeout=300)
    assert done.returncode == 0, f"scaletrain plan failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    found = {}
    for p in json.loads(done.stdout).get("predictions", []):
        if p.get("memory_bytes") is not None:
            found[(p.get("strategy"), p.get("world_size"))] = p["memory_bytes"]
    return found


def measured_peak(summary: dict, device: str) -> tuple[float, str]:
    """(bytes, what they are): the largest rank's peak; where none is reported (a CPU has no
    allocator statistics), the state the strategy counts per process."""
    peaks = [p for p in summary.get("peak_memory_bytes") or [] if isinstance(p, (int, float)) and p > 0]
    if peaks:
        return max(peaks), f"peak allocated, largest of {len(peaks)} rank(s)"
    assert device != "cuda", "summary.json has no peak_memory_bytes: this scaletrain does not report CUDA memory"
    counted = [m.get("total_bytes", 0) for m in summary.get("memory_per_process") or []]
    if not counted:
        pytest.skip("summary.json reports no memory on the CPU (neither peak_memory_bytes nor memory_per_process)")
    return max(counted), "no allocator peak on the CPU: the parameters, gradients and optimizer state counted"


@pytest.mark.timeout(400)
@pytest.mark.parametrize("strategy,world", RUNS, ids=[f"{s} x{n}" for s, n in RUNS])
def test_peak_memory_against_the_plan(strategy, world, target, predictions, check, out_dir):
    if why := target.lacks(world, f"NCCL takes one GPU per process: {strategy} on {world} GPUs"):
        pytest.skip(why)
    out = out_dir / f"memory-{strategy}-x{world}"
    done = scaletrain("train", "--workload", WORKLOAD, "--strategy", strategy, "--nproc-per-node", str(world),
                      "--epochs", "1", "--batch-size", str(BATCH), *target.flags(), "--out", str(out), timeout=300)
    assert done.returncode == 0, f"scaletrain train failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    summary = json.loads((out / "summary.json").read_text())
    assert str(summary.get("device", "")).startswith(target.device), summary.get("device")
    peak, what = measured_peak(summary, target.device)
    predicted = predictions.get((strategy, world))
    assert predicted, f"scaletrain plan --json has no memory_bytes for {strategy} on {world} process(es)"
    error = predicted / peak - 1
    check(f"{peak / 1e6:,.1f} MB measured ({what}), {predicted / 1e6:,.1f} MB predicted: error {error:+.0%}",
          measured_bytes=peak, predicted_bytes=predicted, error=error, measured=what,
          peak_memory_bytes=summary.get("peak_memory_bytes"), memory_per_process=summary.get("memory_per_process"))
    assert 1 / WITHIN <= predicted / peak <= WITHIN, f"the plan is {error:+.0%} off the measured peak"
