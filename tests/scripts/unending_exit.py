"""The program returns (rank 1 with exit status 3), but leaves a non-daemon thread that never
ends: interpreter finalisation would wait for it forever. No torch; prints whether the rank
runner had imported torch before the program started."""
import os
import sys
import threading

if __name__ == "__main__":
    print(f"torch imported before the program: {'torch' in sys.modules}", flush=True)
    threading.Thread(target=threading.Event().wait).start()  # never set, never ends
    sys.exit(3 if os.environ["RANK"] == "1" else 0)
