"""Sharded checkpoints of an fsdp model (torch.distributed.checkpoint): written by 2
processes, loaded by 1, written again and loaded by 2, each time exactly the state saved;
rank 0's peak memory while saving stays below one full copy of the model and optimizer
state; a tampered `.metadata` is refused and its payload never runs; a rank killed during a
sharded save leaves the previous checkpoint loadable."""

from __future__ import annotations

import json
import pickle
import sys

import pytest

from scaletrain.checkpoint import latest_checkpoint
from scaletrain.checkpoint.checksums import CHECKSUM_FILE, file_checksum
from tests.helpers import REPO, run, torchrun

WORKER = REPO / "tests" / "workers" / "sharded_worker.py"


def one_process(*args: str):
    return run([sys.executable, str(WORKER), *args], timeout=120, check=True)


def memory_line(stdout: str) -> dict:
    return json.loads(next(line for line in stdout.splitlines() if line.startswith("MEMORY "))[len("MEMORY "):])


@pytest.mark.timeout(300)
def test_sharded_checkpoint_moves_between_world_sizes_without_a_full_copy(tmp_path):
    a, b, c = tmp_path / "by-2", tmp_path / "by-1", tmp_path / "by-2-again"
    saved = torchrun(WORKER, "save", str(a), "--width", "1024", nproc=2, timeout=120, check=True)
    facts = memory_line(saved.stdout)
    # 1.1 M parameters: 13 MB of parameters and Adam state in all; rank 0 writes only its half.
    assert facts["peak_increase_bytes"] < facts["state_bytes"], facts
    assert (latest_checkpoint(a / "ckpt") / "shards" / "__1_0.distcp").is_file()  # rank 1 wrote its own share
    out = one_process("load", str(b), "--from", str(a), "--width", "1024").stdout
    assert "restored step 3 saved by 2 process(es) into 1" in out
    out = torchrun(WORKER, "load", str(c), "--from", str(b), "--width", "1024", nproc=2, timeout=120,
                   check=True).stdout
    assert "restored step 5 saved by 1 process(es) into 2" in out


class RunsCode:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').write('ran')",))


def test_tampered_metadata_is_refused_and_its_payload_never_runs(tmp_path):
    one_process("save", str(tmp_path / "orig"), "--width", "32")
    folder = latest_checkpoint(tmp_path / "orig" / "ckpt")
    marker = tmp_path / "payload-ran"
    (folder / "shards" / ".metadata").write_bytes(pickle.dumps(RunsCode(str(marker))))
    # Whoever tampers can fix the checksums too: the unpickler must hold on its own.
    sums = json.loads((folder / CHECKSUM_FILE).read_text())
    sums["shards/.metadata"] = file_checksum(folder / "shards" / ".metadata")
    (folder / CHECKSUM_FILE).write_text(json.dumps(sums))
    result = run([sys.executable, str(WORKER), "load", str(tmp_path / "again"), "--from", str(tmp_path / "orig"),
                  "--width", "32"], timeout=120)
    assert result.returncode != 0
    assert "refused to load" in result.stderr and "not part of a checkpoint's metadata" in result.stderr, result.stderr
    assert not marker.exists(), "the payload ran"


@pytest.mark.timeout(200)
def test_rank_killed_during_a_sharded_save_leaves_the_previous_checkpoint(tmp_path):
    died = torchrun(WORKER, "die", str(tmp_path), nproc=2, timeout=120)
    assert died.returncode != 0 and "saved step 1" in died.stdout and "not killed" not in died.stdout
    found = latest_checkpoint(tmp_path / "ckpt")
    assert found is not None and found.name == "step-00000001"
    assert not (tmp_path / "ckpt" / "step-00000002").exists()
    out = one_process("load", str(tmp_path / "after"), "--from", str(tmp_path), "--width", "256")
    assert "restored step 1" in out.stdout
