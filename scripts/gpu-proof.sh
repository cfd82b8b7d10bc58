#!/usr/bin/env bash
# The GPU proof: scaletrain's GPU figures in one table, docs/gpu-results.md, from one command
# on one NVIDIA H100 or H200, inside 9 minutes, with no network.
#
#   bash scripts/gpu-proof.sh                    # results in runs/gpu-proof-<time>/, the table in docs/
#   bash scripts/gpu-proof.sh --out DIR          # each part's own files in DIR
#   bash scripts/gpu-proof.sh --dry-run          # on a CPU: every part with tiny shapes (the suite runs it)
#   bash scripts/gpu-proof.sh --parts step-check,float8    # some parts only
#
# Time. A machine with a GPU is often lent for about 15 minutes of device time in all, its
# start-up included, so the proof must finish well inside 9 minutes: its parts have 8 minutes
# together (--deadline, seconds), each part a timeout of its own that the deadline shortens,
# and they run in the order of what they are worth:
#   1. wheels               what the parts import, from scripts/gpu-wheels/ (below)    ~10 s
#   2. gpu-check            gpu-check's one-GPU correctness rows (strategies, context parallel)
#   3. calibration          this GPU's kernels, for the planner                         ~30 s
#   4. step-check           the plan against `scaletrain train --model-config` of a 1.24 B
#                           grouped-query Llama, 4 configurations                       ~2 min
#   5. torchtitan-eager     scaletrain against torchtitan 0.2.2, same model and data    ~1.5 min
#   6. torchtitan-compiled  the same, both compiled                                     ~2.5 min
#   7. float8               bf16 eager, bf16 compiled, float8                           ~2.5 min
#   8. gpu-check-rest       gpu-check's other one-GPU rows (memory, doctor, hang detection),
#                           in what time is left
# A part that fails, times out or finds no time left is a row of the table saying so, never
# the end of the script, and the table is written after every part: a deadline still leaves
# a table. Exit status 0 when no row failed.
#
# Offline. The GPU machine has torch (a CUDA build: Triton comes with it) and scaletrain's own
# requirements; what the parts need besides is installed from the wheels carried in
# scripts/gpu-wheels/ (5.7 MB, pure Python but torchao) into the results folder (OUT/deps),
# never from a network, never into the machine's environment:
#   torchtitan 0.2.2 (the peer), torchao 0.17.0 (float8), tyro 1.0.17 with docstring-parser,
#   typeguard and typing-extensions (torchtitan's configuration), torchdata 0.11.0 (its data
#   loader's import), tomli (Python 3.10), pytest 9 with pluggy, iniconfig, packaging,
#   exceptiongroup, pygments and pytest-timeout (gpu-check).
# torchtitan also imports datasets, tokenizers and tensorboard at module level, for its
# command line, data and logging, which the benchmark does not use: where they are missing
# benchmarks/torchtitan_imports.py stands in for them. transformers must be installed (the
# Hugging Face models scaletrain trains); the table says so where it is not.
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 benchmarks/gpu_proof.py "$@"
