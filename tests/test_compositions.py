"""Parallelisms composed on one device mesh, on the built-in byte-level GPT and a Hugging Face
Llama built from a config: tensor parallel × 2, context parallel × 2, FSDP × TP 2 × 2, HSDP
2 × 2, pipeline × FSDP 2 × 2, FSDP × CP 2 × 2, CP × TP 2 × 2 and pipeline × FSDP × TP
2 × 2 × 2 (8 processes) each end within 1e-5 of one process
on the same global batches after 3 optimizer steps — built whole, and built on the meta device
and materialised as each process's share, which starts from exactly an ordinary build's
weights. A 2-D run's checkpoint resumes under
ddp, one process and a 3-D layout with exactly the state it saved, and the ddp, 2-D and 3-D
checkpoints under tp × 2 and pp 2 × tp 2; under fp16, pipeline stages skip the same steps."""

from __future__ import annotations

import json

import pytest
import torch

from scaletrain.checkpoint import load_state
from tests.helpers import REPO, torchrun

WORKERS = REPO / "tests" / "workers"
ATOL = 1e-5


def results(nproc: int, jobs: str = "", folder=None) -> list[dict]:
    """The compositions of `nproc` processes against one process; with `jobs`, then
    composition_resume.py's jobs of that world size in the same launch."""
    extra = [jobs, str(folder)] if jobs else []
    done = torchrun(WORKERS / "composition_equivalence.py", *extra, nproc=nproc, timeout=560)
    assert done.returncode == 0, f"worker failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return [json.loads(line.split(" ", 1)[1]) for line in done.stdout.splitlines() if line.startswith("RESULT ")]


def check_compositions(found: list[dict]) -> None:
    meshes = {(r["mesh"], r["model"]) for r in found}
    for mesh in ("tp 2", "dp_shard 2 × tp 2", "dp_replicate 2 × dp_shard 2", "pp 2 × dp_shard 2",
                 "pp 2 × dp_shard 2 × tp 2", "cp 2", "dp_shard 2 × cp 2", "cp 2 × tp 2"):
        assert {(mesh, "stdlib-gpt"), (mesh, "llama")} <= meshes, (mesh, meshes)
    own = {r["mesh"] for r in found if r["form"] == "labels"}
    assert own == {"cp 2", "dp_shard 2 × cp 2", "cp 2 × tp 2"}, own
    assert {r["meta_init"] for r in found} == {False, True}
    for r in found:
        assert r["param_diff"] < ATOL and r["loss_diff"] < ATOL, r
        assert r["covered"] == r["parameters"], r  # every parameter is held by some process
        assert r["same_start"], r


def _tensors(folder):
    state = load_state(sorted(folder.glob("step-*"))[-1] / "state.pt")
    return {**{f"model.{k}": v for k, v in state["model"].items()},
            **{f"optimizer.{k}": v for k, v in state["optimizer"].items() if isinstance(v, torch.Tensor)}}


def assert_equal_states(a, b, what):
    first, second = _tensors(a), _tensors(b)
    assert first.keys() == second.keys() and first, what
    for key, value in first.items():
        assert torch.equal(value, second[key]), f"{what}: {key} differs"


def assert_close_states(a, b, what):
    """Equal within round-off: the same training in another layout (other reduction orders)."""
    first, second = _tensors(a), _tensors(b)
    assert first.keys() == second.keys() and first, what
    for key, value in first.items():
        assert torch.allclose(value, second[key], rtol=0, atol=ATOL), f"{what}: {key} differs by " \
            f"{(value - second[key]).abs().max().item():.2g}"


@pytest.mark.timeout(1500)
def test_every_composition_matches_one_process_and_checkpoints_resume_across_layouts(tmp_path):
    """Every composition of 2, 4 and 8 processes ends within ATOL of one process on the same
    global batches, built whole and on the meta device. A 2-D run's checkpoint resumes
    under ddp, one process and 3-D with exactly the state it saved; the ddp, 2-D and 3-D
    checkpoints resume under tensor parallel alone (tp × 2) and pipeline × tensor parallel
    (pp 2 × tp 2), whose groups mix tensors and DTensors, and end where the uninterrupted run
    ends. The jobs of one world size share a launch with its compositions, in the order the
    checkpoints need (composition_resume.py's)."""
    found = []
    for nproc, jobs in ((4, "2d:first"), (8, "3d:second,3d:third"), (2, "ddp:second,tp:across")):
        found += results(nproc, jobs, tmp_path)
    check_compositions(found)
    worker = WORKERS / "composition_resume.py"
    for jobs, nproc in (("2d:second,pp_tp:across", 4), ("single:second", 1)):
        torchrun(worker, jobs, str(tmp_path), nproc=nproc, timeout=300, check=True)
    saved, uninterrupted = tmp_path / "2d" / "at-save", tmp_path / "2d" / "uninterrupted"
    for kind in ("full", "sharded"):
        for layout in ("2d", "ddp", "single", "3d"):
            assert_equal_states(saved, tmp_path / layout / kind / "loaded", f"{kind} checkpoint loaded by {layout}")
        # Resumed in the same layout: the end of the uninterrupted run, exactly.
        assert_equal_states(uninterrupted, tmp_path / "2d" / kind / "final", f"2d via {kind}")
        assert_equal_states(tmp_path / "3d" / kind / "final", tmp_path / "3d" / kind / "again", f"3d via {kind}")
        for layout in ("tp", "pp_tp"):
            for source in ("2d", "ddp", "3d"):
                here = tmp_path / layout / kind / f"from-{source}"
                what = f"{kind} {source} checkpoint resumed by {layout}"
                assert_equal_states(saved, here / "loaded", what)
                assert_close_states(uninterrupted, here / "final", what)


@pytest.mark.timeout(300)
def test_fp16_pipeline_stages_skip_the_same_steps():
    done = torchrun(WORKERS / "pipeline_overflow.py", nproc=2, timeout=240, check=True)
    reports = [json.loads(line.split(" ", 1)[1]) for line in done.stdout.splitlines() if line.startswith("STAGE ")]
    assert len(reports) == 2, done.stdout
    by_stage = {r["stage"]: r for r in reports}
    assert by_stage[0]["overflowed_here"] and not by_stage[1]["overflowed_here"]  # one stage overflowed alone
    for r in reports:
        assert r["skipped"] == [2], r  # ... and both skipped that step, and only that one
    assert by_stage[0]["scales"] == by_stage[1]["scales"]
