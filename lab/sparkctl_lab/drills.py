"""Drills: break the lab the way a real cluster breaks, so on-call can practise its runbook.

    drills.DRILLS            name -> Drill (what breaks, where doctor sees it, its runbook)
    drills.run(name) -> dict break the lab; the operator then follows docs/runbooks/<runbook>.md

Every drill is a real host action, never a sparkctl internal: a link or address changed in a
host's namespace (`ip -n lab-worker ...`), a container killed or an image re-tagged through that
host's dockerd, a tmpfs unmounted, the runtime driven into its known crash by real requests, or
the runtime started with a config that silently falls back to Marlin (`sparkctl up -i` another
file, as someone at the keyboard would). Most drills need the runtime serving (`sparkctl up`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Callable

import yaml

from sparkctl.errors import InputError, SparkctlError
from sparkctl_lab import paths
from sparkctl_lab.faults import host_exec
from sparkctl_lab.topology import HOSTS, IMAGE

FENCE = "127.0.0.0/8,10.231.0.0/16"  # what the drills' own sparkctl runs may reach: loopback and the lab


@dataclass(frozen=True)
class Drill:
    name: str
    runbook: str  # docs/runbooks/<runbook>.md
    check: str  # the doctor check that names the failure
    host: str  # where doctor reports it
    what: str  # one line for `--list`: what breaks, like a real host
    inject: Callable[[], str] = field(repr=False)  # does it; returns what it did
    alerts: tuple[str, ...] = ()  # the alerts it raises (docs/alerts.md)
    needs_runtime: bool = True
    # what hands do before the runbook's commands can work (power a host back on); None: nothing
    hands: Callable[[], str] | None = field(default=None, repr=False)


def _inventory() -> dict:
    return yaml.safe_load(paths.INVENTORY_PATH.read_text())


def _sh(host: str, cmd: str, timeout: float = 60) -> str:
    r = host_exec(host, ["sh", "-c", cmd], timeout=timeout)
    if r.returncode != 0:
        raise SparkctlError(f"drill: {host}: `{cmd}` exited {r.returncode}: {(r.stderr or r.stdout).strip()}")
    return r.stdout


def _head_url() -> str:
    inv = _inventory()
    head = next(n for n, h in inv["hosts"].items() if h["role"] == "head")
    return f"http://{inv['hosts'][head]['ssh']['address']}:{inv['runtime']['port']}"


def _rail(host: str, index: int):
    return HOSTS[host].fabric[index]


# --- injections ------------------------------------------------------------------------------


def _wrong_mtu() -> str:
    dev = _rail("worker", 0).device
    _sh("worker", f"ip link set {dev} mtu 1500")
    return f"worker: ip link set {dev} mtu 1500 (someone's netplan, or NVIDIA's playbook without the MTU)"


def _link_down() -> str:
    dev = _rail("worker", 1).device
    _sh("worker", f"ip link set {dev} down")
    return f"worker: ip link set {dev} down"


def _address_missing() -> str:
    nic = _rail("worker", 0)
    _sh("worker", f"ip addr del {nic.address} dev {nic.device}")
    return f"worker: ip addr del {nic.address} dev {nic.device}"


def _image_mismatch() -> str:
    # a hand-made image under the runtime's tag on one node: another image ID than the head's
    _sh("worker", f"docker commit -c 'LABEL drill=image-mismatch' sparkctl-worker {IMAGE} >/dev/null")
    return f"worker: docker commit sparkctl-worker {IMAGE} (a hand-built image under the same tag)"


def _runtime_down() -> str:
    _sh("head", "docker stop -t 5 sparkctl-head >/dev/null", timeout=60)
    return "head: docker stop sparkctl-head"


def _unreachable() -> str:
    dev = HOSTS["worker"].mgmt_device
    _sh("worker", f"ip link set {dev} down")
    return f"worker: management link {dev} down (a pulled cable, a dead switch port); the fabric still serves"


def _unreachable_back() -> str:
    dev = HOSTS["worker"].mgmt_device
    _sh("worker", f"ip link set {dev} up")
    return f"worker: cable back in ({dev} up)"


def _worker_devices() -> list[str]:
    h = HOSTS["worker"]
    return [h.mgmt_device] + [n.device for n in h.fabric]


def _worker_lost() -> str:
    # the worker drops off every network at once, as when it loses power: its rank stops answering
    # Ray's heartbeats, the head's engine dies, and nothing can reach the host
    devs = _worker_devices()
    _sh("worker", "; ".join(f"ip link set {d} down" for d in devs))
    _wait_unhealthy(timeout=90)
    return f"worker: every link down ({', '.join(devs)}): the host is gone, as on a power loss"


def _worker_back() -> str:
    devs = _worker_devices()
    _sh("worker", "; ".join(f"ip link set {d} up" for d in devs))
    return f"worker powered back on: {', '.join(devs)} up"


def _drafter_unreachable() -> str:
    _sh("offload", "docker kill sparkctl-drafter >/dev/null")
    _wait_unhealthy()
    return "offload: docker kill sparkctl-drafter (the head stops after 3 failed drafter health checks)"


def _engram_missing() -> str:
    target = _inventory()["engram"]["target"]
    _sh("offload", f"umount {target}")
    return f"offload: umount {target} (what a reboot does to a tmpfs)"


def _engine_crash() -> str:
    """Seed 002's crash: two requests past ~64K tokens of context scheduled in the same step."""
    url = _head_url()
    model = _served_model()
    prompt = " ".join(["context"] * 70000) + " Summarise the above."
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": 400,
                       "ignore_eos": True, "temperature": 0}).encode()  # fmt: skip

    def send() -> None:
        req = urllib.request.Request(f"{url}/v1/chat/completions", body, {"Content-Type": "application/json"})
        try:
            urllib.request.urlopen(req, timeout=120).read()
        except (urllib.error.URLError, OSError, TimeoutError):
            pass  # the engine dies under them: that is the point

    threads = [threading.Thread(target=send, daemon=True) for _ in range(2)]
    for t in threads:
        t.start()
    _wait_unhealthy(timeout=120)
    return "two concurrent 70K-token chat requests to the head (seed 002's device-side assert)"


def _marlin() -> str:
    """Someone starts the runtime from a copy of the inventory without runtime.moe_backend: vLLM's
    default (auto) picks Marlin on a GB10, silently at half the decode speed."""
    doc = _inventory()
    doc["runtime"].pop("moe_backend", None)
    path = _variant("marlin", doc)
    _up(path)
    return f"sparkctl up -i {path} (the inventory without runtime.moe_backend)"


def _cold_boot() -> str:
    """The compile cache is not persistent: someone ran the runtime with its cache root off the
    mounted volume, and the volume was emptied. Every start now compiles from scratch."""
    doc = _inventory()
    host_path = doc["caches"]["host_path"]
    for name in HOSTS:
        _sh(name, f"rm -rf {host_path}/* {host_path}/.[!.]* 2>/dev/null; true")
    doc["runtime"].setdefault("env", {})["VLLM_CACHE_ROOT"] = "/root/.cache/not-the-volume"
    path = _variant("cold-boot", doc)
    _up(path)
    return f"{host_path} emptied on every host, then sparkctl up -i {path} (VLLM_CACHE_ROOT off the volume)"


def _variant(name: str, doc: dict):
    drill_dir = paths.LAB_DIR / "drills"
    drill_dir.mkdir(parents=True, exist_ok=True)
    path = drill_dir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _up(path) -> None:
    r = subprocess.run([sys.executable, "-m", "sparkctl", "up", "-i", str(path), "--json"], capture_output=True, text=True,
                       timeout=600, env={**os.environ, "SPARKCTL_ONLY_NETWORKS": FENCE})  # fmt: skip
    if r.returncode != 0:
        raise SparkctlError(f"drill: `sparkctl up -i {path}` exited {r.returncode}: {r.stderr[-500:]}")


def _served_model() -> str:
    return _inventory()["runtime"]["served_model_name"]


def _wait_unhealthy(timeout: float = 60) -> None:
    """Until the head's /health is not 200 (the engine died): the drill is in effect."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{_head_url()}/health", timeout=2)
        except (urllib.error.URLError, OSError):
            return
        time.sleep(0.25)
    raise SparkctlError(f"drill: the head still answers /health 200 after {timeout:g} s")


DRILLS: dict[str, Drill] = {
    d.name: d
    for d in [
        Drill("wrong-mtu", "fabric.mtu", "fabric.mtu", "worker", "a rail drops to MTU 1500", _wrong_mtu),
        Drill("link-down", "fabric.link", "fabric.link", "worker", "a rail goes down", _link_down),
        Drill("address-missing", "fabric.address", "fabric.address", "worker", "a rail loses its fabric IP", _address_missing),
        Drill("image-mismatch", "images.same", "images.same", "worker", "a node has another image under the runtime's tag",
              _image_mismatch),
        Drill("runtime-down", "runtime-down", "runtime.containers", "head", "the head's container is stopped", _runtime_down,
              ("SparkctlEngineDown",)),
        Drill("engine-crash", "engine-crash", "runtime.engine", "head", "concurrent long-context requests crash the engine",
              _engine_crash, ("SparkctlEngineDown",)),
        Drill("worker-lost", "worker-lost", "runtime.engine", "head", "the worker drops off the network (power loss)",
              _worker_lost, ("SparkctlWorkerLost", "SparkctlEngineDown"), hands=_worker_back),
        Drill("drafter-unreachable", "runtime.drafter", "runtime.drafter", "offload", "the drafter on the offload host dies",
              _drafter_unreachable, ("SparkctlDrafterUnreachable", "SparkctlEngineDown")),
        Drill("marlin", "runtime.moe_backend", "runtime.moe_backend", "head",
              "the runtime restarted without its MoE backend: silent Marlin fallback", _marlin,
              ("SparkctlDecodeThroughputLow",)),
        Drill("cold-boot", "caches.compile", "caches.compile", "head",
              "every start is cold: the compile cache is off the persistent volume", _cold_boot),
        Drill("host-unreachable", "ssh.reachable", "ssh.reachable", "worker", "the worker's management link goes dark",
              _unreachable, ("SparkctlWorkerLost",), needs_runtime=False, hands=_unreachable_back),
        Drill("engram-missing", "engram.placed", "engram.placed", "offload", "the Engram tables vanish from RAM (a reboot)",
              _engram_missing, needs_runtime=False),
    ]  # fmt: skip
}


def get(name: str) -> Drill:
    if name not in DRILLS:
        raise InputError(f"unknown drill {name!r}", fix=f"drills: {', '.join(DRILLS)} (`sparkctl lab drill --list`)")
    return DRILLS[name]


def describe(d: Drill) -> dict:
    return {"name": d.name, "what": d.what, "runbook": f"docs/runbooks/{d.runbook}.md", "check": d.check, "host": d.host,
            "alerts": list(d.alerts), "needs_runtime": d.needs_runtime, "hands": d.hands is not None}  # fmt: skip


def hands(name: str) -> str:
    """The physical part of the repair (power a host back on), which no command of the runbook does."""
    d = get(name)
    return d.hands() if d.hands else ""


def run(name: str) -> dict:
    """Break the lab as the drill says; returns what was done and where to look."""
    d = get(name)
    if d.needs_runtime:
        try:
            urllib.request.urlopen(f"{_head_url()}/health", timeout=3)
        except (urllib.error.URLError, OSError):
            raise InputError(f"drill {name} needs the runtime serving", fix="`sparkctl up -i "
                             f"{paths.INVENTORY_PATH}` first") from None  # fmt: skip
    done = d.inject()
    return {**describe(d), "done": done}
