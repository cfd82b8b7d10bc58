"""A full disk during a checkpoint: one line saying what, where and how much room was
needed, exit status 2 (never retried by --max-restarts), nothing half-written left as a
checkpoint. The disk is a 3 MB tmpfs mounted for the test (root can mount here)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.helpers import scaletrain


@pytest.fixture
def small_disk(tmp_path):
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount_point)],
                             capture_output=True, text=True)
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs here (needs root and CAP_SYS_ADMIN): {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], capture_output=True)


@pytest.mark.parametrize("layout", [[], ["--strategy", "fsdp", "--checkpoint-async", "--checkpoint-layout", "sharded"]],
                         ids=["full", "async-sharded"])
def test_a_full_disk_during_a_checkpoint_is_one_line_and_not_retried(small_disk: Path, layout):
    """async-sharded: DCP's CheckpointException (a BaseException, holding every rank's traceback)
    is one line too."""
    out = small_disk / "run"
    # Two ranks: both learn of the failed save (rank 0 broadcasts it); the line is shown once.
    done = scaletrain("train", "--nproc-per-node", "2", "--workload", "synthetic-mlp", "--epochs", "1", *layout,
                      "--checkpoint-every", "2", "--max-restarts", "2", "--out", str(out), timeout=240)
    errors = [line for line in done.stderr.splitlines() if line.startswith("scaletrain: error:")]
    assert done.returncode == 2, done.stderr[-3000:]
    assert len(errors) == 1 and "the disk is full" in errors[0], done.stderr[-3000:]
    # The first checkpoint failed: there is no previous one to keep, and the line does not say there is.
    assert "no checkpoint was written yet" in errors[0] and "previous checkpoint" not in errors[0], errors[0]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "restart" not in done.stderr.lower()  # a full disk is not retried
    assert not list((out / "checkpoints").glob("step-*"))  # no checkpoint was published


@pytest.fixture
def full_disk(tmp_path):
    """A 256 KB tmpfs with 8 KB left: a few writes fill it."""
    mount_point = tmp_path / "tiny"
    mount_point.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount_point)],
                             capture_output=True, text=True)
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs here (needs root and CAP_SYS_ADMIN): {mounted.stderr.strip()}")
    try:
        (mount_point / "filler").write_bytes(b"\0" * (248 * 1024))
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], capture_output=True)


def _until_full(write, limit: int = 10_000) -> BaseException:
    for step in range(limit):
        try:
            write(step)
        except BaseException as exc:  # noqa: BLE001 - what the full disk raised is the answer
            return exc
    raise AssertionError("the disk never filled")


def test_a_full_disk_for_metrics_summary_and_trackers_is_one_line(full_disk: Path, capsys):
    """Outside checkpoints (in one process): metrics.jsonl, summary.json and each tracker,
    each on a disk with 8 KB left."""
    import shutil

    from scaletrain.foundation.safe_files import DiskFull
    from scaletrain.track import open_trackers
    from scaletrain.train.report import Reporter

    record = {"kind": "step", "step": 1, "total_steps": 9, "epoch": 1, "epochs": 1, "lr": 0.1, "train_loss": 0.5,
              "samples_per_second": 10.0, "eta_seconds": 1.0}

    def tracker_logs(name):
        trackers = open_trackers([name], full_disk / "run")
        try:
            for step in range(100_000):
                trackers.log({"train/loss": 0.5, "train/lr": 0.1}, step)
                if step % 100 == 99:
                    trackers.finish()  # flushes (TensorBoard writes from a thread of its own)
                    trackers = open_trackers([name], full_disk / "run")
        finally:
            trackers.finish()  # after a full disk: nothing more, no second error

    writes = {"metrics.jsonl": lambda: [Reporter(True, full_disk / "run").step({**record, "step": step})
                                        for step in range(100_000)],
              "summary.json": lambda: Reporter(True, full_disk / "run").finish({"notes": "x" * 65536}),
              "csv": lambda: tracker_logs("csv"), "tensorboard": lambda: tracker_logs("tensorboard")}
    for what, write in writes.items():
        shutil.rmtree(full_disk / "run", ignore_errors=True)
        with pytest.raises(DiskFull) as caught:
            write()
        message = str(caught.value)
        assert "\n" not in message and "the disk is full" in message and "--out" in message, (what, message)
    capsys.readouterr()


def test_a_full_disk_outside_checkpoints_stops_the_run_in_one_line_not_retried(full_disk: Path):
    out = full_disk / "run"
    done = scaletrain("train", "--workload", "digits-mlp", "--nproc-per-node", "2", "--epochs", "40",
                      "--log-every-steps", "1", "--tracker", "csv", "--tracker", "tensorboard", "--max-restarts", "1",
                      "--out", str(out), timeout=180)
    errors = [line for line in done.stderr.splitlines() if line.startswith("scaletrain: error:")]
    assert done.returncode == 2, done.stderr[-3000:]
    assert len(errors) == 1 and "the disk is full" in errors[0], done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "restart" not in done.stderr.lower()


@pytest.fixture
def no_room(tmp_path):
    """A 64 KB tmpfs with no byte left; and beside it a read-only one."""
    mounts = []
    for name, options in (("full", "size=64k"), ("readonly", "size=64k,ro")):
        mount_point = tmp_path / name
        mount_point.mkdir()
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount_point)],
                                 capture_output=True, text=True)
        if mounted.returncode:
            pytest.skip(f"cannot mount a tmpfs here (needs root and CAP_SYS_ADMIN): {mounted.stderr.strip()}")
        mounts.append(mount_point)
    try:
        try:
            with open(mounts[0] / "filler", "wb", buffering=0) as filler:
                while True:
                    filler.write(b"\0" * 4096)
        except OSError:  # the disk is full: what the tests want
            pass
        yield mounts
    finally:
        for mount_point in mounts:
            subprocess.run(["umount", "-l", str(mount_point)], capture_output=True)


def test_a_disk_with_no_room_before_the_run_is_one_line_and_leaves_nothing(no_room):
    """0 bytes free: the output folder's lock could not be written (once a traceback and an
    empty folder left behind); --max-restarts does not retry it."""
    full, _ = no_room
    out = full / "o"
    done = scaletrain("train", "--nproc-per-node", "1", "--max-steps", "2", "--max-restarts", "2", "--out", str(out),
                      timeout=120)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-3000:]
    assert "the disk is full (0.0 MB free); nothing was started" in lines[0] and str(out) in lines[0], lines[0]
    assert not out.exists()


def test_an_out_that_cannot_be_written_says_why(no_room):
    """A read-only --out named the cause, not only "permission denied"."""
    from scaletrain.cli.outdir import check_out
    from scaletrain.foundation.errors import UsageError

    _, readonly = no_room
    for out in (readonly, readonly / "new"):
        with pytest.raises(UsageError) as refused:
            check_out(out)
        assert "its file system is mounted read-only" in str(refused.value), refused.value
