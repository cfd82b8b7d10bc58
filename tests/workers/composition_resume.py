"""A 2-D run's checkpoint (FSDP × TP, 2 × 2) resumed under other layouts, and the ddp, 2-D and
3-D checkpoints resumed under tensor parallel alone and pipeline × tensor parallel.

    torchrun --nproc-per-node N composition_resume.py LAYOUT:PHASE[,LAYOUT:PHASE...] DIR

each LAYOUT of the job's world size: 2d (4), ddp (2), single (1), 3d (8), tp (2), pp_tp (4);
in the order 2d:first; 3d:second,3d:third; ddp:second,tp:across; 2d:second,pp_tp:across;
single:second.

first: the 2-D run trains STEPS steps, saving at SAVE_AT a checkpoint in each layout (full:
gathered by rank 0; sharded: torch.distributed.checkpoint, a file per rank) and its state
there (DIR/2d/at-save), and its final state (DIR/2d/uninterrupted).
second: for each checkpoint layout, a new job of LAYOUT resumes the 2-D checkpoint, writes the
state it loaded (DIR/LAYOUT/<ckpt>/loaded), saves its own checkpoint at once (in its own
layout), trains to STEPS and writes its final state (DIR/LAYOUT/<ckpt>/final).
third: a new 3-D job resumes the 3-D run's own checkpoint and trains to STEPS
(DIR/3d/<ckpt>/again): the uninterrupted 3-D run of `second` is what it must match.
across: for each checkpoint layout, a job of LAYOUT (tensor parallel, whose layers outside the
plan stay plain tensors beside its DTensors) resumes each of the 2-D, ddp and 3-D checkpoints
saved at SAVE_AT, writes the state it loaded (DIR/LAYOUT/<ckpt>/from-<source>/loaded) and its
final state (…/final), which must be the uninterrupted 2-D run's. The optimizer takes its
multi-tensor (foreach) step, as the trainer's fused Adam does: a checkpoint saved with it must
not switch it back on in a tensor-parallel group that mixes tensors and DTensors.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.utils.data import TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scaletrain  # noqa: E402
from composition_reference import LR, SEQUENCE, VOCAB, gpt, loss_fn  # noqa: E402

STEPS, SAVE_AT, GLOBAL_BATCH = 4, 2, 8
LAYOUTS = {"2d": ("fsdp", {"tp": 2}), "ddp": ("ddp", {}), "single": ("single", {}),
           "3d": ("pipeline", {"pp": 2, "dp_shard": 2, "tp": 2}),
           "tp": ("tp", {"tp": 2}), "pp_tp": ("pipeline", {"pp": 2, "tp": 2})}
CHECKPOINT_LAYOUTS = ("full", "sharded")
SOURCES = ("2d", "ddp", "3d")  # the checkpoints `across` resumes


def checkpoints_of(root: Path, source: str, kind: str) -> Path:
    """Where the checkpoint of layout `source` at SAVE_AT is, in checkpoint layout `kind`."""
    return root / "2d" / "checkpoints" / kind if source == "2d" else root / source / kind / "checkpoints"


def optimizer(model) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9, foreach=True)


def data() -> TensorDataset:
    gen = torch.Generator().manual_seed(5)
    tokens = torch.randint(0, VOCAB, (64, SEQUENCE + 1), generator=gen)
    return TensorDataset(tokens[:, :-1], tokens[:, 1:])


def save_state(run, model, optimizer, folder: Path) -> None:
    run.checkpointer(folder, layout="full").save(run.steps_taken, model, optimizer)


def train(layout: str, phase: str, root: Path, checkpoint_layout: str, source: str = "") -> None:
    strategy, options = LAYOUTS[layout]
    with scaletrain.init(strategy=strategy, seed=0, **options) as run:
        model = gpt()
        if phase != "first":  # the weights must come from the checkpoint
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(1.0)
        model, optim = run.setup(model, optimizer(model))
        # 8 sequences a step in every layout (4 per process where 2 read different ones): the
        # same global batches, so a layout that resumes trains on what the uninterrupted run did.
        loader = run.loader(data(), batch_size=GLOBAL_BATCH // run.data_parallel_size, shuffle=True)
        here = root / layout / checkpoint_layout
        if phase == "across":
            here = here / f"from-{source}"
            resumed = run.load_checkpoint(checkpoints_of(root, source, checkpoint_layout), model, optim,
                                          loader=loader)
            assert resumed["step"] == SAVE_AT, resumed
            save_state(run, model, optim, here / "loaded")
        elif phase == "second":
            source = root / "2d" / "checkpoints" / checkpoint_layout
            resumed = run.load_checkpoint(source, model, optim, loader=loader)
            assert resumed["step"] == SAVE_AT, resumed
            save_state(run, model, optim, here / "loaded")
            run.save_checkpoint(here / "checkpoints", model, optim, loader=loader, layout=checkpoint_layout)
        elif phase == "third":
            resumed = run.load_checkpoint(here / "checkpoints", model, optim, loader=loader)
            assert resumed["step"] == SAVE_AT, resumed
        while run.steps_taken < STEPS:
            for inputs, targets in loader:
                run.train_step(model, optim, inputs, targets, loss_fn=loss_fn)
                if phase == "first" and run.steps_taken == SAVE_AT:
                    for kind in CHECKPOINT_LAYOUTS:
                        run.save_checkpoint(root / "2d" / "checkpoints" / kind, model, optim, loader=loader,
                                            layout=kind)
                    save_state(run, model, optim, root / "2d" / "at-save")
                if run.steps_taken == STEPS:
                    break
        final = {"first": root / "2d" / "uninterrupted", "second": here / "final", "third": here / "again",
                 "across": here / "final"}[phase]
        save_state(run, model, optim, final)


def run_jobs(jobs: str, root: Path) -> None:
    """LAYOUT:PHASE[,...] in order, in the process group already initialised (composition_
    equivalence.py runs them after its own comparisons, in the same launch)."""
    for layout, phase in (job.split(":") for job in jobs.split(",")):
        for kind in (CHECKPOINT_LAYOUTS if phase != "first" else ("full",)):
            for source in (SOURCES if phase == "across" else ("",)):
                train(layout, phase, root, kind, source)


def main() -> None:
    dist.init_process_group("gloo")  # shared by every scaletrain.init below
    run_jobs(sys.argv[1], Path(sys.argv[2]))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
