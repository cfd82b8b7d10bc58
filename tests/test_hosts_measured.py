"""`bench` and `plan` across --hosts: what is refused in one line, and how the network measured
between the hosts replaces the nominal --link-gbps / --link-latency-us in the predictions.
(The real two-host runs are in test_launch_multihost.py.)"""

from __future__ import annotations

import argparse

import pytest

from scaletrain.cli.measure_options import hosts_for
from scaletrain.foundation.errors import UsageError
from scaletrain.measure.jobs import Hosts, hosts_from_args
from scaletrain.plan.machine import default_machine
from scaletrain.plan.probe_link import Link
from scaletrain.plan.scenario import scenario


def args(**given) -> argparse.Namespace:
    base = {"hosts": None, "hostfile": None, "nproc_per_node": None, "world_sizes": "1,2"}
    return argparse.Namespace(**{**base, **given})


def test_hosts_fill_every_slot_and_set_the_processes_per_machine():
    a = args(hosts="a:2,b:2")
    hosts = hosts_for(a, "1,2")
    assert (hosts.slots, hosts.world_size, a.nproc_per_node, a.world_sizes) == (2, 4, 2, "1,4")


@pytest.mark.parametrize("given, expected", [
    ({"hosts": "a:1"}, "lists one host"),
    ({"hosts": "a:1,b:2"}, "same number of processes"),
    ({"hosts": "a:1,b:1", "world_sizes": "1,3"}, "--world-sizes 1,2"),
    ({"hosts": "a:2,b:2", "nproc_per_node": 1}, "drop --nproc-per-node"),
    ({"hosts": "a:1,b:1", "hostfile": "h"}, "either --hostfile or --hosts"),
])
def test_wrong_hosts_are_one_line(given, expected):
    with pytest.raises(UsageError, match=expected.replace("-", r"\-")):
        hosts_for(args(**given), "1,2")


def test_hostfile(tmp_path):
    path = tmp_path / "hosts"
    path.write_text("node1 slots=2\nnode2 slots=2\n")
    hosts = hosts_from_args(args(hostfile=path))
    assert isinstance(hosts, Hosts) and hosts.names == "node1, node2" and hosts.slots == 2


def test_the_measured_network_replaces_the_nominal_link():
    options = default_machine("cpu", nproc_per_node=1, link_gbps=100.0, link_latency_us=1.0)
    local = Link(alpha_s=50e-6, busbw=2e9, nproc=2, source="here")
    network = Link(alpha_s=900e-6, busbw=0.1e9, nproc=2, source="between the hosts",
                   points=((1 << 16, 0.05e9), (1 << 22, 0.1e9)))
    across = scenario(2, options, local, "cpu", network)
    assert across.nodes == 2 and across.alpha_s == pytest.approx(900e-6)
    assert across.busbw(1 << 16) == pytest.approx(0.05e9) and across.busbw(1 << 22) == pytest.approx(0.1e9)
    nominal = scenario(2, options, local, "cpu")
    assert nominal.alpha_s == pytest.approx(50e-6) and nominal.busbw(1 << 22) == pytest.approx(2e9)
    # A group inside one machine (tensor parallel) keeps this machine's link.
    inside = scenario(4, default_machine("cpu", nproc_per_node=2), local, "cpu", network).group(2)
    assert inside.network is None and inside.busbw(1 << 22) == pytest.approx(2e9)


def test_a_noisy_network_is_taken_as_the_line_through_its_sizes():
    # 1 GB/s, each size's own figure (its time less the smallest one's) off by up to 3× either way
    noisy = ((1 << 16, 3e9), (1 << 18, 0.3e9), (1 << 20, 1.2e9), (1 << 22, 0.9e9), (1 << 23, 1.0e9))
    link = Link(alpha_s=800e-6, busbw=1.0e9, nproc=2, source="between the hosts", points=noisy)
    fitted = link.fitted()
    assert fitted.points == () and fitted.alpha_s == link.alpha_s
    assert 0.8e9 < fitted.busbw_for(1 << 19) < 1.25e9  # not the 0.3 GB/s measured nearest
    options = default_machine("cpu", nproc_per_node=1)
    assert scenario(2, options, None, "cpu", link).busbw(1 << 19) == pytest.approx(fitted.busbw)
