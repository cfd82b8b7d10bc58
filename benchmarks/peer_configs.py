"""The configurations benchmarks/peers.py compares: the exact command each one runs, and
how its timings are read back."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PY = sys.executable
#: Variables a launcher sets for its children; inherited ones would confuse every runner.
LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                 "GROUP_RANK", "GROUP_WORLD_SIZE", "SCALETRAIN_LAUNCHER", "OMP_NUM_THREADS")


NETNS = REPO / "testbed" / "netns.sh"
#: The two namespace "hosts" of testbed/netns.sh: node 0's address is the master's.
MASTER_ON_LINK = "10.77.0.1"


@dataclass(frozen=True)
class Config:
    runner: str        # raw, api, api-unpinned, trainer, accelerate, fabric
    workload: str
    nproc: int
    compression: str = "none"
    #: "" for processes on this machine; else two namespace hosts (testbed/netns.sh), one
    #: process and one core each, joined by a link capped at this tc rate ("veth": no cap).
    link: str = ""
    device: str = "cpu"  # cuda: one GPU per process, NCCL (raw, api, api-unpinned, trainer)
    #: The scaletrain tree the api and trainer runners use: this one (""), or another version's
    #: (`peers.py --against DIR`), run in the same rounds so that the two compare as ratios.
    tree: str = ""

    @property
    def repo(self) -> Path:
        return Path(self.tree) if self.tree else REPO

    @property
    def key(self) -> str:
        suffix = "" if self.compression == "none" else f"+{self.compression}"
        where = f" 2 hosts@{self.link}" if self.link else ""
        version = f" [{Path(self.tree).name}]" if self.tree else ""
        return f"{self.workload} {self.nproc}p {self.runner}{suffix}{where}{version}"


def build_configs(workloads: list[str], nprocs: list[int], runners: list[str], compressions: list[str],
                  links: list[str] = (), device: str = "cpu") -> list[Config]:
    """Every runner at every workload and process count; on the communication-heavy MLP
    (2+ processes) scaletrain's runners also with each gradient compression, and the trainer
    with and without it between two hosts over each link."""
    configs = []
    compressed = [c for c in compressions if c != "none"]
    for workload in workloads:
        for nproc in nprocs:
            configs += [Config(r, workload, nproc) for r in runners]
            if nproc > 1 and "mlp" in workload:
                configs += [Config(r, workload, nproc, c) for c in compressed
                            for r in runners if r in ("api", "trainer")]
            if nproc == 2 and "mlp" in workload and compressed:
                configs += [Config("trainer", workload, 2, c, link) for link in links for c in ["none", *compressed]]
    return [replace(c, device=device) for c in configs]


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
              "--result", str(result), "--max-steps", str(max_steps), "--device", config.device]
    if config.runner == "raw":
        return [*torchrun(config.nproc), str(HERE / "run_raw_ddp.py"), *common]
    if config.runner in ("api", "api-unpinned"):
        unpinned = ["--no-pin"] if config.runner == "api-unpinned" else []
        return [*torchrun(config.nproc), str(config.repo / "benchmarks" / "run_scaletrain_api.py"), *common,
                "--grad-compression", config.compression, *unpinned]
    if config.runner == "trainer":
        return trainer_command(config, config.nproc, out, epochs, batch)
    if config.runner == "accelerate":
        launch = ["--multi_gpu", "--num_processes", str(config.nproc)] if config.nproc > 1 else []
        return [PY, "-m", "accelerate.commands.launch", *launch, "--main_process_port", str(free_port()),
                str(HERE / "run_accelerate.py"), *common]
    if config.runner == "fabric":
        return [PY, str(HERE / "run_fabric.py"), *common, "--processes", str(config.nproc)]
    raise ValueError(f"unknown runner {config.runner!r}")


def trainer_command(config: Config, nproc_per_node: int, out: Path, epochs: int, batch: int) -> list[str]:
    """`scaletrain train` with its defaults, on this machine or (with launcher options
    appended) as one node of several."""
    return [PY, "-m", "scaletrain", "train", "--workload", config.workload, "--nproc-per-node", str(nproc_per_node),
            "--batch-size", str(batch), "--epochs", str(epochs), "--device", config.device,
            "--grad-compression", config.compression, "--out", str(out)]


def environment(repo: Path = REPO) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(repo), os.environ.get("PYTHONPATH")]))
    env["PYTHONWARNINGS"] = "ignore"
    return env


def run_config(config: Config, scratch: Path, epochs: int, batch: int, timeout: float, max_steps: int = 0) -> dict:
    """Runs one configuration once (each command in its own session, killed whole on timeout)."""
    stamp = f"{config.key.replace(' ', '_').replace('+', '_').replace('@', '_')}-{time.monotonic_ns()}"
    result, out = scratch / f"{stamp}.json", scratch / stamp
    argvs = two_host_commands(config, out, epochs, batch) if config.link else [
        command(config, result, out, epochs, batch, max_steps)]
    started = time.time()
    run_together(config.key, argvs, timeout, config.repo)
    wall = time.time() - started
    if config.runner == "trainer":
        return trainer_result(out, wall)
    data = json.loads(result.read_text())
    data.update(startup_seconds=data["first_step_wall"] - started, wall_seconds=wall)
    return data


def run_together(key: str, argvs: list[list[str]], timeout: float, repo: Path = REPO) -> None:
    """Starts every command at once and waits for all; any failure or timeout ends the
    benchmark with the command's output (every process group is killed either way)."""
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=environment(repo), cwd=repo, start_new_session=True) for argv in argvs]
    deadline = time.monotonic() + timeout
    try:
        for proc, argv in zip(procs, argvs):
            try:
                output, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                output, _ = proc.communicate()
                raise SystemExit(f"{key}: timed out after {timeout:.0f} s: {' '.join(argv)}\n{output[-3000:]}")
            if proc.returncode != 0:
                raise SystemExit(f"{key}: exit status {proc.returncode}: {' '.join(argv)}\n{output[-3000:]}")
    finally:
        for proc in procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.communicate()


def two_host_commands(config: Config, out: Path, epochs: int, batch: int) -> list[list[str]]:
    """`scaletrain train` on both namespace hosts (torchrun, static rendezvous), one process
    each, each host held to its own core as a one-core machine would be."""
    cores = sorted(os.sched_getaffinity(0))
    port = str(free_port())
    argvs = []
    for node in (0, 1):
        node_out = out if node == 0 else out.with_name(out.name + "-node1")  # only rank 0 (node 0) writes
        argvs.append([str(NETNS), "exec", str(node), "taskset", "-c", str(cores[node % len(cores)]),
                      *trainer_command(config, 1, node_out, epochs, batch), "--launcher", "torchrun",
                      "--nnodes", "2", "--node-rank", str(node), "--master-addr", MASTER_ON_LINK,
                      "--master-port", port])
    return argvs


@contextlib.contextmanager
def two_hosts(needed: bool):
    """The namespace hosts of testbed/netns.sh, up for the block and down however it ends."""
    if not needed:
        yield
        return
    subprocess.run([str(NETNS), "up"], check=True, capture_output=True, timeout=60)
    try:
        yield
    finally:
        subprocess.run([str(NETNS), "down"], capture_output=True, timeout=60)


def prepare_link(link: str) -> None:
    """Caps the namespace link at `link` (a tc rate), or lifts the cap for "veth"."""
    argv = [str(NETNS), "unshape"] if link == "veth" else [str(NETNS), "shape", link]
    subprocess.run(argv, check=True, capture_output=True, timeout=60)


def links_unavailable() -> str | None:
    """Why two namespace hosts cannot be made here, or None when they can."""
    if os.geteuid() != 0:
        return "two hosts need network namespaces, which need root"
    missing = [tool for tool in ("ip", "tc", "taskset") if shutil.which(tool) is None]
    if missing:
        return f"two hosts need {', '.join(missing)} (apt-get install iproute2 util-linux)"
    return None


def trainer_result(out: Path, wall: float) -> dict:
    """The trainer's own record: epochs after the first from metrics.jsonl, start-up from
    summary.json (measured by the trainer from the start of the command's process)."""
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    epochs = [r for r in records if r.get("kind", "epoch") == "epoch"]
    summary = json.loads((out / "summary.json").read_text())
    timed = epochs[1:] or epochs
    seconds = sum(e["epoch_seconds"] for e in timed)
    samples = sum(e["samples_per_second"] * e["epoch_seconds"] for e in timed)
    return {"samples_per_second": samples / seconds, "timed_seconds": seconds, "timed_samples": round(samples),
            "startup_seconds": summary["startup_seconds"], "wall_seconds": wall,
            "threads": summary["threads_per_process"], "world_size": summary["world_size"]}
