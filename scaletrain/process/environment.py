"""Who am I? Pure detection of the distributed environment from environment variables.

`detect(environ)` reads a mapping (never os.environ implicitly) and returns a frozen
`DistEnv`: rank, local rank, world size, local world size, node rank, number of nodes,
master address and port, which launcher started us, and which variable gave each value.

Detectors are tried in a fixed order; the first that recognises its variables wins:

1. torchrun / torchelastic (and torch's env:// convention: RANK + WORLD_SIZE) — first,
   because torchrun is often started *by* Slurm (`srun torchrun`) or mpirun, one per node;
   then the SLURM_*/OMPI_* variables describe the node-level task, not this worker.
   RANK + WORLD_SIZE without LOCAL_RANK, LOCAL_WORLD_SIZE or GROUP_RANK (a Kubeflow
   PyTorchJob pod, or the plain env:// convention) is one process per node: node rank =
   rank, local rank 0 of 1.
2. Open MPI (OMPI_COMM_WORLD_*) — before Slurm, because `mpirun` inside a Slurm
   allocation inherits the allocation's SLURM_* variables, but the ranks are mpirun's.
3. Other MPIs (PMI_RANK/PMI_SIZE: MPICH, Intel MPI) — before Slurm for the same reason.
4. Slurm (SLURM_PROCID inside an `srun` step) — a batch script or `salloc` shell also
   carries SLURM_* variables but is not a task of a step; without SLURM_STEP_ID it is not
   treated as a rank, so a forgotten `srun` runs one process instead of hanging.
5. none — one process, rank 0 of 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Mapping, Optional

from ..foundation.defaults import MASTER_ADDR as DEFAULT_MASTER_ADDR, MASTER_PORT as DEFAULT_MASTER_PORT
from ..foundation.errors import DetectionError
from .slurm_hostlist import expand_hostlist, parse_tasks_per_node


@dataclass(frozen=True)
class DistEnv:
    """Where this process stands in the job. Frozen: detection never changes afterwards."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_world_size: int = 1
    node_rank: int = 0
    nnodes: int = 1
    master_addr: str = DEFAULT_MASTER_ADDR
    master_port: int = DEFAULT_MASTER_PORT
    launcher: str = "none"
    # One process per node (a Kubernetes pod, env:// without LOCAL_RANK): it may start the
    # node's ranks itself (`scaletrain launch --nproc-per-node N`), as torchrun does in a pod.
    per_node: bool = False
    # (field, source) pairs: which variable (or rule) gave each value.
    sources: tuple = field(default_factory=tuple)
    # Things worth telling the user that are not errors (e.g. "torchrun inside Slurm").
    notes: tuple = field(default_factory=tuple)

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def launched(self) -> bool:
        """True when a launcher started this process as one rank of a job."""
        return self.launcher != "none"

    def source(self, name: str) -> str:
        return dict(self.sources).get(name, "default")

    def explain(self) -> list[str]:
        """Human lines: 'rank 3 of 16, from OMPI_COMM_WORLD_RANK'."""
        s = self.source
        lines = [
            f"launcher: {self.launcher}",
            f"rank {self.rank} of {self.world_size} (rank from {s('rank')}, world size from {s('world_size')})",
            f"local rank {self.local_rank} of {self.local_world_size} on this node "
            f"(from {s('local_rank')}, {s('local_world_size')})",
            f"node {self.node_rank} of {self.nnodes} (from {s('node_rank')}, {s('nnodes')})",
            f"master {self.master_addr}:{self.master_port} (from {s('master_addr')}, {s('master_port')})",
        ]
        return lines + [f"note: {n}" for n in self.notes]

    def as_dict(self) -> dict:
        return {
            "rank": self.rank,
            "local_rank": self.local_rank,
            "world_size": self.world_size,
            "local_world_size": self.local_world_size,
            "node_rank": self.node_rank,
            "nnodes": self.nnodes,
            "master_addr": self.master_addr,
            "master_port": self.master_port,
            "launcher": self.launcher,
            "per_node": self.per_node,
            "sources": dict(self.sources),
            "notes": list(self.notes),
        }


class _Reader:
    """Reads integers from the environment and remembers which variable gave each field."""

    def __init__(self, environ: Mapping[str, str]):
        self.environ = environ
        self.sources: dict[str, str] = {}

    def has(self, *names: str) -> bool:
        return all(self.environ.get(n, "") != "" for n in names)

    def first(self, *names: str) -> Optional[str]:
        return next((n for n in names if self.environ.get(n, "") != ""), None)

    def int(self, fld: str, *names: str, default: Optional[int] = None, minimum: int = 0) -> int:
        name = self.first(*names)
        if name is None:
            if default is None:
                raise DetectionError(f"{' or '.join(names)} is not set; the launcher must set it")
            self.sources.setdefault(fld, "default")
            return default
        raw = self.environ[name].strip()
        try:
            value = int(raw)
        except ValueError:
            raise DetectionError(f"{name}={raw!r} is not a whole number; unset it or give a number") from None
        if value < minimum:
            raise DetectionError(f"{name}={value} must be at least {minimum}")
        self.sources[fld] = name
        return value

    def derived(self, fld: str, value, rule: str):
        self.sources[fld] = rule
        return value

    def master(self, default_addr: Optional[str], default_port: int, port_rule: str = "default") -> tuple[str, int]:
        addr = self.environ.get("MASTER_ADDR", "")
        if addr:
            self.sources["master_addr"] = "MASTER_ADDR"
        elif default_addr is not None:
            addr = default_addr
            self.sources.setdefault("master_addr", "default")
        port = self.int("master_port", "MASTER_PORT", default=default_port, minimum=1)
        if self.sources["master_port"] == "default":
            self.sources["master_port"] = port_rule
        if port > 65535:
            raise DetectionError(f"MASTER_PORT={port} is not a TCP port; use a port from 1024 to 65535")
        return addr, port


def _torchrun(env: Mapping[str, str]) -> Optional[DistEnv]:
    r = _Reader(env)
    if not r.has("RANK", "WORLD_SIZE"):
        return None
    elastic = r.has("TORCHELASTIC_RUN_ID")
    if not elastic and not env.get("SCALETRAIN_LAUNCHER") and not r.first("LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK"):
        return _one_per_node(r, env)
    launcher = "torchrun" if elastic else env.get("SCALETRAIN_LAUNCHER", "env")
    rank = r.int("rank", "RANK")
    world = r.int("world_size", "WORLD_SIZE", minimum=1)
    if r.has("LOCAL_RANK"):
        local_rank = r.int("local_rank", "LOCAL_RANK")
    else:
        local_rank = r.derived("local_rank", rank, "RANK (no LOCAL_RANK: one node assumed)")
    local_world = r.int("local_world_size", "LOCAL_WORLD_SIZE", default=world) if r.has("LOCAL_WORLD_SIZE") \
        else r.derived("local_world_size", world, "WORLD_SIZE (no LOCAL_WORLD_SIZE: one node assumed)")
    node_rank = r.int("node_rank", "GROUP_RANK", default=0) if r.has("GROUP_RANK") \
        else r.derived("node_rank", rank // max(local_world, 1), "RANK // LOCAL_WORLD_SIZE")
    nnodes = r.int("nnodes", "GROUP_WORLD_SIZE", minimum=1) if r.has("GROUP_WORLD_SIZE") \
        else r.derived("nnodes", max(1, -(-world // max(local_world, 1))), "WORLD_SIZE / LOCAL_WORLD_SIZE")
    addr, port = _env_master(r, world, elastic)
    notes = []
    if r.has("SLURM_PROCID"):
        notes.append("also inside a Slurm task (torchrun started by srun): torchrun's variables win")
    if r.has("OMPI_COMM_WORLD_RANK"):
        notes.append("also inside an Open MPI rank (torchrun started by mpirun): torchrun's variables win")
    return _make(r, launcher, rank, local_rank, world, local_world, node_rank, nnodes, addr, port, notes)


def _env_master(r: _Reader, world: int, elastic: bool) -> tuple[str, int]:
    addr, port = r.master(None if world > 1 and not elastic else DEFAULT_MASTER_ADDR, DEFAULT_MASTER_PORT)
    if not addr:
        raise DetectionError(
            f"RANK and WORLD_SIZE={world} are set but MASTER_ADDR is not; "
            "set MASTER_ADDR (and MASTER_PORT) to rank 0's address, or start with torchrun/scaletrain launch"
        )
    return addr, port


def _one_per_node(r: _Reader, env: Mapping[str, str]) -> DistEnv:
    """RANK and WORLD_SIZE without LOCAL_RANK: one process per node (pod). A Kubeflow
    PyTorchJob sets exactly these (plus MASTER_ADDR/MASTER_PORT) in every pod; Kubernetes
    itself sets KUBERNETES_SERVICE_HOST in every container. Kubeflow's torchrun variables
    (PET_NNODES, PET_NODE_RANK) win where they are set: with `nprocPerNode` > 1, WORLD_SIZE
    counts processes, not pods."""
    launcher = "kubernetes" if r.has("KUBERNETES_SERVICE_HOST") else "env"
    if r.has("PET_NNODES", "PET_NODE_RANK"):
        node_rank = r.int("node_rank", "PET_NODE_RANK")
        nnodes = r.int("nnodes", "PET_NNODES", minimum=1)
        r.sources.update(rank="PET_NODE_RANK (one process per node)", world_size="PET_NNODES (one process per node)")
        rank, world = node_rank, nnodes
    else:
        rank = r.int("rank", "RANK")
        world = r.int("world_size", "WORLD_SIZE", minimum=1)
        node_rank = r.derived("node_rank", rank, "RANK (one process per node: no LOCAL_RANK)")
        nnodes = r.derived("nnodes", world, "WORLD_SIZE (one process per node: no LOCAL_RANK)")
    local_rank = r.derived("local_rank", 0, "one process per node (no LOCAL_RANK)")
    local_world = r.derived("local_world_size", 1, "one process per node (no LOCAL_RANK)")
    addr, port = _env_master(r, world, False)
    notes = [f"one process per node ({'a Kubernetes pod' if launcher == 'kubernetes' else 'no LOCAL_RANK'}): "
             "`scaletrain launch --nproc-per-node N` here starts this node's N ranks"]
    found = _make(r, launcher, rank, local_rank, world, local_world, node_rank, nnodes, addr, port, notes)
    return replace(found, per_node=True)


@dataclass(frozen=True)
class _MpiVariables:
    """The variables one MPI family sets for each rank, and how to pass it a master address."""

    launcher: str
    rank: str
    size: str
    local_rank: str
    local_size: str
    master_fix: str


OPEN_MPI = _MpiVariables("mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                         "OMPI_COMM_WORLD_LOCAL_SIZE",
                         "add -x MASTER_ADDR=<first host> -x MASTER_PORT=29500 to mpirun, "
                         "or use `scaletrain launch --launcher mpirun`")
OTHER_MPI = _MpiVariables("mpi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS",
                          "pass MASTER_ADDR=<first host> and MASTER_PORT to every rank (mpiexec -genv MASTER_ADDR ...)")


def _mpi(names: _MpiVariables, env: Mapping[str, str]) -> Optional[DistEnv]:
    r = _Reader(env)
    if not r.has(names.rank, names.size):
        return None
    rank = r.int("rank", names.rank)
    world = r.int("world_size", names.size, minimum=1)
    local_rank = r.int("local_rank", names.local_rank, default=rank)
    local_world = r.int("local_world_size", names.local_size, default=world, minimum=1)
    # MPI gives no node index (OMPI_COMM_WORLD_NODE_RANK is a per-node rank); the default
    # by-slot mapping fills one node before the next, so the node is rank // local size.
    node_rank = r.derived("node_rank", rank // local_world, f"{names.rank} // {names.local_size}")
    nnodes = r.derived("nnodes", max(1, -(-world // local_world)), f"{names.size} / {names.local_size}")
    addr, port = r.master(DEFAULT_MASTER_ADDR if world == local_world else None, DEFAULT_MASTER_PORT)
    if not addr:
        raise DetectionError(f"{names.launcher} started {world} ranks on {nnodes} nodes but MASTER_ADDR is not set; "
                             f"{names.master_fix}")
    return _make(r, names.launcher, rank, local_rank, world, local_world, node_rank, nnodes, addr, port, [])


def _slurm(env: Mapping[str, str]) -> Optional[DistEnv]:
    r = _Reader(env)
    if not r.has("SLURM_PROCID") or r.first("SLURM_STEP_ID", "SLURM_STEPID") is None:
        return None
    rank = r.int("rank", "SLURM_PROCID")
    world = r.int("world_size", "SLURM_NTASKS", "SLURM_NPROCS", minimum=1)
    local_rank = r.int("local_rank", "SLURM_LOCALID", default=0)
    nnodes = r.int("nnodes", "SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES", default=1, minimum=1)
    node_rank = r.int("node_rank", "SLURM_NODEID", default=0)
    per_node_var = r.first("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE")
    if r.has("SLURM_NTASKS_PER_NODE"):
        per = r.int("local_world_size", "SLURM_NTASKS_PER_NODE", minimum=1)
        if per * nnodes != world:
            raise DetectionError(
                f"SLURM_NTASKS={world} but SLURM_NNODES={nnodes} × SLURM_NTASKS_PER_NODE={per} = {per * nnodes}; "
                f"ask for --ntasks={per * nnodes} or drop --ntasks (let --ntasks-per-node decide)"
            )
        local_world = per
    elif per_node_var:
        counts = parse_tasks_per_node(env[per_node_var])
        if sum(counts) != world:
            raise DetectionError(
                f"{per_node_var}={env[per_node_var]!r} adds up to {sum(counts)} tasks but SLURM_NTASKS={world}; "
                "ask srun for --ntasks equal to nodes × --ntasks-per-node"
            )
        local_world = r.derived("local_world_size", counts[min(node_rank, len(counts) - 1)], per_node_var)
    else:
        local_world = r.derived("local_world_size", max(1, world // nnodes), "SLURM_NTASKS / SLURM_NNODES")
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or ""
    first_host = expand_hostlist(nodelist)[0] if nodelist else DEFAULT_MASTER_ADDR
    job_id = env.get("SLURM_JOB_ID", "")
    # Same job id -> same port on every task, and different jobs sharing a node differ.
    port_default = 10000 + int(job_id) % 20000 if job_id.isdigit() else DEFAULT_MASTER_PORT
    addr, port = r.master(first_host, port_default, "SLURM_JOB_ID (10000 + id mod 20000)" if job_id.isdigit() else "default")
    if r.sources.get("master_addr") == "default" and nodelist:
        r.sources["master_addr"] = "first host of SLURM_JOB_NODELIST"
    return _make(r, "slurm", rank, local_rank, world, local_world, node_rank, nnodes, addr, port, [])


def _make(r: _Reader, launcher, rank, local_rank, world, local_world, node_rank, nnodes, addr, port, notes) -> DistEnv:
    env = DistEnv(rank, local_rank, world, local_world, node_rank, nnodes, addr, port, launcher,
                  sources=tuple(sorted(r.sources.items())), notes=tuple(notes))
    check_consistent(env)
    return env


def check_consistent(env: DistEnv) -> None:
    """Sizes that contradict each other are an error, naming both variables."""
    s = env.source
    if env.rank >= env.world_size:
        raise DetectionError(f"rank {env.rank} ({s('rank')}) is not below world size {env.world_size} ({s('world_size')}); "
                             "the launcher's variables contradict each other")
    if env.local_world_size > env.world_size:
        raise DetectionError(f"local world size {env.local_world_size} ({s('local_world_size')}) exceeds world size "
                             f"{env.world_size} ({s('world_size')}); check the launcher's process counts")
    if env.local_rank >= env.local_world_size:
        raise DetectionError(f"local rank {env.local_rank} ({s('local_rank')}) is not below local world size "
                             f"{env.local_world_size} ({s('local_world_size')})")
    if env.node_rank >= env.nnodes:
        raise DetectionError(f"node rank {env.node_rank} ({s('node_rank')}) is not below the number of nodes "
                             f"{env.nnodes} ({s('nnodes')})")


def _none(env: Mapping[str, str]) -> DistEnv:
    r = _Reader(env)
    addr, port = r.master(DEFAULT_MASTER_ADDR, DEFAULT_MASTER_PORT)
    notes = []
    if r.has("SLURM_JOB_ID") and not r.has("SLURM_STEP_ID"):
        notes.append("inside a Slurm allocation but not an srun task: one process; use `srun` to start one task per rank")
    return DistEnv(master_addr=addr, master_port=port, sources=tuple(sorted(r.sources.items())), notes=tuple(notes))


# The order matters; see the module docstring for why.
DETECTORS: tuple[tuple[str, Callable[[Mapping[str, str]], Optional[DistEnv]]], ...] = (
    ("torchrun", _torchrun),
    ("mpirun", lambda env: _mpi(OPEN_MPI, env)),
    ("mpi", lambda env: _mpi(OTHER_MPI, env)),
    ("slurm", _slurm),
)


def detect(environ: Mapping[str, str]) -> DistEnv:
    """Return the DistEnv described by `environ` (pure: reads only the mapping given)."""
    for _name, detector in DETECTORS:
        found = detector(environ)
        if found is not None:
            return found
    return _none(environ)


