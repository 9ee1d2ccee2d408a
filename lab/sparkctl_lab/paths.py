"""Where the lab keeps its state (LAB_DIR, removed by `lab down`) and its caches (kept).

Stdlib only: the host init and the simulated tools import this inside the lab's hosts.
"""

from __future__ import annotations

import os
from pathlib import Path


def _instance() -> int:
    raw = os.environ.get("SPARKCTL_LAB_INSTANCE", "0") or "0"
    if raw not in {str(i) for i in range(INSTANCES)}:
        raise SystemExit(f"SPARKCTL_LAB_INSTANCE={raw!r}: expected one of 0..{INSTANCES - 1} (unset: 0, the lab)")
    return int(raw)


def prefix(instance: int) -> str:
    """Lab `instance`'s name in its namespaces, runner device, cgroups and default LAB_DIR."""
    return "lab" if instance == 0 else f"lab{instance}"


def default_lab_dir(instance: int) -> Path:
    return Path(f"/var/lib/sparkctl-{prefix(instance)}")


# Which of the machine's labs this process works on. Instance 0 is the lab (what a newcomer runs and
# inventories/lab.yaml describes); instances 1 and 2 are labs beside it, so the test suite can run
# three lab workers at once (dev.sh): each its own namespaces (lab1-*, lab2-*), addresses
# (topology.SUBNETS_OF), LAB_DIR, sshd, dockerds and registry. Nothing is shared but the image cache
# (CACHE_DIR, under its lock).
INSTANCES = 3
INSTANCE = _instance()
PREFIX = prefix(INSTANCE)
# Overridable for experiments; everything else in sparkctl assumes the defaults
# (inventories/lab.yaml names the key and known_hosts under /var/lib/sparkctl-lab).
LAB_DIR = Path(os.environ.get("SPARKCTL_LAB_DIR", str(default_lab_dir(INSTANCE))))


def other_labs() -> list[Path]:
    """The LAB_DIRs of the machine's other labs that are up (what this lab's `down` must not touch)."""
    return [d for i in range(INSTANCES) if i != INSTANCE and (d := default_lab_dir(i)).exists()]


CACHE_DIR = Path(os.environ.get("SPARKCTL_LAB_CACHE", "/var/cache/sparkctl-lab"))

SSH_DIR = LAB_DIR / "ssh"
SSH_KEY = SSH_DIR / "id_ed25519"
KNOWN_HOSTS = SSH_DIR / "known_hosts"
SSH_CONFIG = SSH_DIR / "config"
INVENTORY_PATH = LAB_DIR / "inventory.yaml"
# a fleet lab (`lab up --clusters 2`): the second pair's inventory and the fleet file, beside the first
INVENTORY_2_PATH = LAB_DIR / "inventory-2.yaml"
FLEET_PATH = LAB_DIR / "fleet.yaml"
CLUSTERS_FILE = LAB_DIR / "clusters"  # how many pairs the lab has (absent: 1)
FAULTS_DIR = LAB_DIR / "faults"
REGISTRY_DIR = LAB_DIR / "registry"
ENGRAM_CACHE = CACHE_DIR / "engram" / "tables"  # the offload host's /srv/engram/tables
BIN_DIR = LAB_DIR / "bin"  # runner-side helpers (an `ssh` that always uses the lab's config)


def host_dir(name: str) -> Path:
    return LAB_DIR / "hosts" / name


def docker_socket(name: str) -> Path:
    """The runner's way into a host's dockerd (the host itself uses /var/run/docker.sock)."""
    return host_dir(name) / "docker.sock"


def faults_file(name: str) -> Path:
    return FAULTS_DIR / f"{name}.json"
