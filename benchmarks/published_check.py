"""The cluster planner against published training runs: every row of the development set
(`published_rows.py`: its sources, and what each row takes where its source is silent)
predicted from one hardware profile per kind of GPU and the software the run states, nothing
fitted to a row, against published throughput and memory; accuracy by source and by sequence
length; and, for a few scenarios, what `--choose` picks.

    python benchmarks/published_check.py [--out DIR] [--choose]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from published_rows import HARDWARE_TFLOPS, Row, development_set  # noqa: E402
from scaletrain.plan.cluster.config import check  # noqa: E402
from scaletrain.plan.cluster.search import Fixed, choose, predict_all  # noqa: E402
from scaletrain.plan.cluster.step import predict  # noqa: E402

GIB = 2 ** 30
#: Sequence lengths the accuracy is broken down by.
SEQ_BANDS = ((2048, "2k"), (4096, "4k"), (8192, "8k"), (32768, "16k–32k"), (10 ** 9, "64k–256k"))


def evaluate(row: Row, with_choice: bool = False) -> dict:
    best = None
    for config in row.configs:
        check(config, row.scenario)
        p = predict(config, row.scenario)
        if best is None or p.step_seconds < best.step_seconds:
            best = p
    value = best.hardware_flops_per_step / best.step_seconds / row.scenario.gpus / 1e12 \
        if row.unit == HARDWARE_TFLOPS else best.tokens_per_second_per_gpu
    out = {"name": row.name, "source": row.source, "seq": row.seq, "unit": row.unit, "published": row.published,
           "predicted": value, "error": value / row.published - 1, "configuration": best.config.label(),
           "software": best.config.software.describe(row.scenario.profile), "fits": best.fits,
           "memory_gib": best.memory_bytes / GIB, "published_memory_gib": row.memory_gib,
           "memory_error": (best.memory_bytes / GIB / row.memory_gib - 1) if row.memory_gib else None,
           "tokens_per_second_per_gpu": best.tokens_per_second_per_gpu, "mfu": best.mfu,
           "mfu_published": best.mfu_published, "note": row.note}
    if with_choice:
        config = row.configs[0]
        options = tuple((name, getattr(config, name)) for name in ("async_tp", "sequence_parallel",
                                                                    "overlap_grad_reduce", "cp_rotate"))
        chosen, _runner_up = choose(predict_all(row.scenario, Fixed(float8=config.float8, software=config.software,
                                                                    options=options)))
        out.update(chosen=chosen.config.label(), chosen_fits=chosen.fits,
                   chosen_tokens_per_second_per_gpu=chosen.tokens_per_second_per_gpu,
                   chosen_vs_published_configuration=chosen.tokens_per_second_per_gpu / best.tokens_per_second_per_gpu)
    return out


def band(seq: int) -> str:
    return next(name for limit, name in SEQ_BANDS if seq <= limit)


def summary(results: list[dict]) -> dict:
    errors = [abs(r["error"]) for r in results]
    worst = max(results, key=lambda r: abs(r["error"]))
    memory = [abs(r["memory_error"]) for r in results if r["memory_error"] is not None]
    return {"rows": len(results), "median_abs_error": statistics.median(errors), "largest_abs_error": max(errors),
            "worst": worst["name"], "within_15": sum(e <= 0.15 for e in errors),
            "memory_rows": len(memory), "memory_largest_abs_error": max(memory) if memory else None,
            "published_configurations_not_fitting": [r["name"] for r in results if not r["fits"]]}


def _grouped(results: list[dict], key, order=()) -> list[str]:
    groups: dict = {name: [] for name in order}
    for r in results:
        groups.setdefault(key(r), []).append(r)
    groups = {name: rows for name, rows in groups.items() if rows}
    lines = []
    for name, rows in groups.items():
        errors = [abs(r["error"]) for r in rows]
        signed = statistics.median(r["error"] for r in rows)
        lines.append(f"| {name} | {len(rows)} | {statistics.median(errors):.1%} | {signed:+.1%} | {max(errors):.1%} |")
    return lines


def markdown(results: list[dict]) -> str:
    lines = ["| source | run | seq | published | predicted | error | memory GiB published / predicted | fits |",
             "|---|---|---:|---:|---:|---:|---|---|"]
    for r in results:
        memory = f"{r['published_memory_gib']:.1f} / {r['memory_gib']:.1f} ({r['memory_error']:+.0%})" \
            if r["published_memory_gib"] else f"— / {r['memory_gib']:.1f}"
        unit = "" if r["unit"].startswith("tokens") else " TFLOP/s"
        lines.append(f"| {r['source']} | {r['name']} | {r['seq']:,} | {r['published']:,.0f}{unit} | "
                     f"{r['predicted']:,.0f} | {r['error']:+.1%} | {memory} | {'yes' if r['fits'] else 'no'} |")
    head = ["", "| group | rows | median \\|error\\| | median error | largest \\|error\\| |", "|---|---:|---:|---:|---:|"]
    lines += ["", "By source:"] + head[1:] + _grouped(results, lambda r: r["source"])
    lines += ["", "By sequence length:"] + head[1:] + _grouped(results, lambda r: band(r["seq"]), [name for _limit, name in SEQ_BANDS])
    s = summary(results)
    memory = f"memory: largest |error| {s['memory_largest_abs_error']:.1%} over {s['memory_rows']} rows" \
        if s["memory_rows"] else "no memory published"
    fits = "every published configuration predicted to fit" if not s["published_configurations_not_fitting"] else \
        f"predicted not to fit: {', '.join(s['published_configurations_not_fitting'])}"
    lines += ["", f"Throughput: median |error| {s['median_abs_error']:.1%} over {s['rows']} rows, {s['within_15']} "
                  f"within 15%, largest {s['largest_abs_error']:.1%} ({s['worst']}); {memory}; {fits}."]
    return "\n".join(lines) + "\n"


#: Scenarios whose --choose the check shows (index in the development set).
CHOSEN = ("8B FSDP 8, eager", "70B FSDP 32 × TP 8, compile + float8", "GPT 1.7B TP 1 × PP 1, 32 GPUs")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, help="also write published_check.md and .json there")
    p.add_argument("--choose", action="store_true", help=f"also --choose for the scenarios of {', '.join(CHOSEN)}")
    args = p.parse_args(argv)
    started = time.perf_counter()
    results = [evaluate(row, args.choose and row.name in CHOSEN) for row in development_set()]
    text = markdown(results)
    print(text)
    for r in results:
        if "chosen" in r:
            print(f"--choose for {r['name']}: {r['chosen']} ({r['chosen_vs_published_configuration']:.2f}× the "
                  f"published configuration's predicted tokens/s, fits: {r['chosen_fits']})")
    print(f"({time.perf_counter() - started:.0f} s)")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "published_check.md").write_text(text)
        (args.out / "published_check.json").write_text(json.dumps({"summary": summary(results), "rows": results},
                                                                  indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
