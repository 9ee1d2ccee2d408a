"""The lab's shape: hosts, their simulated hardware, the management net and the fabric.

One source of truth for what `lab up` builds, what the simulated tools report and the
inventory the lab writes (LAB_DIR/inventory.yaml, which must equal inventories/lab.yaml:
tests/lab/test_lab_inventory.py holds the two together). The shape is the sPLIce build
(seed 000): two DGX Sparks joined by both twins of a ConnectX-7 port, and an x86 offload
host with its own link to each Spark.

A fleet lab (`lab up --clusters 2`) adds a second pair, head2 and worker2 (SECOND_PAIR): the
same Sparks and rails on subnets of their own (10.231.102/103), no offload host. HOSTS stays the
first cluster; ALL_HOSTS is every host the lab can have (what a name is looked up in), and
hosts(N) the hosts of an N-cluster lab (clusters.py knows N).

Stdlib only (the host init imports it), and light: every simulated tool call (nvidia-smi,
ibdev2netdev, ethtool: a Python process each, thousands per test run) imports it, so its records
are named tuples (collections is already loaded) rather than dataclasses (whose `inspect` import
was a third of such a call's CPU).
"""

from __future__ import annotations

from collections import namedtuple
from pathlib import Path

from sparkctl_lab.paths import INSTANCE, INSTANCES, PREFIX, prefix

# Lab instance i (paths.INSTANCE) is the first lab's shape moved up OFFSETS[i] in the third octet:
# the first lab uses 0 (management), 1 (a test's stray subnet) and 100-111 (rails), so the second
# uses 128, 129, 228-239 and the third 16, 17, 116-127, all inside 10.231.0.0/16 (what
# SPARKCTL_ONLY_NETWORKS fences) and clear of each other.
OFFSETS = (0, 128, 16)
OFFSET = OFFSETS[INSTANCE]
# what each lab owns, routed `unreachable` in the root namespace by that lab, so nothing for a
# lab address leaves the machine while that lab is up (the first lab's is the whole /16: what a
# newcomer's lab has always claimed; the others' are more specific, so theirs win where both hold)
SUBNETS_OF = (("10.231.0.0/16",), ("10.231.128.0/17",), ("10.231.16.0/20", "10.231.112.0/20"))
SUBNETS = SUBNETS_OF[INSTANCE]  # this lab's
ALL_SUBNETS = tuple(s for own in SUBNETS_OF[:INSTANCES] for s in own)
RUNNER_DEVICES = tuple(f"{prefix(i)}-mgmt" for i in range(INSTANCES))


def net(third: int, last: int) -> str:
    """10.231.THIRD.LAST in this lab (the first lab's numbering, moved by OFFSET)."""
    return f"10.231.{third + OFFSET}.{last}"


RUNNER_ADDRESS = net(0, 1)
RUNNER_DEVICE = RUNNER_DEVICES[INSTANCE]  # the runner's veth into the management bridge (root namespace)
SWITCH_NETNS = f"{PREFIX}-switch"
SWITCH_BRIDGE = "br-mgmt"
REGISTRY_PORT = 5000
REGISTRY = f"{RUNNER_ADDRESS}:{REGISTRY_PORT}"
IMAGE_REPO = "sparkctl/vllm-sim"
IMAGE_TAG = "0.1"
IMAGE = f"{REGISTRY}/{IMAGE_REPO}:{IMAGE_TAG}"
# the lab's model hub (hub.py), beside the registry on the runner's management address
HUB_PORT = 5080
HUB = f"{RUNNER_ADDRESS}:{HUB_PORT}"
MGMT_MTU = 1500


class Nic(namedtuple("Nic", "device address rdma mtu speed_mbps peer bus_id")):
    """One end of a fabric cable, as the host sees it: net device, address with prefix (e.g.
    10.231.100.2/24), RDMA devices (tuple of str), MTU, speed in Mb/s, peer host, PCI bus id."""

    __slots__ = ()

    @property
    def ip(self) -> str:
        return self.address.split("/")[0]


class Gpu(namedtuple("Gpu", "name bus_id memory_mib")):
    """A GPU: model name, PCI bus id, memory in MiB (None: unified memory (GB10), nvidia-smi says
    "Not Supported")."""

    __slots__ = ()


class LabHost(
    namedtuple(
        "LabHost",
        "name role mgmt_device mgmt_ip mgmt_speed_mbps mgmt_bus_id gpus driver cuda fabric memory_gib",
        defaults=(None,),
    )
):
    """A lab host: name, role (head/worker/offload), management NIC (device, IP, Mb/s, bus id),
    GPUs (tuple of Gpu), driver and CUDA versions, fabric (tuple of Nic), memory in GiB (None:
    not stated)."""

    __slots__ = ()

    @property
    def netns(self) -> str:
        return f"{PREFIX}-{self.name}"

    @property
    def mgmt_address(self) -> str:
        return f"{self.mgmt_ip}/24"

    @property
    def nics(self) -> tuple[Nic, ...]:
        """The management NIC (on the lab's switch, no RDMA), then the fabric."""
        mgmt = Nic(self.mgmt_device, self.mgmt_address, (), MGMT_MTU, self.mgmt_speed_mbps, "management", self.mgmt_bus_id)
        return (mgmt, *self.fabric)

    @property
    def addresses(self) -> list[str]:
        """Every address the host answers on (management first)."""
        return [n.ip for n in self.nics]

    def nic(self, name: str) -> Nic:
        """The NIC with that net device name, or behind that RDMA device name."""
        for n in self.nics:
            if name == n.device or name in n.rdma:
                return n
        raise KeyError(name)


DRIVER = "580.95.05"  # the DGX OS 7 driver; identical on both Sparks unless a fault says otherwise
CUDA = "13.0"

_GB10 = Gpu("NVIDIA GB10", "0000000F:01:00.0", None)


def _spark(
    name: str, role: str, last: int, peer: str, offload_subnet: int | None, mgmt_last: int, rails: tuple[int, int]
) -> LabHost:
    """A DGX Spark: the two twins of port 0 as rails to its peer on subnets `rails`, and (in the
    first pair) port 1 to the offload host on `offload_subnet`."""
    fabric = [
        Nic("enp1s0f0np0", f"{net(rails[0], last)}/24", ("rocep1s0f0",), 9000, 200000, peer, "0000:01:00.0"),
        Nic("enP2p1s0f0np0", f"{net(rails[1], last)}/24", ("roceP2p1s0f0",), 9000, 200000, peer, "0002:01:00.0"),
    ]
    if offload_subnet is not None:
        fabric.append(
            Nic("enp1s0f1np1", f"{net(offload_subnet, last)}/24", ("rocep1s0f1",), 9000, 40000, "offload", "0000:01:00.1")
        )
    return LabHost(
        name=name,
        role=role,
        mgmt_device="enP7s7",  # the Spark's on-board 10GbE
        mgmt_ip=net(0, mgmt_last),
        mgmt_speed_mbps=10000,
        mgmt_bus_id="0007:01:00.0",
        gpus=(_GB10,),
        driver=DRIVER,
        cuda=CUDA,
        fabric=tuple(fabric),
    )


HOSTS: dict[str, LabHost] = {
    "head": _spark("head", "head", 2, "worker", 110, 11, (100, 101)),
    "worker": _spark("worker", "worker", 3, "head", 111, 12, (100, 101)),
    "offload": LabHost(
        name="offload",
        role="offload",
        mgmt_device="eno1",
        mgmt_ip=net(0, 13),
        mgmt_speed_mbps=1000,
        mgmt_bus_id="0000:c1:00.0",
        gpus=(
            Gpu("NVIDIA GeForce RTX 3090", "00000000:01:00.0", 24576),
            Gpu("NVIDIA GeForce RTX 3090", "00000000:21:00.0", 24576),
        ),
        driver=DRIVER,
        cuda=CUDA,
        memory_gib=503,
        fabric=(
            Nic("enp65s0f0np0", f"{net(110, 4)}/24", ("mlx5_0",), 9000, 40000, "head", "0000:41:00.0"),
            Nic("enp65s0f1np1", f"{net(111, 4)}/24", ("mlx5_1",), 9000, 40000, "worker", "0000:41:00.1"),
        ),
    ),
}

# The second pair of a fleet lab: its own management addresses and rails, no offload link.
SECOND_PAIR: dict[str, LabHost] = {
    "head2": _spark("head2", "head", 2, "worker2", None, 21, (102, 103)),
    "worker2": _spark("worker2", "worker", 3, "head2", None, 22, (102, 103)),
}
ALL_HOSTS: dict[str, LabHost] = {**HOSTS, **SECOND_PAIR}
MAX_CLUSTERS = 2
CLUSTER_NAMES = ("lab", "lab-2")  # cluster.name of each pair's inventory


def hosts(clusters: int = 1) -> dict[str, LabHost]:
    """The hosts of a lab of `clusters` pairs (1: HOSTS; 2: ALL_HOSTS)."""
    return HOSTS if clusters == 1 else ALL_HOSTS


def netns_names(host_set: dict[str, LabHost]) -> list[str]:
    return [SWITCH_NETNS] + [h.netns for h in host_set.values()]


NETNS = netns_names(HOSTS)
ALL_NETNS = netns_names(ALL_HOSTS)


class Cable(namedtuple("Cable", "a a_nic b b_nic")):
    """A fabric veth pair: a end (a Nic) in host a, b end in host b."""

    __slots__ = ()


def cables(host_set: dict[str, LabHost] | None = None) -> list[Cable]:
    """Pair each host's fabric NICs with the peer NIC in the same subnet (each cable once), over
    `host_set` (default: every host the lab can have)."""
    host_set = ALL_HOSTS if host_set is None else host_set
    out: list[Cable] = []
    laid: set[tuple[str, str]] = set()  # (host, device) of the far ends of the cables in `out`
    for h in host_set.values():
        for n in h.fabric:
            subnet = n.address.rsplit(".", 1)[0]
            peer = host_set[n.peer]
            match = [p for p in peer.fabric if p.peer == h.name and p.address.rsplit(".", 1)[0] == subnet]
            if len(match) != 1:
                raise ValueError(f"lab topology: {h.name}/{n.device} has no unique peer NIC on {peer.name}")
            if (h.name, n.device) not in laid:
                laid.add((peer.name, match[0].device))
                out.append(Cable(h.name, n, peer.name, match[0]))
    return out


# The runtime, caches, Engram (and alerts) sections come from the shipped inventories/lab.yaml (one source
# of truth), read when the inventory is written; the hosts and fabric above are what the lab
# builds, and a test asserts the two agree. The host init (python -S, no yaml) needs only where
# the offload host's Engram tables live, kept here and checked against the file.
SHIPPED_INVENTORY = Path(__file__).resolve().parents[2] / "inventories" / "lab.yaml"
ENGRAM_HOST = "offload"
ENGRAM_SOURCE = "/srv/engram/tables"
# The simulated tables on the offload host's disk: 4 files of 64 MiB (engram.size_gib is the
# tmpfs they are placed in, a little larger for SHA256SUMS and sparkctl's marker).
ENGRAM_TABLE_BYTES = 256 << 20


FIRST_REGISTRY = "10.231.0.1:5000"  # the first lab's, which the shipped file's runtime.image names
FIRST_HUB = "10.231.0.1:5080"  # the first lab's model hub, which the shipped file's weights.endpoint names


def shipped_sections() -> dict:
    """The shipped inventories/lab.yaml, its image moved to this lab's registry (a second lab's)."""
    import yaml

    doc = yaml.safe_load(SHIPPED_INVENTORY.read_text())
    runtime = doc["runtime"]
    if runtime["image"].startswith(FIRST_REGISTRY + "/"):
        runtime["image"] = REGISTRY + runtime["image"][len(FIRST_REGISTRY) :]
    weights = doc["weights"]
    if weights["endpoint"] == f"http://{FIRST_HUB}":  # the model hub, likewise (hub.py)
        weights["endpoint"] = f"http://{HUB}"
    engram = doc["engram"]
    if (engram["host"], engram["source"]) != (ENGRAM_HOST, ENGRAM_SOURCE):
        raise ValueError(
            f"{SHIPPED_INVENTORY}: engram host/source must stay {ENGRAM_HOST}:{ENGRAM_SOURCE} (the lab provisions them)"
        )
    return doc


def _hosts_doc(host_set: dict[str, LabHost]) -> dict:
    return {
        h.name: {
            "role": h.role,
            "ssh": {"address": h.mgmt_ip},
            "gpu": {"model": h.gpus[0].name, "count": len(h.gpus)},
            **({"memory_gib": h.memory_gib} if h.memory_gib is not None else {}),
            "fabric": [
                {
                    "device": n.device,
                    "rdma": list(n.rdma),
                    "address": n.address,
                    "mtu": n.mtu,
                    "speed_gbps": n.speed_mbps // 1000,
                    "peer": n.peer,
                }
                for n in h.fabric
            ],
        }
        for h in host_set.values()
    }


def _ssh_defaults(shipped: dict, ssh_key: str, known_hosts: str) -> dict:
    return {
        "user": "root",
        "port": 22,
        "key": ssh_key,
        "known_hosts": known_hosts,
        "host_key_policy": "strict",
        # the shipped file's deadline (the lab's hosts answer in milliseconds)
        **{k: v for k, v in shipped.get("ssh_defaults", {}).items() if k == "connect_timeout"},
    }


def inventory_doc(ssh_key: str, known_hosts: str) -> dict:
    """The lab's inventory as a plain document (what LAB_DIR/inventory.yaml holds)."""
    shipped = shipped_sections()
    return {
        "cluster": {"name": CLUSTER_NAMES[0]},
        "ssh_defaults": _ssh_defaults(shipped, ssh_key, known_hosts),
        "hosts": _hosts_doc(HOSTS),
        "runtime": shipped["runtime"],
        "caches": shipped["caches"],
        "engram": shipped["engram"],
        "weights": shipped["weights"],
        **{k: shipped[k] for k in ("gateway", "alerts", "keeper") if k in shipped},
    }


def second_inventory_doc(ssh_key: str, known_hosts: str) -> dict:
    """The second pair's inventory (LAB_DIR/inventory-2.yaml): the shipped runtime, caches, weights,
    gateway and alerts on head2 + worker2; no offload host, so no drafter (runtime.speculative, its
    weights) and no Engram."""
    shipped = shipped_sections()
    runtime = {k: v for k, v in shipped["runtime"].items() if k != "speculative"}
    return {
        "cluster": {"name": CLUSTER_NAMES[1]},
        "ssh_defaults": _ssh_defaults(shipped, ssh_key, known_hosts),
        "hosts": _hosts_doc(SECOND_PAIR),
        "runtime": runtime,
        "caches": shipped["caches"],
        "weights": {k: v for k, v in shipped["weights"].items() if k != "drafter"},  # no drafter here either
        **{k: shipped[k] for k in ("gateway", "alerts", "keeper") if k in shipped},
    }


FLEET_NAME = "lab-fleet"
FRONT_DOOR_PORT = 8890


def fleet_doc(inventory_files: tuple[str, ...], router_wheel: str) -> dict:
    """The lab's fleet file (LAB_DIR/fleet.yaml): both pairs, in rollout order, by paths relative to
    the fleet file's folder; the front door on the first pair's head, vllm-router shipped there from
    `router_wheel` (the image has only its requirements, as vLLM's does)."""
    return {
        "fleet": {"name": FLEET_NAME},
        "members": [{"inventory": f} for f in inventory_files],
        "front_door": {"member": CLUSTER_NAMES[0], "port": FRONT_DOOR_PORT, "router": {"wheel": router_wheel}},
        "rollout": {"max_unavailable": 1, "stop_on_failure": True},
    }
