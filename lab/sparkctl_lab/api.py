"""The lab's Python API (what `sparkctl lab ...`, the tests and other engineers use). Needs root.

    from sparkctl_lab import api

    api.up(progress=print, clusters=None) -> dict
                                          bring the lab up; idempotent (a second run changes nothing
                                          and says so: {"changed": False, "changes": [], ...});
                                          clusters=2 adds the second pair (head2, worker2) and writes
                                          INVENTORY_2_PATH and FLEET_PATH, clusters=1 removes it all,
                                          None keeps the lab's count (1 on a fresh lab)
    api.clusters() -> int                 the lab's number of pairs; api.hosts(): its hosts by name
    api.reboot(host) -> dict              a host's reboot: its PID 1 stops (containers, dockerd, its tmpfs
                                          mounts gone) and starts again (sshd, dockerd, its enabled units);
                                          its disks stay
    api.down(progress=print) -> dict      stop everything (every pair); leaves no namespace, process,
                                          mount, veth, route or LAB_DIR behind (caches under CACHE_DIR stay)
    api.status() -> dict                  hosts (netns, init pid, sshd/dockerd health, links, faults),
                                          runner link and route, registry, image; "up": all healthy
    api.fault(host, kind, target=None, value=None, clear=False) -> dict
                                          switch a fault on (or off with clear=True); returns the
                                          host's fault view. Kinds (state.FAULT_KINDS):
        link-down   TARGET=netdev          real: `ip -n lab-HOST link set DEV down`
        mtu         TARGET=netdev [VALUE=1500]   real: `ip -n lab-HOST link set DEV mtu VALUE`
        speed       TARGET=netdev [VALUE=250]    a degraded rail: real, `tc` caps what it carries (Mb/s)
                                          both ways; ethtool and sysfs keep the nominal speed
        rdma-down   TARGET=rdma dev or netdev    /sys/class/infiniband/DEV/ports/1/state "1: DOWN"
        gpu-missing [TARGET=gpu index]     nvidia-smi loses that GPU (all: "No devices were found")
        driver      [VALUE=580.82.09]      nvidia-smi reports another driver version
        gpu-process [TARGET=gpu index] [VALUE=MiB, 16384]  a real foreign process in the host that
                                          nvidia-smi lists as holding GPU memory
        (aliases: degraded-speed, wrong-mtu, wrong-driver, rdma-port-down, foreign-gpu-process, no-gpu)
    api.clear_faults() -> list[str]       every fault off: links up at nominal MTU, fault files empty
    api.host_exec(host, argv, input=None, timeout=60, check=False) -> CompletedProcess
                                          run argv inside a lab host's namespaces (net, mount, UTS, PID)
                                          with the host's PATH (so the simulated tools answer)
    api.drills.run(name) -> dict          break the lab like a real failure (drills.DRILLS); its runbook repairs it
    api.prometheus.up() -> dict           a real Prometheus on 127.0.0.1:19090 scraping the runtime with the
                                          rules `sparkctl alerts` writes (+ a node exporter per host);
                                          prometheus.alerts(), wait_firing(NAME); `lab down` stops it
    api.hub                               the model hub `lab up` starts (the Hugging Face Hub's API on
                                          topology.HUB, e.g. HF_ENDPOINT=http://10.231.0.1:5080):
                                          hub.ENDPOINT, endpoint(instance), TARGET_REPO, DRAFTER_REPO,
                                          GATED_REPO, commits(repo) (oldest first, the last is main),
                                          manifest(repo, revision) {path: size, sha256, ...}, TOKEN_FILE
                                          (approved for the gated repo), set_faults(cut_after=, rate=);
                                          checkpoint.py makes the checkpoints it serves
    LAB_DIR, INVENTORY_PATH, SSH_KEY, KNOWN_HOSTS, SSH_CONFIG, CACHE_DIR, HOSTS, IMAGE, REGISTRY
    INVENTORY_2_PATH, FLEET_PATH          the second pair's inventory and the fleet file (two pairs only)
    HOSTS (the first pair: head, worker, offload), SECOND_PAIR (head2, worker2), ALL_HOSTS

Link down and wrong MTU are real link states, so a hand-made `ip -n lab-worker link set
enp1s0f0np0 down` is seen exactly like the API's (ibdev2netdev, RDMA port state, ethtool).
The runner reaches hosts over the management net only (10.231.0.0/24 via `lab-mgmt`); docker
CLI/SDK can also use each host's runner socket, `docker_socket(host)`.

Where things live: lifecycle.py (up/down), status.py, faults.py, hostexec.py (host_exec), health.py
(probes), netns.py (links), hostinit.py (each host's PID 1), hostfiles.py (keys, configs,
inventory), registry.py, hub.py and checkpoint.py (the model hub and its checkpoints), image.py
(the runtime image), hw/ (simulated nvidia-smi, ibdev2netdev, ethtool, sysfs), topology.py (the
shape, shared by all of these).
"""

from __future__ import annotations

from sparkctl_lab import drills, hub, prometheus  # noqa: F401  (drills.run(NAME); prometheus.up() / alerts(); hub)
from sparkctl_lab.clusters import count as clusters  # noqa: F401
from sparkctl_lab.clusters import hosts  # noqa: F401
from sparkctl_lab.faults import clear_faults, fault  # noqa: F401
from sparkctl_lab.health import ssh_banner  # noqa: F401
from sparkctl_lab.hostexec import host_exec  # noqa: F401
from sparkctl_lab.lifecycle import down, reboot, up  # noqa: F401
from sparkctl_lab.paths import (  # noqa: F401
    CACHE_DIR,
    FLEET_PATH,
    INVENTORY_2_PATH,
    INVENTORY_PATH,
    KNOWN_HOSTS,
    LAB_DIR,
    SSH_CONFIG,
    SSH_KEY,
    docker_socket,
)
from sparkctl_lab.status import status  # noqa: F401
from sparkctl_lab.topology import ALL_HOSTS, HOSTS, IMAGE, REGISTRY, SECOND_PAIR  # noqa: F401

__all__ = [
    "up",
    "down",
    "reboot",
    "clusters",
    "hosts",
    "status",
    "drills",
    "prometheus",
    "hub",
    "fault",
    "clear_faults",
    "host_exec",
    "ssh_banner",
    "docker_socket",
    "LAB_DIR",
    "CACHE_DIR",
    "INVENTORY_PATH",
    "INVENTORY_2_PATH",
    "FLEET_PATH",
    "SSH_KEY",
    "KNOWN_HOSTS",
    "SSH_CONFIG",
    "HOSTS",
    "SECOND_PAIR",
    "ALL_HOSTS",
    "IMAGE",
    "REGISTRY",
]
