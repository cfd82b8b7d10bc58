"""`scaletrain.launch(fn, nproc=2, args=...)` from a plain Python session: rank 0's return
value comes back; a failing rank raises LaunchError carrying that rank's traceback."""

import json
import sys

from .launch_helpers import run_session

SESSION = """
import json, scaletrain
from tests.workers.launched_functions import fail_on_rank_1, sum_of_ranks

print("RESULT", json.dumps(scaletrain.launch(sum_of_ranks, nproc=2, args=(10.0,))), flush=True)
try:
    scaletrain.launch(fail_on_rank_1, nproc=2)
except scaletrain.LaunchError as exc:
    print("FAILED", json.dumps({"rank": exc.rank, "traceback": exc.traceback, "message": str(exc)}), flush=True)
"""


def test_launch_a_function_from_a_python_session():
    result, left = run_session([sys.executable, "-c", SESSION], timeout=150)
    assert result.returncode == 0, result.stderr
    assert not left
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines() if line.startswith(("RESULT", "FAILED")))
    assert json.loads(lines["RESULT"]) == {"rank": 0, "world_size": 2, "total": 30.0}
    failed = json.loads(lines["FAILED"])
    assert failed["rank"] == 1 and "ValueError: boom on rank 1" in failed["traceback"]
    assert 'launched_functions.py", line' in failed["traceback"] and "rank 1 failed first" in failed["message"]
