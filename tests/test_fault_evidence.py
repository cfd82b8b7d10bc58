"""A rank's hang evidence is taken while it trains: reading it must leave training's memory alone;
read back by `scaletrain report`, a record older than the stuck collective is not taken for
'never entered', the checkpoint writer's collectives are not taken for training's, and a dump
whose files are damaged or missing is explained without a traceback."""

from __future__ import annotations

import gc
import threading
import weakref

from scaletrain.fault import hang_evidence as evidence


class _Activation:
    """Stands for a tensor a training function holds in a local."""


def _train_while_the_heartbeat_publishes() -> weakref.ref:
    held = _Activation()
    publisher = threading.Thread(target=evidence.stacks)  # as the heartbeat thread does
    publisher.start()
    publisher.join()
    return weakref.ref(held)


def test_reading_every_threads_stack_keeps_no_frame_or_local_alive():
    # A reference cycle through the frames would keep the training thread's locals (a step's
    # activations) until the garbage collector ran: the run's memory peak then depended on
    # when it did. With the collector off, only reference counts free them.
    enabled = gc.isenabled()
    gc.disable()
    try:
        gone = _train_while_the_heartbeat_publishes()
        assert gone() is None
    finally:
        if enabled:
            gc.enable()


def test_stacks_name_the_training_thread_first():
    text = evidence.stacks()
    assert text.startswith("Thread ") and "the training thread" in text.splitlines()[0]
    assert "test_stacks_name_the_training_thread_first" in text


def _dump(folder, verdict, records):
    """A hang's dump folder as the watchdog writes one (hang.json, rank-N-*), from dicts or raw text."""
    import json

    folder.mkdir(parents=True, exist_ok=True)
    if verdict is not None:
        (folder / "hang.json").write_text(verdict if isinstance(verdict, str) else json.dumps(verdict))
    for rank, record in records.items():
        (folder / f"rank-{rank}-stacks.txt").write_text(f"# rank {rank}\nThread MainThread:\n")
        text = record if isinstance(record, str) else json.dumps(record)
        (folder / f"rank-{rank}-collectives.json").write_text(text)
    return folder


def _fr(seq, group, done, created_s, name="all_reduce"):
    return {"seq": seq, "group": group, "name": name, "done": done, "created_ns": int(created_s * 1e9),
            "sizes": [[4]], "dtypes": ["Float"]}


def _report(folder, capsys) -> str:
    from scaletrain.cli import main

    assert main(["report", str(folder)]) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    return captured.out


def test_a_stale_record_is_not_taken_for_never_entering_and_background_groups_come_last(tmp_path, capsys):
    """Rank 1 stopped 25 s and 10 steps before rank 0 entered the all-reduce it waits in: its
    last published record cannot show whether it entered it. An unfinished collective of the
    checkpoint writer's group, older, is not the one the job is stuck in."""
    now = 1_700_000_000.0
    verdict = {"detected_by": 0, "world_size": 2, "when": "then", "waited_s": 20, "where": "train step 31",
               "timeout": "20s", "silent": {"1": "pid 9, silent for 25 s, last seen in train step 21"}}
    writer = "scaletrain background: checkpoint writer (id 9)"
    records = {0: {"rank": 0, "time": now, "step": 30, "source": "written by the rank itself",
                   "flight_recorder": [_fr(3, writer, False, now - 40, "gather"), _fr(29, "default_pg (id 0)", True, now - 2),
                                       _fr(30, "default_pg (id 0)", False, now - 1)]},
               1: {"rank": 1, "time": now - 26, "step": 20, "source": "read from its last heartbeat",
                   "flight_recorder": [_fr(3, writer, False, now - 40, "gather"), _fr(20, "default_pg (id 0)", True, now - 27)]}}
    text = _report(_dump(tmp_path / "hang-0", verdict, records), capsys)
    assert "The job is stuck in all_reduce #30 of process group default_pg (id 0)" in text, text
    assert "never entered" not in text, text
    assert "Not known for rank 1: its record was taken 25 s before that collective began, from step 20" in text, text


def test_report_explains_a_dump_whose_files_are_damaged_or_missing(tmp_path, capsys):
    """Files written by processes being killed: a hang.json cut short, a collectives file that
    is a list, no hang.json at all (every rank's stacks are there): explained, no traceback,
    never 'not a run folder'."""
    good = {"rank": 0, "time": 1.0, "step": 3, "where": ["loop.py:10 in step"], "flight_recorder": []}
    text = _report(_dump(tmp_path / "cut", '{"detected_by": 0, "world_si', {0: good, 1: "[1, 2]"}), capsys)
    assert "The dump's hang.json is damaged" in text and "rank-1-collectives.json is not a rank's record" in text, text
    assert "rank 0 (?, from step 3): loop.py:10 in step" in text, text
    text = _report(_dump(tmp_path / "no-verdict", None, {0: good, 1: good | {"rank": 1}}), capsys)
    assert "hang.json is missing" in text and "No verdict" in text and "rank 1 (" in text, text
