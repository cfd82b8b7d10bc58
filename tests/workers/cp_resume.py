"""Checkpoints across context parallel: a run at cp 1 (one process) and one at cp 2 (two
processes, FSDP over the context-parallel pair) train the same sequences; each resumes the
other's checkpoint and must end where the uninterrupted runs end.

    python cp_resume.py cp1 first DIR             # uninterrupted, checkpoints at SAVE_AT
    torchrun --nproc-per-node 2 cp_resume.py cp2 second DIR   # uninterrupted, and resumed from cp1's
    python cp_resume.py cp1 third DIR             # resumed from cp2's

Every checkpoint is written in both layouts (full: gathered by rank 0; sharded:
torch.distributed.checkpoint, a file per rank). The final states go to
DIR/LAYOUT/uninterrupted and DIR/LAYOUT/<checkpoint layout>/resumed.

The cp 2 job also trains the same steps in bf16 with its blocks compiled and recomputed in
backward (activation checkpointing), and rank 0 prints `MIXED {json}`: its last loss and the
fp32 run's.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.utils.data import TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scaletrain  # noqa: E402
from composition_reference import SEQUENCE, VOCAB, gpt, loss_fn, optimizer_for  # noqa: E402

STEPS, SAVE_AT = 3, 1
LAYOUTS = {"cp1": ("single", {}), "cp2": ("fsdp", {"cp": 2})}
OTHER = {"cp1": "cp2", "cp2": "cp1"}
CHECKPOINT_LAYOUTS = ("full", "sharded")


def data() -> TensorDataset:
    gen = torch.Generator().manual_seed(5)
    tokens = torch.randint(0, VOCAB, (32, SEQUENCE + 1), generator=gen)
    return TensorDataset(tokens[:, :-1], tokens[:, 1:])


def train(layout: str, root: Path, resume_from: str | None) -> None:
    strategy, options = LAYOUTS[layout]
    with scaletrain.init(strategy=strategy, seed=0, **options) as run:
        model = gpt()
        if resume_from is not None:  # the weights must come from the checkpoint
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(1.0)
        model, optimizer = run.setup(model, optimizer_for(model))
        loader = run.loader(data(), batch_size=4, shuffle=True)  # the same global batch at cp 1 and cp 2
        if resume_from is not None:
            resumed = run.load_checkpoint(root / OTHER[layout] / "checkpoints" / resume_from, model, optimizer,
                                          loader=loader)
            assert resumed["step"] == SAVE_AT, resumed
        while run.steps_taken < STEPS:
            for inputs, targets in loader:
                run.train_step(model, optimizer, inputs, targets, loss_fn=loss_fn)
                if resume_from is None and run.steps_taken == SAVE_AT:
                    for kind in CHECKPOINT_LAYOUTS:
                        run.save_checkpoint(root / layout / "checkpoints" / kind, model, optimizer, loader=loader,
                                            layout=kind)
                if run.steps_taken == STEPS:
                    break
        final = root / layout / (resume_from or "") / ("resumed" if resume_from else "uninterrupted")
        run.checkpointer(final, layout="full").save(run.steps_taken, model, optimizer)


def mixed(root: Path) -> None:
    """STEPS steps at cp 2 in bf16, blocks compiled and checkpointed: the loss against fp32's."""
    losses = {}
    for precision in ("fp32", "bf16"):
        extra = {"compile": True, "activation_checkpointing": "full"} if precision == "bf16" else {}
        with scaletrain.init(strategy="fsdp", cp=2, seed=0, precision=precision, **extra) as run:
            model = gpt()
            model, optimizer = run.setup(model, optimizer_for(model))
            loader = run.loader(data(), batch_size=4, shuffle=True)
            for inputs, targets in loader:
                loss = run.train_step(model, optimizer, inputs, targets, loss_fn=loss_fn)
                if run.steps_taken == STEPS:
                    break
            losses[precision] = run.mean(loss.item())
    if dist.get_rank() == 0:
        print("MIXED " + json.dumps(losses), flush=True)


def main() -> None:
    layout, phase, root = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    if layout == "cp2":
        dist.init_process_group("gloo")  # shared by every scaletrain.init below
    if phase in ("first", "second"):
        train(layout, root, None)
    if phase in ("second", "third"):
        for kind in CHECKPOINT_LAYOUTS:
            train(layout, root, kind)
    if layout == "cp2":
        mixed(root)
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
