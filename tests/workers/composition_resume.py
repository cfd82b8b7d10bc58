"""A 2-D run's checkpoint (FSDP × TP, 2 × 2) resumed under other layouts.

    torchrun --nproc-per-node 4 composition_resume.py 2d first DIR
    torchrun --nproc-per-node N composition_resume.py LAYOUT second DIR    # 2d (4), ddp (2), single (1), 3d (8)
    torchrun --nproc-per-node 8 composition_resume.py 3d third DIR

first: the 2-D run trains STEPS steps, saving at SAVE_AT a checkpoint in each layout (full:
gathered by rank 0; sharded: torch.distributed.checkpoint, a file per rank) and its state
there (DIR/2d/at-save), and its final state (DIR/2d/uninterrupted).
second: for each checkpoint layout, a new job of LAYOUT resumes the 2-D checkpoint, writes the
state it loaded (DIR/LAYOUT/<ckpt>/loaded), saves its own checkpoint at once (in its own
layout), trains to STEPS and writes its final state (DIR/LAYOUT/<ckpt>/final).
third: a new 3-D job resumes the 3-D run's own checkpoint and trains to STEPS
(DIR/3d/<ckpt>/again): the uninterrupted 3-D run of `second` is what it must match.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.utils.data import TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scaletrain  # noqa: E402
from composition_reference import SEQUENCE, VOCAB, gpt, loss_fn, optimizer_for  # noqa: E402

STEPS, SAVE_AT = 4, 2
LAYOUTS = {"2d": ("fsdp", {"tp": 2}), "ddp": ("ddp", {}), "single": ("single", {}),
           "3d": ("pipeline", {"pp": 2, "dp_shard": 2, "tp": 2})}
CHECKPOINT_LAYOUTS = ("full", "sharded")


def data() -> TensorDataset:
    gen = torch.Generator().manual_seed(5)
    tokens = torch.randint(0, VOCAB, (64, SEQUENCE + 1), generator=gen)
    return TensorDataset(tokens[:, :-1], tokens[:, 1:])


def save_state(run, model, optimizer, folder: Path) -> None:
    run.checkpointer(folder, layout="full").save(run.steps_taken, model, optimizer)


def train(layout: str, phase: str, root: Path, checkpoint_layout: str) -> None:
    strategy, options = LAYOUTS[layout]
    with scaletrain.init(strategy=strategy, seed=0, **options) as run:
        model = gpt()
        if phase != "first":  # the weights must come from the checkpoint
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(1.0)
        optimizer = optimizer_for(model)
        model, optimizer = run.setup(model, optimizer)
        # 4 sequences per process and step: a checkpoint keeps its batch size per process.
        loader = run.loader(data(), batch_size=4, shuffle=True)
        here = root / layout / checkpoint_layout
        if phase == "second":
            source = root / "2d" / "checkpoints" / checkpoint_layout
            resumed = run.load_checkpoint(source, model, optimizer, loader=loader)
            assert resumed["step"] == SAVE_AT, resumed
            save_state(run, model, optimizer, here / "loaded")
            run.save_checkpoint(here / "checkpoints", model, optimizer, loader=loader, layout=checkpoint_layout)
        elif phase == "third":
            resumed = run.load_checkpoint(here / "checkpoints", model, optimizer, loader=loader)
            assert resumed["step"] == SAVE_AT, resumed
        while run.steps_taken < STEPS:
            for inputs, targets in loader:
                run.train_step(model, optimizer, inputs, targets, loss_fn=loss_fn)
                if phase == "first" and run.steps_taken == SAVE_AT:
                    for kind in CHECKPOINT_LAYOUTS:
                        run.save_checkpoint(root / "2d" / "checkpoints" / kind, model, optimizer, loader=loader,
                                            layout=kind)
                    save_state(run, model, optimizer, root / "2d" / "at-save")
                if run.steps_taken == STEPS:
                    break
        final = {"first": root / "2d" / "uninterrupted", "second": here / "final", "third": here / "again"}[phase]
        save_state(run, model, optimizer, final)


def main() -> None:
    layout, phase, root = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    dist.init_process_group("gloo")  # shared by every scaletrain.init below
    for kind in (CHECKPOINT_LAYOUTS if phase != "first" else ("full",)):
        train(layout, phase, root, kind)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
