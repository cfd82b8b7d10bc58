"""scaletrain against raw DDP, Hugging Face Accelerate and Lightning Fabric, in one invocation.

    flock /tmp/scaletrain-bench.lock python benchmarks/peers.py --reps 5

Every configuration trains the same model on the same data with the same optimizer (Adam),
batch per process and epochs (see bench_common.py); they differ only in who runs the loop:

  raw          a hand-written DDP loop (run_raw_ddp.py) under `torchrun` — the reference
  api          scaletrain's library API (run_scaletrain_api.py) under `torchrun`, its defaults
  api-unpinned the same with the raw loop's exact settings (core affinity left to the OS)
  trainer      `scaletrain train --workload W --nproc-per-node N`, its defaults
  accelerate   run_accelerate.py under `accelerate launch` (--multi_gpu --num_processes N for N > 1:
               Accelerate's only launcher that starts several processes without an MPI set-up)
  fabric       run_fabric.py: Fabric(accelerator="cpu", devices=N, strategy="ddp"), fabric.launch()
  *+bf16       the same with scaletrain's --grad-compression bf16 (communication-heavy MLP)
  * 2 hosts@R  the trainer on two hosts (network namespaces from testbed/netns.sh, one process
               and one core each) joined by a link capped at tc rate R, with and without
               compression: what compression is for is a slow wire, which one machine's
               loopback is not (needs root, iproute2)

Runs alternate (round robin, the order rotated every repetition) so that a slow spell on a
shared machine hits every configuration alike; the tables show medians and ratios against
raw DDP at the same workload and process count. Throughput is samples/s over the epochs
after the first; start-up is from the moment the command is started to the end of the
first training step. The benchmark runs on the CPU (gloo); `--device cuda` runs raw, api,
api-unpinned and trainer on one GPU per process over NCCL instead.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from peer_configs import build_configs, links_unavailable, prepare_link, run_config, two_hosts  # noqa: E402
from peer_report import accuracy_rows, markdown, print_table  # noqa: E402

sys.path.insert(0, str(HERE.parent))
from scaletrain.foundation.text_values import non_negative_int, positive_int, whole_number  # noqa: E402

REPO = HERE.parent
#: The runners that take --device cuda.
CUDA_RUNNERS = ("raw", "api", "api-unpinned", "trainer")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=positive_int, default=5, help="repetitions of every configuration (default 5)")
    p.add_argument("--nprocs", default="1,2", help="process counts, comma-separated (default 1,2)")
    p.add_argument("--single-reps", type=non_negative_int, default=None,
                   help="repetitions of the 1-process configurations (default: --reps); they are slow, and "
                        "the comparisons that matter are at 2+ processes")
    p.add_argument("--workloads", default="synthetic-cnn,synthetic-mlp", help="comma-separated")
    p.add_argument("--runners", default="raw,api,api-unpinned,trainer,accelerate,fabric", help="comma-separated")
    p.add_argument("--compression", default="bf16",
                   help="also run api and trainer with these --grad-compression values (comma-separated) "
                        "on the MLP ('none' to skip; default bf16)")
    p.add_argument("--links", default="10gbit,1gbit",
                   help="tc rates of the two-host links for the compression comparison on the MLP, comma-separated "
                        "('veth' for no cap, 'none' to skip; default 10gbit,1gbit)")
    p.add_argument("--epochs", type=lambda text: whole_number(text, minimum=2), default=3, help="the first is warm-up (default 3)")
    p.add_argument("--batch-size", type=positive_int, default=32, help="samples per process per step (default 32)")
    p.add_argument("--accuracy", action="store_true",
                   help="also train digits-mlp on 2 processes with and without --compression; report accuracy")
    p.add_argument("--quick", action="store_true",
                   help="smoke test: synthetic-cnn, raw and the api only, 1 repetition, 2 epochs of at most 3 steps")
    p.add_argument("--max-steps", type=non_negative_int, default=0, help="steps per epoch at most, for raw/api/peers (0: all)")
    p.add_argument("--timeout", type=float, default=600, help="seconds before one run is killed")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="cuda: one GPU per process over NCCL, for the runners raw, api, api-unpinned and trainer "
                        "(default cpu: Gloo)")
    p.add_argument("--against", type=Path, metavar="DIR",
                   help="also run the api and trainer runners of another version's tree (a copy of it at DIR), in "
                        "the same rounds: the rows named [DIR's name] are that version's")
    p.add_argument("--out", type=Path, default=REPO / "docs" / "performance-results.md",
                   help="markdown file to write (default docs/performance-results.md)")
    args = p.parse_args(argv)
    if args.quick:
        args.reps, args.workloads, args.runners, args.compression, args.epochs = 1, "synthetic-cnn", "raw,api,api-unpinned", "none", 2
        args.max_steps, args.links = 3, "none"
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            p.error("--device cuda: no CUDA device is visible here; use --device cpu")
    cpu_only = sorted(set(args.runners.split(",")) - set(CUDA_RUNNERS))
    if args.device == "cuda" and cpu_only:
        p.error(f"--device cuda: the runners {','.join(cpu_only)} run on the CPU only; give --runners "
                f"{','.join(r for r in args.runners.split(',') if r in CUDA_RUNNERS) or 'raw,api'}")
    args.link_list = [link for link in args.links.split(",") if link and link != "none"]
    if args.link_list and args.device == "cuda":
        print("note: skipping the two-host links (they compare CPU hosts; --links none hides this note)", flush=True)
        args.link_list = []
    if args.link_list and (why := links_unavailable()):
        print(f"note: skipping the two-host links ({why}; --links none hides this note)", flush=True)
        args.link_list = []
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    configs = build_configs([w for w in args.workloads.split(",") if w], [int(n) for n in args.nprocs.split(",")],
                            [r for r in args.runners.split(",") if r], args.compression.split(","), args.link_list,
                            args.device)
    if args.against is not None:  # the same api and trainer runs of the other version, beside these
        configs += [replace(c, tree=str(args.against.resolve())) for c in configs
                    if c.runner in ("api", "trainer") and not c.link]
    results: dict[str, list[dict]] = {c.key: [] for c in configs}
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="scaletrain-peers-") as scratch, two_hosts(any(c.link for c in configs)):
        for rep in range(args.reps):
            shift = rep % len(configs)
            for config in configs[shift:] + configs[:shift]:
                if config.nproc == 1 and args.single_reps is not None and rep >= args.single_reps:
                    continue
                if config.link:
                    prepare_link(config.link)
                result = run_config(config, Path(scratch), args.epochs, args.batch_size, args.timeout, args.max_steps)
                results[config.key].append(result)
                print(f"[rep {rep + 1}/{args.reps}] {config.key:38} {result['samples_per_second']:8.1f} samples/s  "
                      f"start-up {result['startup_seconds']:5.1f} s", flush=True)
        accuracy = accuracy_rows(Path(scratch), args.compression.split(","), args.timeout) if args.accuracy else []
    print_table(configs, results)
    text = markdown(configs, results, accuracy, args, time.time() - started)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    (args.out.with_suffix(".json")).write_text(json.dumps(
        {"args": {k: str(v) for k, v in vars(args).items()}, "results": results, "accuracy": accuracy}, indent=1))
    print(f"written: {args.out} (and {args.out.with_suffix('.json').name})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
