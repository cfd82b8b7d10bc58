"""The program returns (rank 1 with exit status 3), but leaves a non-daemon thread that never
ends: interpreter finalisation would wait for it forever; and a child process it never waited
for (`sleep`), which must end with the rank (spawn left it running, mpirun waited for it).
No torch; prints whether the rank runner had imported torch before the program started.

Rank 1 fails only after rank 0 has printed (rank 0 leaves a marker file in the folder given
as the first argument): torchrun stops the other ranks as soon as one fails, and rank 0's line
must not depend on which process the machine happened to start first."""
import os
import pathlib
import subprocess
import sys
import threading
import time

if __name__ == "__main__":
    print(f"torch imported before the program: {'torch' in sys.modules}", flush=True)
    marker = pathlib.Path(sys.argv[1]) / "rank0-printed"
    threading.Thread(target=threading.Event().wait).start()  # never set, never ends
    subprocess.Popen(["sleep", "287"])  # never waited for
    if os.environ["RANK"] == "0":
        marker.touch()
        sys.exit(0)
    deadline = time.monotonic() + 45
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    sys.exit(3)
