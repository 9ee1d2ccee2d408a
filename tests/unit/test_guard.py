"""The development fence: with SPARKCTL_ONLY_NETWORKS set, real-world addresses are never contacted."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from sparkctl.errors import InputError
from sparkctl.inventory.loader import load_inventory
from sparkctl.transport.guard import check_address, check_url
from sparkctl.transport.ssh import Fleet

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def fenced(monkeypatch):
    monkeypatch.setenv("SPARKCTL_ONLY_NETWORKS", "127.0.0.0/8,10.231.0.0/16")


def test_addresses_inside_the_fence_pass(fenced):
    check_address("10.231.0.11")
    check_address("127.0.0.1")
    check_url("http://localhost:8000/v1")


@pytest.mark.parametrize("address", ["192.168.1.177", "8.8.8.8", "spark-head.local"])
def test_addresses_outside_the_fence_are_refused(fenced, address):
    with pytest.raises(InputError) as err:
        check_address(address)
    assert "SPARKCTL_ONLY_NETWORKS" in err.value.message


def test_seed_inventory_hosts_are_refused_before_any_socket_opens(fenced, monkeypatch):
    opened = []

    def refuse(self, addr):  # record, and never let a packet leave even if the fence broke
        opened.append(addr)
        raise ConnectionRefusedError("test: no real connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    inv = load_inventory(ROOT / "inventories" / "dspark-recipe.yaml")
    with Fleet(inv) as fleet:
        out = fleet.map(lambda s: s.run("true"))
    assert all(not o.ok and "refusing to contact 192.168." in o.error for o in out.values())
    assert opened == []


def test_unset_fence_allows_everything(monkeypatch):
    monkeypatch.delenv("SPARKCTL_ONLY_NETWORKS", raising=False)
    check_address("192.168.1.177")  # operators reach their real hosts
