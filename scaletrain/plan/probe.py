"""The measurements a plan starts from (one round of them): a process's step time at each
thread count the predictions need, measured next to as many processes as will share the
machine and without communication; the same job's real DDP step, with its all-reduce; the
model's byte counts and per-block times; and the all-reduce's latency and bus bandwidth.
See probe_rank for how they are measured."""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field
from typing import Optional

import torch

from ..measure.footprint import Footprint
from .probe_link import Link, link_from_rows

@dataclass(frozen=True)
class Compute:
    """One step of one process with some number of threads, next to `copies` processes
    like it (step by step the slowest of them), without communication. Seconds."""
    step_s: float
    data_s: float
    fb_s: float
    optimizer_s: float
    copies: int


@dataclass(frozen=True)
class DdpStep:
    """A real DDP step (with its all-reduce) of `world_size` processes × `threads` threads on
    this machine, next to the step of the same job without the all-reduce, in alternating
    blocks (seconds, step by step the slowest rank). Their difference is what the all-reduce
    costs inside training: the collective plus the ranks waiting for each other."""
    world_size: int
    threads: int
    step_s: float
    local_step_s: float

    @property
    def exposed_comm_s(self) -> float:
        return max(0.0, self.step_s - self.local_step_s)


@dataclass(frozen=True)
class MeshStep:
    """A real step of a model prepared for a mesh (tensor parallel, every rank fed the same
    batch; or FSDP) across the `world_size` processes × `threads` threads of a probe job:
    `nproc_per_node` on each machine (0: all on this one). Seconds."""
    world_size: int
    threads: int
    step_s: float
    nproc_per_node: int = 0


@dataclass
class Probe:
    """One round of a plan's measurements."""
    workload: str
    batch_size: int
    device_type: str
    cores: int
    compute: dict = field(default_factory=dict)
    """threads -> Compute."""
    footprint: Optional[Footprint] = None
    link: Optional[Link] = None
    block_s: tuple = ()
    """Forward + backward seconds of each top-level block on the whole batch (one process)."""
    block_micro_s: tuple = ()
    """The same on one micro-batch of `microbatch_size` samples."""
    microbatch_size: int = 0
    block_sizes_s: tuple = ()
    """(samples, the same on that many) at the batch's halvings between the micro-batch and the batch."""
    block_one_thread_s: tuple = ()
    """(samples, the same on one thread) at the micro-batch, the halvings and the batch, where the
    one-process job had more threads (empty otherwise)."""
    block_params: tuple = ()
    """Parameters of each top-level block (how the strategies cut stages)."""
    ddp_step: Optional[DdpStep] = None
    """Measured in the job of several processes (None: one process planned, or no DDP)."""
    network_ddp_step: Optional[DdpStep] = None
    """The same across the hosts measured (--hosts), every slot of each (None: one machine)."""
    memory_constant_bytes: float = 0.0
    """What the one-process job held before its model: interpreter, torch, process group, data."""
    memory_peak_bytes: float = 0.0
    """The one-process job's peak while it trained (a DDP process of one)."""
    allocator: str = ""
    """The CPU memory allocator the probe's jobs ran with (scaletrain/memory/allocator.py: what the
    processes of the run predicted run with too); its slack is in `memory_peak_bytes`."""
    fsdp_peak_above_bytes: float = 0.0
    """The largest process's peak above what it held before its model, in FSDP steps of the job
    of several processes (`fsdp_peak_world_size` of them) run first in the job, as a fresh
    process of an FSDP run makes them (0: not measured)."""
    fsdp_peak_world_size: int = 0
    fsdp_overhead_s: float = 0.0
    """What FSDP's own machinery (gathers into buffers, copies out, DTensors) adds to a step on
    one process: the one-process job's step under fully_shard less its plain step (plan/
    overheads.py)."""
    tp_overhead_s: float = 0.0
    """What tensor parallel's DTensors add to a step on one process: the one-process job's
    step with the model's tensor-parallel plan applied less its plain step (0: no plan)."""
    tp_step: Optional[MeshStep] = None
    """Measured where the model has a tensor-parallel plan and the job had several processes."""
    network_fsdp_step: Optional[MeshStep] = None
    """An FSDP step across the hosts measured (--hosts), every slot of each (None: one machine)."""
    network: Optional[Link] = None
    """The all-reduce between machines (one process on each), measured across --hosts; None:
    one machine measured, and the network is the nominal --link-gbps / --link-latency-us."""
    attention_fraction: float = 0.0
    """Attention's share of a step's forward and backward time (one process; 0: no attention)."""
    ring_ratio: dict = field(default_factory=dict)
    """cp -> one process of a context-parallel ring of cp: its attention's arithmetic ÷ 1/cp of
    the whole sequence's attention (the ring's blocks and merges; no communication)."""
    ring_mesh: Optional[MeshStep] = None
    """The same ratio for a real ring across the processes of the job of several (`step_s`
    holds the ratio): communication and waiting included."""
    facts: dict = field(default_factory=dict)
    """What the parallelisms measure for their own cost terms (each cost module's registered
    measurements, `costs/registry.py`), as measured: {name: {"alone": the one-process job's,
    "job": the first job of several processes that measured it}}; each cost module reads its own."""

    @property
    def step_s(self) -> dict:
        return {t: c.step_s for t, c in self.compute.items()}

    def as_dict(self) -> dict:
        return asdict(self)


#: Figures of a probe that a real measurement never gives as 0: a step takes time, a link moves bytes.
NEVER_ZERO = ("step_s", "local_step_s", "fb_s", "busbw")


def probe_problem(doc, where: str = "") -> Optional[str]:
    """What makes a probe's figures (its `as_dict()`, as cached or recorded) impossible — a
    negative, infinite or NaN number anywhere, a step time of 0 — or None. Predictions from
    them would divide by zero or choose on nonsense."""
    if isinstance(doc, dict):
        items = doc.items()
    elif isinstance(doc, (list, tuple)):
        items = ((f"{i}", v) for i, v in enumerate(doc))
    else:
        items = ()
    for key, value in items:
        at = f"{where}.{key}" if where else str(key)
        if isinstance(value, bool):
            continue
        if isinstance(value, (int, float)):
            if not math.isfinite(value) or value < 0 or (value == 0 and key in NEVER_ZERO):
                return f"{at} is {value!r}"
        else:
            found = probe_problem(value, at)
            if found:
                return found
    return None


def footprint_from_dict(fp: dict) -> Footprint:
    lists = ("block_param_bytes", "grad_tensor_bytes", "block_tp_param_bytes", "block_tp_reduce_bytes_per_sample")
    lists = (*lists, "block_activation_bytes_per_sample", "unit_output_bytes_per_sample", "attention_kv_bytes_per_sample")
    return Footprint(**{**fp, **{k: tuple(fp[k]) for k in lists if k in fp}})


def link_from_dict(link: Optional[dict]) -> Optional[Link]:
    return Link(**{**link, "points": tuple(tuple(p) for p in link.get("points", ()))}) if link else None


def probe_from_dict(doc: dict) -> Probe:
    """A Probe back from its `as_dict()` (as bench.json keeps each round's): predictions can be
    made again from recorded measurements."""
    return Probe(workload=doc["workload"], batch_size=doc["batch_size"], device_type=doc["device_type"],
                 cores=doc["cores"], compute={int(t): Compute(**c) for t, c in doc["compute"].items()},
                 footprint=footprint_from_dict(doc["footprint"]) if doc.get("footprint") else None,
                 link=link_from_dict(doc.get("link")), network=link_from_dict(doc.get("network")),
                 fsdp_overhead_s=doc.get("fsdp_overhead_s", 0.0), tp_overhead_s=doc.get("tp_overhead_s", 0.0),
                 block_s=tuple(doc.get("block_s", ())), block_micro_s=tuple(doc.get("block_micro_s", ())),
                 microbatch_size=doc.get("microbatch_size", 0), block_sizes_s=_sizes(doc.get("block_sizes_s", ())),
                 block_one_thread_s=_sizes(doc.get("block_one_thread_s", ())),
                 block_params=tuple(doc.get("block_params", ())),
                 ddp_step=DdpStep(**doc["ddp_step"]) if doc.get("ddp_step") else None,
                 network_ddp_step=DdpStep(**doc["network_ddp_step"]) if doc.get("network_ddp_step") else None,
                 memory_constant_bytes=doc.get("memory_constant_bytes", 0.0),
                 memory_peak_bytes=doc.get("memory_peak_bytes", 0.0), allocator=doc.get("allocator", ""),
                 fsdp_peak_above_bytes=doc.get("fsdp_peak_above_bytes", 0.0),
                 fsdp_peak_world_size=doc.get("fsdp_peak_world_size", 0),
                 tp_step=MeshStep(**doc["tp_step"]) if doc.get("tp_step") else None,
                 network_fsdp_step=MeshStep(**doc["network_fsdp_step"]) if doc.get("network_fsdp_step") else None,
                 attention_fraction=doc.get("attention_fraction", 0.0),
                 ring_ratio={int(cp): r for cp, r in doc.get("ring_ratio", {}).items()},
                 ring_mesh=MeshStep(**doc["ring_mesh"]) if doc.get("ring_mesh") else None,
                 facts=doc.get("facts") or {})


def probe_from_jobs(jobs: dict[int, dict], workload: str, batch_size: int, device_type: str, cores: int,
                    link: Optional[Link]) -> Probe:
    """One round's Probe from its jobs' results (threads -> result, see probe_rank); the link
    from the job of several processes unless `link` is given (--comm)."""
    compute = {t: Compute(j["step_s"], j["data_s"], j["fb_s"], j["optimizer_s"], j["world_size"])
               for t, j in jobs.items()}
    single = next((j for j in jobs.values() if "footprint" in j), {})
    if link is None:
        rows = next((j["link_rows"] for j in jobs.values() if j.get("link_rows")), None)
        if rows:
            link = link_from_rows(rows, f"all_reduce in the probe job, {rows[0]['world_size']} processes")
    ddp = next((DdpStep(j["world_size"], t, j["ddp_step_s"], j["step_s"]) for t, j in jobs.items()
                if "ddp_step_s" in j), None)
    tp = next((MeshStep(j["world_size"], t, j["tp_mesh_step_s"]) for t, j in jobs.items() if "tp_mesh_step_s" in j), None)
    fsdp = next((j for j in jobs.values() if "fsdp_peak_above_bytes" in j), {})
    ring = next((MeshStep(j["world_size"], t, j["ring_mesh_ratio"]) for t, j in jobs.items() if "ring_mesh_ratio" in j),
                None)
    return Probe(workload=workload, batch_size=batch_size, device_type=device_type, cores=cores, compute=compute,
                 footprint=footprint_from_dict(single["footprint"]) if single else None, link=link,
                 block_s=tuple(single.get("block_s", ())), block_micro_s=tuple(single.get("block_micro_s", ())),
                 microbatch_size=single.get("microbatch_size", 0),
                 block_sizes_s=_sizes(single.get("block_sizes_s", ())),
                 block_one_thread_s=_sizes(single.get("block_one_thread_s", ())),
                 block_params=tuple(single.get("block_params", ())),
                 ddp_step=ddp, memory_constant_bytes=single.get("memory_constant_bytes", 0.0),
                 memory_peak_bytes=single.get("memory_peak_bytes", 0.0), allocator=single.get("allocator", ""),
                 fsdp_peak_above_bytes=fsdp.get("fsdp_peak_above_bytes", 0.0),
                 fsdp_peak_world_size=fsdp.get("world_size", 0),
                 fsdp_overhead_s=_overhead(single, "fsdp_step_s"), tp_overhead_s=_overhead(single, "tp_step_s"),
                 tp_step=tp, attention_fraction=single.get("attention_fraction", 0.0),
                 ring_ratio={int(cp): r for cp, r in single.get("ring_ratio", {}).items()}, ring_mesh=ring,
                 facts=_parallelisms_facts(single, [j for j in jobs.values() if j is not single]))


def _parallelisms_facts(single: dict, several: list[dict]) -> dict:
    """{name: {"alone": ..., "job": ...}}: what each parallelism measured in the one-process job
    and in the first job of several processes that measured it."""
    names = {*(single.get("parallelisms") or {}), *(n for j in several for n in j.get("parallelisms") or {})}
    return {name: {"alone": (single.get("parallelisms") or {}).get(name),
                   "job": next((j["parallelisms"][name] for j in several if (j.get("parallelisms") or {}).get(name)),
                               None)} for name in sorted(names)}


def _sizes(rows) -> tuple:
    """block_sizes_s and block_one_thread_s back from JSON's lists."""
    return tuple((int(n), tuple(times)) for n, times in rows)


def _overhead(job: dict, key: str) -> float:
    """A prepared step's seconds beyond the plain step of the same job (0 where not measured)."""
    return max(0.0, job[key] - job["step_s"]) if key in job else 0.0


def cores_here() -> int:
    from ..process.devices import cpu_cores

    return cpu_cores()


def device_memory_bytes(device_type: str, nproc_per_node: int) -> float:
    """What one process may use: the GPU's memory, or the machine's memory ÷ processes."""
    if device_type == "cuda":
        return float(torch.cuda.get_device_properties(0).total_memory)
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return float("inf")
    return total / max(1, nproc_per_node)
