"""scaletrain's library API: the same loop as run_raw_ddp.py, written with scaletrain.init,
run.setup, run.loader and run.train_step, with scaletrain's defaults (or, with --no-pin, exactly the raw loop's
settings: one thread per process, affinity left to the OS). Runs under torchrun (or alone,
as one process)."""

import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scaletrain  # noqa: E402
from bench_common import Timer, build, parse_args, timed_epochs  # noqa: E402


def main() -> None:
    args = parse_args()
    options = {} if args.grad_compression == "none" else {"grad_compression": args.grad_compression}
    with scaletrain.init(strategy="ddp", device=args.device, pin=not args.no_pin, **options) as run:
        model, train_set, lr = build(args.workload)
        model, optimizer = run.setup(model, torch.optim.Adam(model.parameters(), lr=lr))
        loader = run.loader(train_set, batch_size=args.batch_size, shuffle=True)
        timer = Timer(run.rank, run.world_size, args.max_steps)
        loss = timed_epochs(timer, loader, args.epochs,
                            lambda inputs, targets: run.train_step(model, optimizer, inputs, targets, F.cross_entropy))
        timer.write(args.result, loss=loss.item())


if __name__ == "__main__":
    main()
