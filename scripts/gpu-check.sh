#!/usr/bin/env bash
# Checks scaletrain's GPU paths on this machine, each check a real run with a hard timeout
# and a one-line result: every strategy on CUDA against one process (fp32, bf16, fp16,
# torch.compile, the compositions of the mesh where there are GPUs enough), CUDA memory
# against the plan, speed (bench, the API against raw DDP), doctor and comm with NCCL, and
# hang detection. The checks are the pytest tests marked `gpu` (tests/gpu/); `pytest -m gpu`
# runs the same. See docs/gpu-check.md.
#
#   bash scripts/gpu-check.sh                # every check; results in runs/gpu-check-<time>/
#   bash scripts/gpu-check.sh --out DIR      # results in DIR: gpu-check.md, gpu-check.json, runs/
#   bash scripts/gpu-check.sh -k memory      # other arguments go to pytest
#
# Exit status: 0 when every check passed or was skipped (one that needs more GPUs than
# there are says so), 1 when one failed. Without a GPU it says so in one line and exits 0.
#
# SCALETRAIN_GPU_CHECK_CPU=N runs the very same checks on the CPU with Gloo, as if N devices
# were visible: for working on the checks on a machine without a GPU (not part of CI).
set -euo pipefail
cd "$(dirname "$0")/.."

out=""
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --out) [ $# -ge 2 ] || { echo "gpu-check: --out needs a folder (--out DIR)" >&2; exit 2; }; out="$2"; shift 2 ;;
    --out=*) out="${1#--out=}"; shift ;;
    *) args+=("$1"); shift ;;
  esac
done

if [ -n "$out" ] && [ -e "$out" ] && [ -n "$(ls -A "$out" 2>/dev/null)" ]; then
  echo "gpu-check: --out $out is not empty; give a new or empty folder" >&2
  exit 2
fi

status=0
python3 -m tests.gpu.target || status=$?
case "$status" in
  0) ;;
  3) exit 0 ;;  # no GPU: the line above said so
  *) exit "$status" ;;
esac
if ! python3 -c "import pytest, pytest_timeout" 2>/dev/null; then
  echo "gpu-check: pytest and pytest-timeout are missing; install them with: pip install pytest pytest-timeout" >&2
  exit 2
fi

export SCALETRAIN_GPU_CHECK_OUT="${out:-runs/gpu-check-$(date +%Y%m%d-%H%M%S)}"
exec python3 -m pytest -m gpu tests/gpu -p no:cacheprovider "${args[@]+"${args[@]}"}"
