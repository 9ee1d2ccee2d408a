"""Jumbo frames really cross every fabric rail in both directions, and not the management net."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.lab

# (host, device, peer host, peer address) for every rail, both directions
RAILS = [
    ("head", "enp1s0f0np0", "worker", "10.231.100.3"),
    ("worker", "enp1s0f0np0", "head", "10.231.100.2"),
    ("head", "enP2p1s0f0np0", "worker", "10.231.101.3"),
    ("worker", "enP2p1s0f0np0", "head", "10.231.101.2"),
    ("head", "enp1s0f1np1", "offload", "10.231.110.4"),
    ("offload", "enp65s0f0np0", "head", "10.231.110.2"),
    ("worker", "enp1s0f1np1", "offload", "10.231.111.4"),
    ("offload", "enp65s0f1np1", "worker", "10.231.111.3"),
]


def ping(lab, host: str, size: int, address: str, device: str | None = None):
    argv = ["ping", "-c", "1", "-W", "1", "-M", "do", "-s", str(size)]
    if device:
        argv += ["-I", device]
    return lab.host_exec(host, argv + [address], timeout=10)


@pytest.mark.parametrize("host,device,peer,address", RAILS, ids=[f"{h}-{d}" for h, d, _, _ in RAILS])
def test_jumbo_frames_cross_each_rail(lab, host, device, peer, address):
    ok = ping(lab, host, 8972, address, device)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    too_big = ping(lab, host, 8973, address, device)
    assert too_big.returncode != 0


def test_management_net_is_1500(lab):
    for host, peer in (("head", "10.231.0.12"), ("offload", "10.231.0.1")):
        assert ping(lab, host, 1472, peer).returncode == 0
        r = ping(lab, host, 1473, peer)
        assert r.returncode != 0
        assert "too long" in (r.stdout + r.stderr).lower() or "mtu" in (r.stdout + r.stderr).lower()


def test_hosts_reach_the_registry_but_not_rails_they_are_not_on(lab):
    assert lab.host_exec("worker", ["ping", "-c", "1", "-W", "1", "10.231.0.1"]).returncode == 0
    # head has no link into the worker<->offload subnet and no default route
    r = lab.host_exec("head", ["ping", "-c", "1", "-W", "1", "10.231.111.4"])
    assert r.returncode != 0
    assert "unreachable" in (r.stdout + r.stderr).lower()
