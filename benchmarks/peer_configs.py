"""The configurations benchmarks/peers.py compares: the exact command each one runs, and
how its timings are read back."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PY = sys.executable
#: Variables a launcher sets for its children; inherited ones would confuse every runner.
LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                 "GROUP_RANK", "GROUP_WORLD_SIZE", "SCALETRAIN_LAUNCHER", "OMP_NUM_THREADS")


@dataclass(frozen=True)
class Config:
    runner: str        # raw, api, trainer, accelerate, fabric
    workload: str
    nproc: int
    compression: str = "none"

    @property
    def key(self) -> str:
        suffix = "" if self.compression == "none" else f"+{self.compression}"
        return f"{self.workload} {self.nproc}p {self.runner}{suffix}"


def build_configs(workloads: list[str], nprocs: list[int], runners: list[str], compressions: list[str]) -> list[Config]:
    """Every runner at every workload and process count; scaletrain's runners also with each
    gradient compression on the communication-heavy MLP (with 2+ processes)."""
    configs = []
    for workload in workloads:
        for nproc in nprocs:
            configs += [Config(r, workload, nproc) for r in runners]
            if nproc > 1 and "mlp" in workload:
                configs += [Config(r, workload, nproc, c) for c in compressions if c != "none"
                            for r in runners if r in ("api", "trainer")]
    return configs


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def torchrun(nproc: int) -> list[str]:
    return [PY, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), "--master-addr", "127.0.0.1",
            "--master-port", str(free_port())]


def command(config: Config, result: Path, out: Path, epochs: int, batch: int, max_steps: int = 0) -> list[str]:
    """The argv of one run. Peers get their documented launch commands and no tuning."""
    common = ["--workload", config.workload, "--batch-size", str(batch), "--epochs", str(epochs),
              "--result", str(result), "--max-steps", str(max_steps)]
    if config.runner == "raw":
        return [*torchrun(config.nproc), str(HERE / "run_raw_ddp.py"), *common]
    if config.runner == "api":
        return [*torchrun(config.nproc), str(HERE / "run_scaletrain_api.py"), *common,
                "--grad-compression", config.compression]
    if config.runner == "trainer":
        return [PY, "-m", "scaletrain", "train", "--workload", config.workload, "--nproc-per-node",
                str(config.nproc), "--batch-size", str(batch), "--epochs", str(epochs), "--device", "cpu",
                "--grad-compression", config.compression, "--out", str(out)]
    if config.runner == "accelerate":
        launch = ["--multi_gpu", "--num_processes", str(config.nproc)] if config.nproc > 1 else []
        return [PY, "-m", "accelerate.commands.launch", *launch, "--main_process_port", str(free_port()),
                str(HERE / "run_accelerate.py"), *common]
    if config.runner == "fabric":
        return [PY, str(HERE / "run_fabric.py"), *common, "--processes", str(config.nproc)]
    raise ValueError(f"unknown runner {config.runner!r}")


def environment() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env["PYTHONWARNINGS"] = "ignore"
    return env


def run_config(config: Config, scratch: Path, epochs: int, batch: int, timeout: float, max_steps: int = 0) -> dict:
    """Runs one configuration once (in its own session, killed whole on timeout)."""
    stamp = f"{config.key.replace(' ', '_').replace('+', '_')}-{time.monotonic_ns()}"
    result, out = scratch / f"{stamp}.json", scratch / stamp
    argv = command(config, result, out, epochs, batch, max_steps)
    started = time.time()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment(),
                            cwd=REPO, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        raise SystemExit(f"{config.key}: timed out after {timeout:.0f} s\n{output[-3000:]}")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    wall = time.time() - started
    if proc.returncode != 0:
        raise SystemExit(f"{config.key}: exit status {proc.returncode}: {' '.join(argv)}\n{output[-3000:]}")
    if config.runner == "trainer":
        return trainer_result(out, wall)
    data = json.loads(result.read_text())
    data.update(startup_seconds=data["first_step_wall"] - started, wall_seconds=wall)
    return data


def trainer_result(out: Path, wall: float) -> dict:
    """The trainer's own record: epochs after the first from metrics.jsonl, start-up from
    summary.json (measured by the trainer from the start of the command's process)."""
    epochs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    summary = json.loads((out / "summary.json").read_text())
    timed = epochs[1:] or epochs
    seconds = sum(e["epoch_seconds"] for e in timed)
    samples = sum(e["samples_per_second"] * e["epoch_seconds"] for e in timed)
    return {"samples_per_second": samples / seconds, "timed_seconds": seconds, "timed_samples": round(samples),
            "startup_seconds": summary["startup_seconds"], "wall_seconds": wall,
            "threads": summary["threads_per_process"], "world_size": summary["world_size"]}
