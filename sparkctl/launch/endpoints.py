"""Where the launched pieces are reached, from the inventory alone: the fabric address a node is
reached at by its peer, the engine's port on the head, the mp executor's rendezvous, the URLs
sparkctl's own calls use (the front door, the engine behind it) and the key the engine asks.

What the launch (launch/plan.py) binds and passes is what the facts probe and sparkctl calls:
one rule for both. Pure, and reading the inventory's attributes only (no import of its models at
run time), so it stays below every layer that needs it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from sparkctl.launch.gateway import ENGINE_PATH

if TYPE_CHECKING:
    from sparkctl.inventory.models import FabricLink, Inventory


def fabric_link_to(inv: Inventory, host: str, peer: str) -> Optional[FabricLink]:
    """The first rail on `host` whose peer is `peer` (the one Ray/NCCL bootstrap over)."""
    return next((link for link in inv.hosts[host].fabric if link.peer == peer), None)


def fabric_ip(inv: Inventory, host: str, peer: str) -> str:
    """Where `peer` reaches `host`: its fabric address on their link, else its management address."""
    link = fabric_link_to(inv, host, peer)
    return str(link.address.ip) if link else inv.hosts[host].ssh.address


def engine_port(inv: Inventory) -> int:
    """Where the engine serves on the head: behind the gateway on gateway.engine_port, else on runtime.port."""
    return inv.gateway.engine_port if inv.gateway.enabled else inv.runtime.port


def engine_api_key(inv: Inventory) -> Optional[str]:
    """The key vLLM itself asks for (its VLLM_API_KEY, from runtime.env), None when it asks none."""
    return inv.runtime.env.get("VLLM_API_KEY") or None


def head_fabric_address(inv: Inventory) -> str:
    """The head's address its ranks meet it on: its fabric address towards the first worker (Ray's
    GCS and --node-ip-address, the mp executor's --master-addr); a head alone, its SSH address."""
    head = inv.hosts_with_role("head")[0]
    workers = inv.hosts_with_role("worker")
    return fabric_ip(inv, head, workers[0]) if workers else inv.hosts[head].ssh.address


def mp_master(inv: Inventory) -> tuple[str, int]:
    """Where the mp executor's headless ranks rendezvous (the launch passes it as --master-addr,
    --master-port)."""
    return head_fabric_address(inv), inv.runtime.master_port


def engine_endpoint(inv: Inventory) -> tuple[str, int, str]:
    """(address, port, path prefix) of the engine as sparkctl reaches it: behind a gateway it listens
    on the head's loopback only (gateway.engine_port), so through the gateway's engine route, which
    never holds; without one, on runtime.port itself."""
    head = inv.hosts_with_role("head")[0]
    return inv.hosts[head].ssh.address, inv.runtime.port, ENGINE_PATH if inv.gateway.enabled else ""


def engine_url(inv: Inventory) -> str:
    """base_url, unchecked (a URL to name, not to call)."""
    address, port, path = engine_endpoint(inv)
    return f"http://{address}:{port}{path}"


def front_url(inv: Inventory) -> str:
    """public_url, unchecked (a URL to name, not to call)."""
    head = inv.hosts_with_role("head")[0]
    return f"http://{inv.hosts[head].ssh.address}:{inv.runtime.port}"
