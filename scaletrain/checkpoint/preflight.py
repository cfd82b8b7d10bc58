"""Looking at a checkpoint before any process starts: is there one to resume, do its files
verify, was it written for this model and these settings? The command line asks this in
the parent, so a run that cannot resume is refused in one line before it creates anything
(the ranks check the same again when they load)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from torch import nn

from . import checksums, compat, layout, sharded
from .safe_io import CheckpointError, load_state


def stored_shapes(folder: Path) -> dict:
    """name -> shape of every model tensor a checkpoint holds (without reading the tensors)."""
    state = load_state(folder / layout.STATE_FILE, mmap=True)
    if state.get("layout") == "sharded":
        return {k[len("model."):]: v for k, v in sharded.stored_shapes(folder / layout.SHARDS_DIR).items()
                if k.startswith("model.")}
    return {k: tuple(v.shape) for k, v in state.get("model", {}).items()}


def model_mismatch(model: nn.Module, stored: dict) -> Optional[str]:
    mine = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    missing = [k for k in mine if k not in stored]
    extra = [k for k in stored if k not in mine]
    wrong = [k for k in mine if k in stored and tuple(stored[k]) != mine[k]]
    if not (missing or extra or wrong):
        return None
    if wrong:
        k = wrong[0]
        return f"it holds {k} of shape {tuple(stored[k])}, this model's is {mine[k]}"
    names = missing or extra
    return (f"it {'lacks' if missing else 'holds no parameter of this model called'} "
            f"{', '.join(names[:3])}{' …' if len(names) > 3 else ''}")


def check_resumable(source: Path, model: Optional[nn.Module], now: dict, auto: bool) -> tuple[Optional[Path], list[str]]:
    """(the checkpoint a resume will use, or None when `auto` finds none; notes).
    CheckpointError when nothing usable is there or it does not fit this run."""
    found, notes = layout.candidates(source) if auto else layout.source_candidates(source)
    if not found:
        if auto:
            return None, notes
        raise CheckpointError(f"no complete checkpoint at {source} (a checkpoint folder holds state.pt and "
                              "COMPLETE); name another one")
    skipped = []
    for folder in found:
        problem = checksums.verify(folder)
        if problem is None:
            try:
                shapes = stored_shapes(folder)
            except CheckpointError as exc:
                problem = str(exc)
        if problem is not None:
            skipped.append(f"skipped {folder.name}: {problem}")
            continue
        refusal, differences = compat.compare(compat.read_facts(folder), now, str(folder))
        if refusal:
            raise CheckpointError(refusal)
        mismatch = model_mismatch(model, shapes) if model is not None else None
        if mismatch:
            raise CheckpointError(f"{folder} was written for another model: {mismatch}; resume it with the model "
                                  "it was written for, or start a new run")
        return folder, [*notes, *skipped, *differences]
    raise CheckpointError(f"no checkpoint in {source} can be used: " + "; ".join(skipped))
