"""The GPU proof's rows: each part's results files read into rows of one table (gpu_proof.py),
judged against what the GPU must show (the targets below); the machine's description; the
table itself. A dry run (tiny shapes on a CPU) judges nothing: its rows say the part ran."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

#: What the GPU must show.
STEP_WITHIN = 0.10       # the plan against every measured step and memory
VS_TORCHTITAN = 1.0      # scaletrain's tokens/s ÷ torchtitan's, at no more peak memory
FLOAT8_SPEEDUP = 1.2     # float8 ÷ bf16 speed (its loss within the check's tolerance)


def last_line(done) -> str:
    text = (done.stderr or "").strip() or (done.stdout or "").strip()
    return (text.splitlines() or [f"exit status {done.returncode}"])[-1][:300]


def machine() -> dict:
    """The GPU's name and the versions, read in a process of its own (no CUDA context here)."""
    code = ("import json, torch; cuda = torch.cuda.is_available(); print(json.dumps({'gpu': "
            "torch.cuda.get_device_name() if cuda else 'no GPU (CPU dry run)', 'torch': torch.__version__, "
            "'cuda': torch.version.cuda, 'capability': list(torch.cuda.get_device_capability()) if cuda else None}))")
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        found = json.loads(done.stdout.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, ValueError, IndexError) as exc:
        found = {"gpu": f"unknown ({exc})", "torch": "?"}
    found["python"] = sys.version.split()[0]
    found["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return found


def _judged(proof, ok: bool) -> str:
    return "ran" if proof.dry else ("pass" if ok else "FAIL")


def wheels(proof, part, done) -> list:
    if done.returncode != 0:
        return [{"check": part.what, "result": "FAIL", "detail": last_line(done)}]
    found = sorted(" ".join(p.name[:-len(".dist-info")].rsplit("-", 1)) for p in proof.deps.glob("*.dist-info"))
    proof.machine["installed"] = found
    rows = [{"check": part.what, "result": "pass", "detail": f"into {proof.deps.name}/: {', '.join(found)}"}]
    if importlib.util.find_spec("transformers") is None:
        rows.append({"check": "transformers", "result": "FAIL", "detail": "not installed: the step check, the "
                     "comparison with torchtitan and float8 train Hugging Face models (pip install transformers)"})
    return rows


def gpu_check(proof, part, done) -> list:
    results = proof.out / part.name / "gpu-check.json"
    if not results.exists():
        line = last_line(done)
        nothing = "nothing to check" in (done.stdout + done.stderr)
        return [{"check": part.what, "result": "skip" if nothing else "FAIL", "detail": line}]
    checks = json.loads(results.read_text())["checks"]
    mark = {"passed": "pass", "failed": "FAIL", "skipped": "skip"}
    return [{"check": f"{c['group']}: {c['name']}", "result": mark.get(c["result"], c["result"]),
             "detail": c["line"][:300]} for c in checks if c["result"] != "skipped" or "needs" not in c["line"]]


def _calibration_file(folder: Path):
    files = sorted(folder.glob("*.json"))
    return files[0] if files else None


def calibration_argument(folder: Path) -> list:
    found = _calibration_file(folder)
    return ["--calibration", str(found)] if found else []


def calibration(proof, part, done) -> list:
    found = _calibration_file(proof.out / "calibration")
    if found is None:
        return [{"check": part.what, "result": "FAIL", "detail": last_line(done)}]
    data = json.loads(found.read_text())
    median = lambda values: sorted(values)[len(values) // 2] if values else 0.0  # noqa: E731
    bf16 = median([r["tflops"] for r in data["matmul"] if r["dtype"] == "bf16"])
    fp8 = median([r["tflops"] for r in data["matmul"] if r["dtype"] == "fp8"])
    attention = [r["forward_tflops"] for r in data["attention"]]
    detail = (f"matmul bf16 median {bf16:,.0f} TFLOP/s" + (f", fp8 {fp8:,.0f}" if fp8 else "")
              + (f"; attention forward {min(attention):,.0f}–{max(attention):,.0f}" if attention else "")
              + f"; in-step efficiency {data['layer_efficiency']:.0%}; {data['seconds']:.0f} s ({found.name})")
    return [{"check": part.what, "result": "ran" if proof.dry else "pass", "detail": detail}]


def step_check(proof, part, done) -> list:
    results = proof.out / "step-check" / "gpu_step_check.json"
    if not results.exists():
        return [{"check": part.what, "result": "FAIL", "detail": last_line(done)}]
    data = json.loads(results.read_text())
    found = []
    for r in data["rows"]:
        name = f"{data['model']}: seq {r['seq']} mb {r['microbatch']} AC {r['checkpointing']}"
        if "step_seconds" not in r:
            found.append({"check": name, "result": "FAIL", "detail": f"failed: {r.get('failure')}"})
            continue
        errors = [r.get("step_error"), r.get("memory_error")]
        ok = all(e is not None and abs(e) <= STEP_WITHIN for e in errors)
        reserved = f", reserved {r['reserved_error']:+.1%}" if r.get("reserved_error") is not None else ""
        mfu = f", MFU {r['mfu']:.1%}" if r.get("mfu") else f" ({r.get('mfu_note')})" if r.get("mfu_note") else ""
        found.append({"check": name, "result": _judged(proof, ok),
                      "detail": f"step {r['step_seconds'] * 1e3:,.1f} ms, plan {r['step_error']:+.1%}; peak allocated "
                                f"{r['peak_memory_bytes'] / 2**30:.2f} GiB, plan {_pct(r.get('memory_error'))}"
                                f"{reserved}{mfu} (targets: within {STEP_WITHIN:.0%})"})
    return found


def _pct(value) -> str:
    return f"{value:+.1%}" if value is not None else "–"


def torchtitan(proof, part, done) -> list:
    results = next((proof.out / part.name).glob("gpu_vs_torchtitan.json"), None) \
        if (proof.out / part.name).exists() else None
    if results is None:
        return [{"check": part.what, "result": "FAIL", "detail": last_line(done)}]
    sides = json.loads(results.read_text())["results"]
    found = []
    for name, r in sides.items():
        if "tokens_per_second" in r:
            memory = f", peak {r['peak_allocated_bytes'] / 2**30:.1f} GiB" if r.get("peak_allocated_bytes") else ""
            mfu = f", MFU {r['mfu']:.1%}" if r.get("mfu") else ""
            found.append({"check": f"{part.what}: {name}", "result": "ran",
                          "detail": f"{r['tokens_per_second']:,.0f} tokens/s{mfu}{memory}"})
        elif proof.dry and r.get("configured"):
            found.append({"check": f"{part.what}: {name}", "result": "ran",
                          "detail": f"configured {r['flavor']}: {r['parameters']:,} parameters (trains on GPUs only)"})
        else:
            found.append({"check": f"{part.what}: {name}", "result": "FAIL", "detail": str(r.get("error"))[:300]})
    ours, theirs = sides.get("scaletrain", {}), sides.get("torchtitan", {})
    if "tokens_per_second" in ours and "tokens_per_second" in theirs:
        ratio = ours["tokens_per_second"] / theirs["tokens_per_second"]
        memory = (ours.get("peak_allocated_bytes") or 0) / (theirs.get("peak_allocated_bytes") or 1)
        found.append({"check": f"{part.what}: scaletrain ÷ torchtitan", "result": _judged(
            proof, ratio >= VS_TORCHTITAN and memory <= 1.0), "detail": f"{ratio:.2f}× the tokens/s at {memory:.2f}× "
            f"the peak memory (target ≥ {VS_TORCHTITAN:.1f}× at ≤ 1.0×)"})
    return found


def float8(proof, part, done) -> list:
    results = proof.out / "float8" / "gpu_float8_check.json"
    if not results.exists():
        return [{"check": part.what, "result": "FAIL", "detail": last_line(done)}]
    data = json.loads(results.read_text())
    found = []
    for name, r in data["runs"].items():
        if r.get("refused"):
            found.append({"check": f"float8: {name}", "result": "skip" if proof.dry else "FAIL",
                          "detail": f"refused: {r['refused']}"})
        elif "losses" not in r:
            found.append({"check": f"float8: {name}", "result": "FAIL", "detail": str(r.get("error"))[:300]})
    for name, c in data.get("comparisons", {}).items():
        ok = c["passes"] and c["float8_speedup"] >= FLOAT8_SPEEDUP
        found.append({"check": f"float8 against {name}", "result": _judged(proof, ok),
                      "detail": f"{c['float8_speedup']:.2f}× the speed ({c['bf16_step_s'] * 1e3:,.0f} → "
                                f"{c['float8_step_s'] * 1e3:,.0f} ms a step), loss within "
                                f"{c['max_relative_gap_last_half']:.2%} over the last half (targets ≥ "
                                f"{FLOAT8_SPEEDUP}×, within {c['tolerance']:.0%})"})
    if proof.dry:
        found += [{"check": f"float8: {name} trained", "result": "ran", "detail": f"{len(r['losses'])} steps"}
                  for name, r in data["runs"].items() if "losses" in r]
    return found


def markdown(machine: dict, rows: list, dry: bool) -> str:
    installed = ", ".join(machine.get("installed", [])) or "–"
    lines = ["# GPU results", "",
             "Written by `scripts/gpu-proof.sh` (benchmarks/gpu_proof.py), part by part, in one run"
             + (" — a CPU dry run: tiny shapes, the figures mean nothing" if dry else "") + ".", "",
             f"- GPU: {machine.get('gpu')}" + (f" (compute capability {'.'.join(map(str, machine['capability']))})"
                                              if machine.get("capability") else ""),
             f"- torch {machine.get('torch')} (CUDA {machine.get('cuda')}), Python {machine.get('python')}; "
             f"from the carried wheels: {installed}",
             f"- run {machine.get('date')}", "",
             "| part | check | result | s | what it measured (or why not) |", "|---|---|---|---:|---|"]
    for row in rows:
        detail = str(row["detail"]).replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {row['part']} | {row['check']} | {row['result']} | {row['seconds']:.0f} | {detail} |")
    return "\n".join(lines) + "\n"
