"""A rank's hang evidence is taken while it trains: reading it must leave training's memory alone."""

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
