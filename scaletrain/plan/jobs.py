"""Measuring what a plan needs, round by round (used by `plan` and `bench` alike).

A round runs one probe job per thread count the predictions need: one process with every
core, and (on a CPU) as many processes as share the machine with cores ÷ processes threads
each — each job started like a real job by the spawn launcher (its ranks: probe_rank's `main`). Rounds
alternate their order; each round gives a whole Probe, so each gives a whole prediction, and
the spread of the predictions over the rounds is the plan's expected error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional


from ..measure.failed import measurement_failed
from .machine import Machine
from .probe import DdpStep, MeshStep, Probe, probe_from_jobs
from .probe_link import Link, measure_link
from .scenario import threads_needed

PROBE_FILE = "probe.json"
#: The module a probe job's ranks run, and what they measure: a round's figures, a
#: tensor-parallel step alone, or the steps alone (across hosts, the links in jobs of their own).
PROBE_MODULE = "scaletrain.plan.probe_rank"
ROUND, TP_STEP, STEPS_ONLY = "round", "tp-step", "steps-only"


def copies_per_thread_count(threads: list[int], machine: Machine, device_type: str) -> dict[int, int]:
    """How many processes share a CPU machine when each has `t` threads: cores ÷ t (at most
    the processes per machine). On GPUs each process has its own device: one copy."""
    if device_type == "cuda":
        return {t: 1 for t in threads}
    return {t: max(1, min(machine.nproc_per_node, machine.cores // t)) for t in threads}


@dataclass(frozen=True)
class ProbeJobs:
    """What every round of a plan's measurements runs."""
    workload_name: str
    spec: dict
    """workload, model, dataset (names), batch_size, seed, device, backend, steps, warmup, min_seconds,
    microbatches."""
    copies: dict
    """threads -> processes of that job."""
    device_type: str
    cores: int
    link: Optional[Link] = None
    """Given (--comm): the probe jobs' own all-reduce timings are not used."""
    link_nproc: int = 2
    needs_link: bool = True
    """False when every world size planned is one process."""
    hosts: Optional[object] = None
    """measure.jobs.Hosts: the machines the jobs of several processes span; each round then
    measures the network between them too (one process on each)."""
    tp_copies: int = 0
    """Processes of a job that times only a tensor-parallel step, where no job runs several (a
    machine of one core planned for several processes): 0 for none."""

    def argv(self, threads: int, out: Path, kind: str = ROUND) -> list[str]:
        """What a rank of a probe job is given (probe_rank.main): the spec, its threads, what it
        measures and the file rank 0 writes."""
        return [json.dumps({"spec": {**self.spec, "threads": threads}, "kind": kind, "out": str(out)})]

    def run_round(self, folder: Path, reverse: bool = False) -> Probe:
        """One round: a job per thread count (largest first; smallest first when `reverse`),
        then the Probe they make."""
        folder.mkdir(parents=True, exist_ok=True)
        jobs = {}
        for threads, copies in sorted(self.copies.items(), reverse=not reverse):
            jobs[threads] = self._job(folder / f"{threads}-threads-{PROBE_FILE}", threads, copies, ROUND,
                                      f"probe job ({copies} process(es) × {threads} thread(s))")
        link = self.link
        if link is None and self.needs_link and not any(j.get("link_rows") for j in jobs.values()):
            buckets = _bucket_sizes(jobs)
            link = measure_link(buckets, self.link_nproc, self.spec.get("backend"), self.spec.get("device"))
        probe = probe_from_jobs(jobs, self.workload_name, self.spec["batch_size"], self.device_type, self.cores, link)
        if self.tp_copies > 1:
            probe.tp_step = self._tp_step(folder)
        if self.hosts is not None:
            probe.network_ddp_step, probe.network_fsdp_step = self._hosts_steps(folder)
            probe.network = measure_link(network_sizes(jobs), len(self.hosts.hosts), self.spec.get("backend"),
                                         self.spec.get("device"), self.hosts)
        return probe

    def _job(self, out: Path, threads: int, nproc: int, kind: str, what: str, hosts=None) -> dict:
        """Runs one probe job (`kind`: what its ranks measure) and returns what it wrote to `out`."""
        from ..measure.jobs import run_job

        code = run_job(self.argv(threads, out, kind), nproc, hosts, module=PROBE_MODULE)
        if code != 0 or not out.exists():
            raise measurement_failed(f"the plan's {what}", code, hosts)
        return json.loads(out.read_text())

    def _tp_step(self, folder: Path) -> Optional[MeshStep]:
        """The tensor-parallel step on `tp_copies` processes sharing this machine's cores."""
        job = self._job(folder / f"tp-{PROBE_FILE}", 1, self.tp_copies, TP_STEP,
                        f"tensor-parallel probe job ({self.tp_copies} processes)")
        return MeshStep(job["world_size"], job["threads"], job["tp_mesh_step_s"]) if job else None

    def _hosts_steps(self, folder: Path) -> tuple[Optional[DdpStep], Optional[MeshStep]]:
        """DDP steps across the hosts, every slot of each, with and without their all-reduce
        (what the all-reduce costs inside training there), then FSDP steps across them. Across
        machines part of a collective is the network's time, which the cores could spend on
        the step; whether they do (a host whose network stack needs the core its training runs
        on does not) is measured, not assumed."""
        slots = self.hosts.slots
        threads = max(1, self.cores // slots)
        nproc = slots * len(self.hosts.hosts)
        job = self._job(folder / f"hosts-{PROBE_FILE}", threads, nproc, STEPS_ONLY,
                        f"probe job across the hosts ({nproc} processes)", self.hosts)
        ddp = DdpStep(job["world_size"], threads, job["ddp_step_s"], job["step_s"]) if "ddp_step_s" in job else None
        fsdp = (MeshStep(job["world_size"], threads, job["fsdp_mesh_step_s"], slots)
                if "fsdp_mesh_step_s" in job else None)
        return ddp, fsdp


def _bucket_sizes(jobs: dict) -> list[int]:
    from .formulas import ddp_buckets

    fp = next((j["footprint"] for j in jobs.values() if "footprint" in j), None)
    return ddp_buckets(list(fp["grad_tensor_bytes"])) if fp else []


def network_sizes(jobs: dict) -> list[int]:
    """Message sizes to time between hosts: the model's DDP buckets and its blocks (what FSDP
    gathers and pipeline stages pass are of these orders), and every fourfold size from 64 KiB
    up to the largest of them, so that each message predicted has a measured size near it."""
    fp = next((j["footprint"] for j in jobs.values() if "footprint" in j), None)
    needed = [*_bucket_sizes(jobs), *(fp["block_param_bytes"] if fp else ())]
    largest, sizes, size = max(needed, default=1 << 20), set(needed), 64 << 10
    while size < largest:
        sizes.add(size)
        size *= 4
    return sorted(int(s) for s in sizes if s > 0)


def probe_plan(workload_name: str, spec: dict, world_sizes: list[int], machine: Machine, device_type: str,
               link: Optional[Link] = None, hosts=None) -> ProbeJobs:
    """What each round measures for predictions at `world_sizes`; across `hosts` (measure.jobs.
    Hosts) the network between them too, and this machine's all-reduce on as many processes
    as a host holds (2 at least: the cores' own part of a collective across machines)."""
    threads = threads_needed(world_sizes, machine, device_type)
    several = max(world_sizes) > 1
    copies = copies_per_thread_count(threads, machine, device_type)
    # Where every job has one process (a machine of one core) but several will share it, a
    # job of its own times tensor parallel across them.
    crowded = device_type != "cuda" and max(copies.values()) == 1 and min(max(world_sizes), machine.nproc_per_node) > 1
    return ProbeJobs(workload_name, spec, copies, device_type, machine.cores, link,
                     link_nproc=max(2, hosts.slots) if hosts else 2, needs_link=several,
                     hosts=hosts if several else None,
                     tp_copies=min(max(world_sizes), machine.nproc_per_node) if crowded else 0)
