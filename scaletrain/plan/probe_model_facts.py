"""What a probe round measures of the model itself, in its one-process job: its bytes and
the time of each of its units at the batch, the smallest micro-batch a plan predicts and the
halvings between (what pipeline stages are cut from), and its attention's share of a step
with the ring's cost at each context-parallel degree."""

from __future__ import annotations

import torch

#: Blocks are timed on the whole batch and on this share of it (see model_facts).
SMALLEST_MICROBATCH_SHARE = 8


def model_facts(module, optimizer, batches, spec: dict, loss_fn) -> dict:
    """Bytes of the model and the time of each of its units (what pipeline stages are cut
    from), in this (one-process) job."""
    from ..measure.footprint import measure_footprint, model_units
    from .block_times import block_seconds

    inputs, targets = next(batches)
    footprint = measure_footprint(module, optimizer, inputs, targets, loss_fn)
    # The smallest micro-batch a plan predicts (a pipeline's 4 × its stages, 2 stages of 2
    # processes: an eighth of the batch), so that every other size lies between it and the
    # whole batch: a line through two sizes drawn beyond them turned a block's measured noise
    # into a micro-batch of 8 predicted anywhere from 49 to 156 ms a step.
    micro = max(1, len(targets) // (spec.get("microbatches") or SMALLEST_MICROBATCH_SHARE))
    runs, units = model_units(module)
    # And at the halvings of the batch in between: a block's time does not follow one line
    # from the micro-batch to the batch (stages.block_times_at).
    between = [n for n in (len(targets) >> k for k in range(1, 8)) if micro < n < len(targets)]

    def times(n: int) -> list[float]:
        return block_seconds(module, runs, inputs[:n], targets[:n], loss_fn)

    found = {"footprint": footprint.as_dict(), "block_s": times(len(targets)), "block_micro_s": times(micro),
             "microbatch_size": micro, "block_sizes_s": [[n, times(n)] for n in between]}
    if footprint.attention_kv_bytes_per_sample:  # what context parallel's ring would cost its arithmetic
        from ..measure.attention import attention_seconds

        whole, ring = attention_seconds(module, inputs)
        found.update(attention_fraction=whole / max(1e-9, sum(found["block_s"])),
                     ring_ratio={cp: seconds * cp / whole for cp, seconds in ring.items()})
    threads = torch.get_num_threads()
    if threads > 1:
        # The same on one thread, what a pipeline stage of a crowded machine has: a block's
        # time does not shrink with threads alike at every size (the CNN's first blocks on 16
        # samples took 1.7× as long on one thread as on two, on 32 samples 1.56×).
        torch.set_num_threads(1)
        try:
            found["block_one_thread_s"] = [[n, times(n)] for n in sorted({micro, *between, len(targets)})]
        finally:
            torch.set_num_threads(threads)
    return {**found,
            "block_params": [sum(p.numel() for m in unit for p in m.parameters()) for unit in units]}
