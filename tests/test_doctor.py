"""`scaletrain doctor`: passes on a sound machine, and names each problem with its fix."""

from __future__ import annotations

import socket

import pytest

from scaletrain.cli import main
from tests.helpers import scaletrain


def test_doctor_passes_here_with_self_test():
    result = scaletrain("doctor", timeout=120)
    assert result.returncode == 0, result
    assert "2-rank gloo all-reduce of 4 MB correct" in result.stdout
    assert "no problems found" in result.stdout


def doctor(capsys, *args: str) -> tuple[int, str]:
    status = main(["doctor", "--no-self-test", *args])
    return status, capsys.readouterr().out


def test_port_in_use_is_a_problem_with_a_free_port_as_fix(capsys):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        status, out = doctor(capsys, "--master-addr", "127.0.0.1", "--master-port", str(port))
    assert status == 1
    assert f"PROBLEM  port {port} on this (master) machine is already in use" in out
    assert "fix: use another port: MASTER_PORT=" in out


def test_unresolvable_master(capsys):
    status, out = doctor(capsys, "--master-addr", "no-such-host.invalid")
    assert status == 1 and "master address 'no-such-host.invalid' does not resolve" in out and "fix:" in out


def test_loopback_master_for_several_nodes(capsys):
    status, out = doctor(capsys, "--nnodes", "2", "--node-rank", "1", "--master-addr", "127.0.0.1")
    assert status == 1 and "is loopback but the job spans 2 nodes" in out


def test_hostname_resolving_to_loopback_is_named_for_several_nodes(capsys):
    address = socket.gethostbyname(socket.gethostname())
    if not address.startswith("127."):
        pytest.skip(f"this machine's hostname resolves to {address}, not loopback")
    status, out = doctor(capsys, "--nnodes", "2", "--node-rank", "1", "--master-addr", "127.0.0.1")
    assert status == 1 and f"resolves to {address} (loopback)" in out and "GLOO_SOCKET_IFNAME" in out


def test_master_address_not_on_node_zero(capsys):
    status, out = doctor(capsys, "--nnodes", "2", "--node-rank", "0", "--master-addr", "192.0.2.254")
    assert status == 1 and "this is node 0" in out


def test_missing_interface_named(capsys, monkeypatch):
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "nosuchif0")
    status, out = doctor(capsys, "--master-addr", "127.0.0.1")
    assert status == 1 and "GLOO_SOCKET_IFNAME=nosuchif0: no interface nosuchif0 here" in out


def test_a_self_test_failing_for_a_missing_interface_says_so_not_use_gloo(capsys, monkeypatch):
    """The self-test's ranks inherit GLOO_SOCKET_IFNAME: its fix names that, not --backend gloo."""
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "nosuchif0")
    status = main(["doctor", "--master-addr", "127.0.0.1"])
    out = capsys.readouterr().out
    assert status == 1 and "all-reduce self-test failed" in out, out
    fix = out.split("all-reduce self-test failed", 1)[1].splitlines()[1]
    assert "GLOO_SOCKET_IFNAME=nosuchif0" in fix and "--backend gloo" not in fix, out
