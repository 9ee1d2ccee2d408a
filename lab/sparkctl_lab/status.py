"""`lab status`: what runs, what answers (hosts, registry, model hub), how the links look, and which faults are on."""

from __future__ import annotations

from sparkctl_lab import clusters as lab_clusters
from sparkctl_lab import hub, image, netns, paths, preflight, procs, registry
from sparkctl_lab import topology as topo
from sparkctl_lab.health import docker_get, ssh_banner
from sparkctl_lab.hw import state
from sparkctl_lab.paths import FLEET_PATH, INVENTORY_2_PATH, INVENTORY_PATH, LAB_DIR, SSH_CONFIG, docker_socket
from sparkctl_lab.topology import ALL_HOSTS, IMAGE, REGISTRY


def link_view(name: str) -> list[dict]:
    h = ALL_HOSTS[name]
    have = netns.links(h.netns)
    f = state.load_faults(name)
    rows = []
    for n in h.nics:
        cur = have.get(n.device)
        row = {
            "device": n.device,
            "peer": n.peer,
            "address": n.address,
            "expected_mtu": n.mtu,
            "rdma": list(n.rdma),
            "present": cur is not None,
        }
        if cur:
            row.update(
                {
                    "addresses": cur["addresses"],
                    "mtu": cur["mtu"],
                    "state": cur["operstate"],
                    "admin_up": cur["up"],
                    "speed_mbps": state.speed(h, n.device, f, cur["operstate"]),
                    "rdma_state": {r: state.rdma_state(r, f, cur["operstate"])[1] for r in n.rdma},
                }
            )
        rows.append(row)
    return rows


def _fault_lines(name: str, links: list[dict]) -> list[str]:
    f = state.load_faults(name)
    out = []
    for ln in links:
        if not ln["present"]:
            out.append(f"{name}: {ln['device']} missing")
            continue
        if not ln["admin_up"]:
            out.append(f"{name}: link-down {ln['device']}")
        if ln["mtu"] != ln["expected_mtu"]:
            out.append(f"{name}: mtu {ln['device']}={ln['mtu']} (expected {ln['expected_mtu']})")
    out += [f"{name}: degraded {dev} (carries {v} Mb/s; reports its nominal speed)" for dev, v in f.get("speed", {}).items()]
    out += [f"{name}: rdma-down {r}" for r in f.get("rdma-down", [])]
    if f.get("gpu-missing"):
        out.append(f"{name}: gpu-missing {','.join(map(str, f['gpu-missing']))}")
    if f.get("driver"):
        out.append(f"{name}: driver {f['driver']}")
    for p in f.get("gpu-process", []):
        out.append(f"{name}: gpu-process pid {p['pid']} {p['used_mib']}MiB on GPU {p.get('gpu', 0)}")
    return out


def status() -> dict:
    preflight.require_root("`sparkctl lab status`")
    existing = netns.existing_netns()
    count = lab_clusters.count()
    active = lab_clusters.hosts()
    # the lab's hosts, and any host of a pair it no longer has whose namespace is still here (a
    # removal cut short): shown, and the lab is not up until `lab up` takes it away
    shown = {n: h for n, h in ALL_HOSTS.items() if n in active or h.netns in existing}
    hosts = {}
    all_faults: list[str] = []
    healthy = True
    for name, h in shown.items():
        init = procs.host_init(name)
        kids = procs.host_children(init) if init else {}
        dv = docker_get(name, "/version") if init else None
        banner = ssh_banner(name) if init else None
        links = link_view(name) if h.netns in existing else []
        fl = _fault_lines(name, links) if links else []
        all_faults += fl
        ok = bool(init and dv and banner) and name in active
        healthy &= ok
        hosts[name] = {
            "role": h.role,
            "cluster": topo.CLUSTER_NAMES[0 if name in topo.HOSTS else 1],
            "expected": name in active,
            "netns": h.netns,
            "netns_exists": h.netns in existing,
            "init_pid": init,
            "management": {"device": h.mgmt_device, "address": h.mgmt_address},
            "sshd": {"pid": kids.get("sshd"), "healthy": banner is not None, "banner": banner},
            "dockerd": {
                "pid": kids.get("dockerd"),
                "healthy": dv is not None,
                "version": (dv or {}).get("Version"),
                "api_version": (dv or {}).get("ApiVersion"),
                "socket": str(docker_socket(name)),
            },
            "gpus": [g.name for g in h.gpus],
            "links": links,
            "faults": state.load_faults(name),
            "rss_mib": round(procs.rss_kib([init]) / 1024, 1) if init else 0,
            "healthy": ok,
        }
    root = netns.links(None).get(topo.RUNNER_DEVICE)
    reg_pid = procs.registry_pid()
    reg_ok = registry.healthy() if reg_pid else False
    cfg = registry.image_config() if reg_ok else None
    key_file = paths.REGISTRY_DIR / "image-key"
    present_key = ((cfg.get("config") or {}).get("Labels") or {}).get(image.KEY_LABEL) if cfg else None
    hub_pids = list(procs.hub_pids())
    hub_ok = hub.healthy() if hub_pids else False
    healthy &= reg_ok and cfg is not None and hub_ok
    return {
        "up": bool(healthy),
        "lab_dir": str(LAB_DIR),
        "clusters": count,
        "inventory": str(INVENTORY_PATH) if INVENTORY_PATH.exists() else None,
        "inventory_2": str(INVENTORY_2_PATH) if INVENTORY_2_PATH.exists() else None,
        "fleet": str(FLEET_PATH) if FLEET_PATH.exists() else None,
        "ssh_config": str(SSH_CONFIG) if SSH_CONFIG.exists() else None,
        "namespaces": sorted(n for n in topo.ALL_NETNS if n in existing),
        "runner": {
            "device": topo.RUNNER_DEVICE,
            "address": f"{topo.RUNNER_ADDRESS}/24",
            "present": root is not None,
            "state": (root or {}).get("operstate"),
            "subnet": " ".join(topo.SUBNETS),
            "route_unreachable": netns._has_unreachable(),
        },
        "hosts": hosts,
        "registry": {
            "address": REGISTRY,
            "pid": reg_pid,
            "healthy": reg_ok,
            "rss_mib": round(procs.rss_kib([reg_pid]) / 1024, 1) if reg_pid else 0,
        },
        "hub": {
            "endpoint": hub.ENDPOINT,
            "pid": hub_pids[0] if hub_pids else None,
            "healthy": hub_ok,
            "token_file": str(hub.TOKEN_FILE) if hub.TOKEN_FILE.exists() else None,
        },
        "image": {
            "name": IMAGE,
            "present": cfg is not None,
            "id": (cfg or {}).get("_id"),
            "digest": (cfg or {}).get("_manifest_digest"),
            "key": present_key or (key_file.read_text().strip() if key_file.exists() else None),
            "current": present_key == image.image_key() if cfg else False,
        },
        "faults": all_faults,
    }
