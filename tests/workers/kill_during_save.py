"""Saves a checkpoint at step 1, then dies by SIGKILL part-way through saving step 2.

    python kill_during_save.py DIR state-file|before-marker|before-pointer

state-file: killed with half of state.pt written; before-marker: state.pt and meta.json
complete, COMPLETE not yet written; before-pointer: the folder renamed into place, the
`latest` pointer not yet updated. The process really dies (SIGKILL to itself), as if the
machine's OOM killer or a scheduler had struck at that moment.
"""

import io
import os
import signal
import sys
from pathlib import Path

import torch

import scaletrain
from scaletrain.checkpoint import layout, safe_io


def die():
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def main() -> None:
    directory, where = Path(sys.argv[1]), sys.argv[2]
    run = scaletrain.init(strategy="single", seed=0)
    model = torch.nn.Linear(64, 64)
    optimizer = torch.optim.Adam(model.parameters())
    run.save_checkpoint(directory, model, optimizer, step=1)
    print("saved step 1", flush=True)
    with torch.no_grad():
        model.weight.add_(1.0)

    if where == "state-file":
        def half_then_die(obj, fh):
            buffer = io.BytesIO()
            torch.save(obj, buffer)
            fh.write(buffer.getvalue()[: len(buffer.getvalue()) // 2])
            fh.flush()
            os.fsync(fh.fileno())
            die()
        safe_io.write_state = half_then_die
    elif where == "before-marker":
        layout.publish = lambda staging, directory, step: die()
    elif where == "before-pointer":
        real = layout.write_text_atomic

        def write(path, text):
            if path.name == layout.LATEST_FILE:
                die()
            real(path, text)
        layout.write_text_atomic = write
    run.save_checkpoint(directory, model, optimizer, step=2)
    print("not killed?!", flush=True)


if __name__ == "__main__":
    main()
