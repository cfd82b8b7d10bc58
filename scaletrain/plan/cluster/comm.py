"""NCCL's collectives on a GPU cluster, from a hardware profile's links, by the ring and tree
formulas both planners share (`plan/formulas.py`).

Bus bandwidth as nccl-tests reports it (`busbw`): a ring all-gather or reduce-scatter of S
bytes (the whole result) over n ranks takes (n−1)/n · S / busbw, an all-reduce 2(n−1)/n · S /
busbw, plus a latency per ring step. Inside a node the link is NVLink (the profile's nccl-tests
bus bandwidth; all-reduce on 8 GPUs with NVLink SHARP where the profile has it). Across nodes a
ring whose k ranks per node each have their own network port (rail-optimised clusters) moves k
ports' worth: busbw = min(NVLink's, k × port × efficiency). Send/receive between two GPUs
moves S at the link's rate. All-reduce across nodes uses NCCL's tree where it is faster
(latency log n instead of n). An all-to-all (expert parallel's) inside a node runs at NVLink's
bus bandwidth; across nodes each GPU's rows for other nodes leave through its own port — an
all-to-all cannot aggregate a node's NICs as a ring does (NVIDIA/nccl-tests#267) — so its bus
bandwidth (nccl-tests': algorithm bandwidth × (n−1)/n) is port × (n−1)/(n − k) for k ranks a
node, about nodes/(nodes − 1) × the port (nccl-tests#130), at most NVLink's.

A group is the ranks of one or more adjacent dimensions of the mesh (`ParallelDims`, rank
order row-major over `MESH`): its size is their degrees' product, and its neighbouring ranks
are the product of the degrees inside them apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...parallel.dims import MESH_DIMS, ParallelDims
from .. import formulas


@dataclass(frozen=True)
class Group:
    """n ranks of a collective, `per_node` of them on each node."""
    size: int
    per_node: int

    @property
    def nodes(self) -> int:
        return max(1, math.ceil(self.size / max(1, self.per_node)))


def group(size: int, stride: int, gpus_per_node: int) -> Group:
    """The ranks of a mesh dimension of `size` whose neighbours are `stride` ranks apart."""
    per_node = max(1, min(size, gpus_per_node // max(1, stride))) if stride < gpus_per_node else 1
    return Group(size, per_node)


def mesh_group(dims: ParallelDims, names: tuple, gpus_per_node: int) -> Group:
    """The group of the adjacent mesh dimensions `names` (FSDP's is dp_shard and cp together)."""
    inner = max(MESH_DIMS.index(n) for n in names)
    stride = dims.span(MESH_DIMS[inner]) // dims[MESH_DIMS[inner]]
    return group(math.prod(dims[n] for n in names), stride, gpus_per_node)


class Network:
    def __init__(self, profile):
        links = profile.links
        self.nvlink = float(links.get("nvlink_busbw_gb_per_s", 200.0)) * 1e9
        self.nvls = float(links.get("nvls_allreduce_busbw_gb_per_s", 0.0)) * 1e9
        self.nvlink_latency = float(links.get("nvlink_latency_us", 10.0)) * 1e-6
        port = float(links.get("network_gbit_per_s", 100.0)) * 1e9 / 8
        self.port = port * float(links.get("network_efficiency", 0.9))
        self.net_latency = float(links.get("network_latency_us", 20.0)) * 1e-6

    def busbw(self, g: Group, allreduce: bool = False) -> float:
        if g.nodes == 1:
            return self.nvls if allreduce and self.nvls and g.size == g.per_node and g.size >= 4 else self.nvlink
        return min(self.nvlink, g.per_node * self.port)

    def _latency(self, g: Group) -> float:
        return self.nvlink_latency if g.nodes == 1 else self.net_latency

    def all_gather(self, nbytes: float, g: Group) -> float:
        """`nbytes`: the gathered result on each rank."""
        return formulas.ring_all_gather_seconds(nbytes, g.size, self.busbw(g), self._step(g))

    reduce_scatter = all_gather  # the same ring, the other way round

    def all_reduce(self, nbytes: float, g: Group) -> float:
        busbw = self.busbw(g, allreduce=True)
        ring = formulas.ring_all_reduce_seconds(nbytes, g.size, busbw, self._step(g))
        if g.nodes == 1:
            return ring
        return min(ring, formulas.tree_all_reduce_seconds(nbytes, g.size, busbw, self._latency(g)))

    def all_to_all_link(self, g: Group) -> tuple[float, float]:
        """(bus bandwidth, latency per peer) of an all-to-all over `g` (see the module's text)."""
        if g.nodes == 1:
            return self.nvlink, self._step(g)
        local = min(g.per_node, g.size - 1)
        return min(self.nvlink, self.port * (g.size - 1) / (g.size - local)), self._step(g)

    def send(self, nbytes: float, across_nodes: bool) -> float:
        rate = self.port if across_nodes else self.nvlink
        return nbytes / rate + (self.net_latency if across_nodes else self.nvlink_latency)

    def _step(self, g: Group) -> float:
        """Latency of one ring step: a few µs on NVLink, more where the ring leaves the node."""
        return self._latency(g) / 4 if g.nodes == 1 else self._latency(g) / 2
