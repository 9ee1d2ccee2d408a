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

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import httpx
import yaml

from sparkctl import httpclient
from sparkctl.errors import InputError, SparkctlError
from sparkctl.launch.gateway import CONTAINER as GATEWAY
from sparkctl.state import LOCK
from sparkctl_lab import paths
from sparkctl_lab.hostexec import host_exec
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


def _head() -> tuple[str, int]:
    """The head's address and the runtime's port, from the lab inventory."""
    inv = _inventory()
    head = next(h for h in inv["hosts"].values() if h["role"] == "head")
    return head["ssh"]["address"], inv["runtime"]["port"]


def _head_url() -> str:
    return "http://{}:{}".format(*_head())


def _serving(timeout: float) -> bool:
    """Does the head's /health answer 200?"""
    try:
        return httpclient.get(f"{_head_url()}/health", timeout=timeout, trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False


def _chat(url: str, model: str, prompt: str, max_tokens: int, timeout: float, **extra) -> None:
    """One chat request, as a client sends it (httpx.HTTPError when it is not answered)."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "ignore_eos": True,
        **extra,
    }
    # a client of its own per request, TLS context included (httpx.post): the drills' loads were
    # calibrated at this pace; with one client per user the kv-cache-full drill took 120-136 s, not ~66
    httpx.post(f"{url}/v1/chat/completions", json=body, timeout=timeout, trust_env=False).raise_for_status()


def _until(done: Callable[[], bool], timeout: float, interval: float) -> bool:
    """Poll `done` until it holds (True) or `timeout` s have passed (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if done():
            return True
        time.sleep(interval)
    return False


def _sparkctl(*args: str, timeout: float) -> subprocess.CompletedProcess:
    """A sparkctl run as someone at the keyboard would make it, fenced to loopback and the lab."""
    return subprocess.run(
        [sys.executable, "-m", "sparkctl", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "SPARKCTL_ONLY_NETWORKS": FENCE},
    )


# --- injections ------------------------------------------------------------------------------


def _wrong_mtu() -> str:
    dev = HOSTS["worker"].fabric[0].device
    _sh("worker", f"ip link set {dev} mtu 1500")
    return f"worker: ip link set {dev} mtu 1500 (someone's netplan, or NVIDIA's playbook without the MTU)"


def _link_down() -> str:
    dev = HOSTS["worker"].fabric[1].device
    _sh("worker", f"ip link set {dev} down")
    return f"worker: ip link set {dev} down"


def _address_missing() -> str:
    nic = HOSTS["worker"].fabric[0]
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


WORKER_DEVICES = [n.device for n in HOSTS["worker"].nics]


def _worker_lost() -> str:
    # the worker drops off every network at once, as when it loses power: its rank stops answering
    # Ray's heartbeats, the head's engine dies, and nothing can reach the host
    _sh("worker", "; ".join(f"ip link set {d} down" for d in WORKER_DEVICES))
    _wait_unhealthy(timeout=90)
    return f"worker: every link down ({', '.join(WORKER_DEVICES)}): the host is gone, as on a power loss"


def _worker_back() -> str:
    _sh("worker", "; ".join(f"ip link set {d} up" for d in WORKER_DEVICES))
    return f"worker powered back on: {', '.join(WORKER_DEVICES)} up"


def _drafter_unreachable() -> str:
    _sh("offload", "docker kill sparkctl-drafter >/dev/null")
    _wait_unhealthy()
    return "offload: docker kill sparkctl-drafter (the head stops after 3 failed drafter health checks)"


def _engram_missing() -> str:
    target = _inventory()["engram"]["target"]
    _sh("offload", f"umount {target}")
    return f"offload: umount {target} (what a reboot does to a tmpfs)"


def _weights_corrupt() -> str:
    model = _inventory()["runtime"]["model"]
    shard = _sh("worker", f"cd {model} && ls *.safetensors | sort | head -n 1").strip()
    # one byte in the shard's data, its size kept: a disk error, or a hand-edit (ctime moves)
    _sh("worker", f"printf '\\377' | dd of={model}/{shard} bs=1 seek=100000 conv=notrunc status=none")
    return f"worker: one byte of {model}/{shard} overwritten (size kept)"


def _engine_crash() -> str:
    """Seed 002's crash: two requests past ~64K tokens of context scheduled in the same step."""
    url, model = _head_url(), _served_model()
    prompt = " ".join(["context"] * 70000) + " Summarise the above."

    def send() -> None:
        with contextlib.suppress(httpx.HTTPError):  # the engine dies under them: that is the point
            _chat(url, model, prompt, 400, timeout=120, temperature=0)

    threads = [threading.Thread(target=send, daemon=True) for _ in range(2)]
    for t in threads:
        t.start()
    _wait_unhealthy(timeout=120)
    return "two concurrent 70K-token chat requests to the head (seed 002's device-side assert)"


def _engine_stalled() -> str:
    """The collective hangs (NCCL over RoCE, as people report): the engine stops stepping with two
    streams running while its /health stays 200. The simulator's `hang`, switched on inside the
    head's container (the lab inventory's SIM_FAULTS_FILE): a restart, which makes a new container,
    starts without it, as a full restart clears the wedge."""
    from sparkctl.facts.endpoint import fetch
    from sparkctl.facts.metrics import RUNNING

    url = _head_url()
    # two clients of answers long enough to be running when the hang begins (6000 tokens ended
    # first) and short of the 64K where two sequences are the engine-crash drill's (100K crashed
    # it), in a process of their own: they stay connected after this drill's process ends
    pid = start_load("stalled", "code", clients=2, context=200, max_tokens=30_000)
    if not _until(lambda: fetch(*_head()).metrics.total(RUNNING) == 2, 30, 0.05):
        raise SparkctlError("drill: the two streams never ran together on the head")
    faults = _inventory()["runtime"]["env"]["SIM_FAULTS_FILE"]
    _sh("head", f"docker exec sparkctl-head sh -c 'echo hang > {faults}'")

    def applied() -> bool:
        state = httpclient.get(f"{url}/sim/state", timeout=2, trust_env=False).json()
        return "hang" in state.get("faults_applied", {})

    if not _until(applied, 30, 0.05):
        raise SparkctlError("drill: the head's simulator never applied the hang")
    return (
        f"two clients on the head (load pid {pid}), then: docker exec sparkctl-head sh -c 'echo hang > {faults}' "
        "(a wedged collective)"
    )


def _gateway_holding() -> str:
    """The hold a change left behind: a `sparkctl restart` told the gateway to hold, then died
    (SIGKILL, a control host that lost its link) and its lock was broken since. The drill holds
    through the gateway's admin interface on the head, as that restart did; nothing releases it
    until gateway.hold_max_s."""
    _sh("head", f"docker exec {GATEWAY} python3 -m sparkctl.gateway.ctl hold --reason restart --expected-s 5 >/dev/null")
    return f"head: docker exec {GATEWAY} python3 -m sparkctl.gateway.ctl hold --reason restart (a restart that died after it)"


def _gateway_down() -> str:
    _sh("head", f"docker stop -t 5 {GATEWAY} >/dev/null", timeout=60)
    return f"head: docker stop {GATEWAY} (clients on the public port get connection refused)"


def _zero_token_streams() -> str:
    """An IDE plugin in single-line mode streams with `stop: ["\\n"]` (what single-line code
    completion sends) to the chat route: the model's code answers begin with a newline, so every
    stream ends at once, finish_reason stop, with no token. HTTP 200 and /health 200 throughout."""
    pid = start_load("plugin", "code", clients=2, context=0, max_tokens=64, stream_stop="\n")
    _wait_zero_tokens(timeout=30)
    return f'an IDE plugin streaming code answers with stop ["\\n"], 2 clients back to back (load pid {pid})'


def _plugin_fixed() -> str:
    """The plugin's owner drops the stop string (a person asks them): its answers carry tokens again."""
    return "; ".join(stop_load("plugin")) or "no plugin load ran"


def _wait_zero_tokens(timeout: float) -> None:
    """Until the gateway has counted a stream that ended without a token."""
    from sparkctl.facts.gateway import fetch

    def seen() -> bool:
        page = fetch(*_head()).page
        return page is not None and sum(page.zero_token_streams.values()) > 0

    if not _until(seen, timeout, 0.5):
        raise SparkctlError(f"drill: the gateway counted no zero-token stream within {timeout:g} s")


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


def _stuck_lock() -> str:
    """A `sparkctl up --force` (a restart) killed with SIGKILL while it holds the cluster lock (the OOM
    killer, `kill -9`, a control host that rebooted): nothing released the lock, its pid no longer
    runs, and the restart may have stopped half-way."""
    p = subprocess.Popen([sys.executable, "-m", "sparkctl", "up", "--force", "-i", str(paths.INVENTORY_PATH)], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True, env={**os.environ, "SPARKCTL_ONLY_NETWORKS": FENCE})  # fmt: skip
    deadline = time.monotonic() + 120
    try:
        while host_exec("head", ["test", "-e", LOCK]).returncode != 0:
            if p.poll() is not None or time.monotonic() > deadline:
                raise SparkctlError(f"drill: `sparkctl up` ended (exit {p.returncode}) before it held the cluster lock")
            time.sleep(0.05)
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(timeout=30)
    return f"sparkctl up --force (pid {p.pid}) killed with SIGKILL while it held the cluster lock"


def _reload_rolled_back() -> str:
    """On-call lowers gpu_memory_utilization to make room for another job and reloads: the KV pool
    left is smaller than max_model_len, vLLM refuses to start, the health gate never passes and
    sparkctl goes back to the last good config by itself."""
    doc = _inventory()
    doc["runtime"]["gpu_memory_utilization"] = 0.65
    path = _variant("reload-rolled-back", doc)
    r = _sparkctl(
        "reload", "-i", str(paths.INVENTORY_PATH), "--config", str(path), "--yes", "--json", "--deadline", "120", timeout=600
    )
    try:
        outcome = json.loads(r.stdout).get("outcome")
    except ValueError:
        outcome = None
    if outcome != "rolled back":
        raise SparkctlError(f"drill: the reload ended {outcome or 'without a report'} (exit {r.returncode}), not rolled back: "
                            f"{r.stderr[-800:]}")  # fmt: skip
    return f"sparkctl reload --config {path} (gpu_memory_utilization 0.65): rolled back"


def _kv_cache_full() -> str:
    """Someone raised max_num_seqs to 48 to serve more users at once: 48 contexts of ~63K tokens no
    longer fit the KV pool, so vLLM preempts the newest request and recomputes it later, again and
    again. (Contexts stay under 64K: two longer ones in a step are seed 002's crash, another drill.)"""
    doc = _inventory()
    doc["runtime"]["max_num_seqs"] = 48
    # the drill's own: its 48 users' 3000-token answers end in no drain the lab allows, so the fix's
    # restart would wait the lab's whole 10 s to cut them; 2 s cuts them as surely
    doc["runtime"]["shutdown_timeout"] = 2
    path = _variant("kv-cache-full", doc)
    _up(path)
    pid = start_load("users", "code", clients=48, context=60_000, max_tokens=3000)
    _wait_kv_full(timeout=120)
    return f"sparkctl up -i {path} (max_num_seqs 48), then 48 users with 60K-token prompts (load pid {pid})"


def _wait_kv_full(timeout: float) -> None:
    """Until the head's /metrics shows the KV pool nearly full (the clients' contexts have grown)."""
    from sparkctl.facts.endpoint import fetch
    from sparkctl.facts.metrics import KV_USAGE

    def full() -> bool:
        kv = fetch(*_head()).metrics.gauge(KV_USAGE)
        return kv is not None and kv.max >= 0.95

    if not _until(full, timeout, 0.25):  # a /metrics page a quarter second: the drill is in effect the moment it shows
        raise SparkctlError(f"drill: the KV pool did not fill within {timeout:g} s")


def _spec_acceptance_low() -> str:
    """An agent job with a 250K-token history (prose) takes over the cluster: the drafter's
    acceptance decays with context (seed 002), so vLLM's logged intervals show the mean acceptance
    length below the expected level. (One such context at a time: two past 64K in a step are seed
    002's crash, another drill.)"""
    started = time.time()
    batch = start_load("batch", "prose", clients=1, context=250_000, max_tokens=2000)
    _wait_log("SpecDecoding metrics", after=started + 1, timeout=60)
    return f"a client with 250K-token prose contexts, back to back (load pid {batch})"


def _batch_moved() -> str:
    """The long-context job is moved to its own window (a person asks its owner); the chat users'
    short requests are what the cluster serves. Returns once vLLM's log has an interval of them."""
    stopped = stop_load("batch")
    moved = time.time()
    if not (LOAD_DIR / "load-chat.pid").exists():
        start_load("chat", "prose", clients=2, context=0, max_tokens=64)
    # an interval of vLLM's stats (VLLM_LOG_STATS_INTERVAL, default 10 s) wholly after the move
    interval = float(_inventory()["runtime"].get("env", {}).get("VLLM_LOG_STATS_INTERVAL", 10))
    _wait_log("SpecDecoding metrics", after=moved + interval + 1, timeout=60)
    return "; ".join(stopped) or "no batch job ran"


def _long_ttft() -> str:
    """Seed 000's head-of-line blocking: a batch job sends 250K-token cold prompts, back to back,
    into a cluster serving chat users; each prefill takes the step's whole token budget, and the
    chat users' short requests wait behind it for their first token. (One long context at a time:
    two past 64K in a step are seed 002's crash, another drill.)"""
    if not (LOAD_DIR / "load-chat.pid").exists():
        start_load("chat", "prose", clients=2, context=0, max_tokens=64)
    batch = start_load("batch", "prose", clients=1, context=250_000, max_tokens=16)
    _wait_ttft(above=True, timeout=90)
    return f"a batch client with 250K-token cold prompts, back to back, beside 2 chat users (load pid {batch})"


def _long_prompts_moved() -> str:
    """The batch job is moved to its own window (a person asks its owner); the chat users stay.
    Returns once their first tokens are fast again (the simulator finishes a prompt already
    admitted, as vLLM would for a client still connected)."""
    stopped = stop_load("batch")
    _wait_ttft(above=False, timeout=120)
    return "; ".join(stopped) or "no batch job ran"


def _wait_ttft(above: bool, timeout: float, window: float = 2.0) -> None:
    """Until the p99 time to first token over `window` s (two /metrics pages, as doctor reads
    them) is above (or within) the inventory's alerts.ttft_p99_seconds."""
    from sparkctl.facts.endpoint import fetch, read_again
    from sparkctl.facts.metrics import TTFT, quantile_between

    want = float((_inventory().get("alerts") or {}).get("ttft_p99_seconds", 30.0))

    def reached() -> bool:
        ep = fetch(*_head())
        time.sleep(window)
        read_again(ep)
        if ep.earlier is None:
            return False
        p99, n = quantile_between(ep.earlier, ep.metrics, TTFT, 0.99)
        return bool(n) and (p99 > want) == above

    if not _until(reached, timeout, 0):
        raise SparkctlError(
            f"drill: p99 time to first token did not go {'above' if above else 'back within'} {want:g} s within {timeout:g} s"
        )


def _wait_log(text: str, after: float, timeout: float) -> None:
    """Until the head container's log has a line with `text` written after `after` (epoch s)."""
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(after))

    def logged() -> bool:
        r = host_exec("head", ["sh", "-c", f"docker logs --since {since} sparkctl-head 2>&1 | grep -c '{text}'"])
        return r.stdout.strip().isdigit() and int(r.stdout.strip()) > 0

    if not _until(logged, timeout, 1):
        raise SparkctlError(f"drill: no `{text}` line in the head's log within {timeout:g} s")


# --- a background load, as clients would send it ----------------------------------------------

LOAD_DIR = paths.LAB_DIR / "drills"
LOAD_LIFETIME = 900.0  # seconds: a forgotten load ends by itself
ASK = {"code": "Write a python function that merges two sorted lists.", "prose": "Summarise the story above in a paragraph."}


def start_load(name: str, kind: str, clients: int, context: int, max_tokens: int, stream_stop: str = "") -> int:
    """Clients sending requests to the head until `stop_load()` (or LOAD_LIFETIME): a process of its
    own, so the traffic outlives the `sparkctl lab drill` that started it. Each request is a new
    (cold) prompt of `context` tokens, then ASK[kind]. With `stream_stop` each request streams,
    with that stop string (JSON-escaped on the command line)."""
    stop_load(name)
    LOAD_DIR.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "sparkctl_lab.drills", "load", kind, str(clients), str(context), str(max_tokens)]
    if stream_stop:
        argv.append(json.dumps(stream_stop))
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    (LOAD_DIR / f"load-{name}.pid").write_text(str(p.pid))
    return p.pid


def stop_load(name: str | None = None) -> list[str]:
    """End the drill's background load `name` (every one when None)."""
    stopped = []
    for pidfile in sorted(LOAD_DIR.glob(f"load-{name or '*'}.pid")) if LOAD_DIR.exists() else []:
        try:
            pid = int(pidfile.read_text())
        except (OSError, ValueError):
            pid = 0
        pidfile.unlink(missing_ok=True)
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"sparkctl_lab.drills" not in f.read():
                    continue  # the pid was reused: not ours
            os.killpg(pid, signal.SIGTERM)
        except (OSError, ProcessLookupError):
            continue
        stopped.append(f"stopped the drill's load {pidfile.stem.removeprefix('load-')} (pid {pid})")
    if stopped and not list(LOAD_DIR.glob("load-*.pid")):  # no client left: the head's queue must empty
        _wait_drained(timeout=180)
    return stopped


def _wait_drained(timeout: float) -> None:
    """Until the head has no request left: a stopped load's requests are aborted as vLLM does
    (with_cancellation), which the simulator notices within half a second of the client going."""
    from sparkctl.facts.endpoint import fetch
    from sparkctl.facts.metrics import RUNNING, WAITING

    def drained() -> bool:
        try:
            m = fetch(*_head()).metrics
        except SparkctlError:
            return True  # not serving at all
        return not m or ((m.total(RUNNING) or 0) + (m.total(WAITING) or 0)) == 0

    _until(drained, timeout, 0.25)


def _load(kind: str, clients: int, context: int, max_tokens: int, stream_stop: str = "") -> None:
    """The load process: `clients` threads, back to back (streaming with `stream_stop` when set)."""
    import uuid

    url, model = _head_url(), _served_model()
    end = time.monotonic() + LOAD_LIFETIME
    words = " ".join(f"ctx{i % 997}" for i in range(context))

    def stream(prompt: str) -> None:
        body = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
                "stream": True, "stop": [stream_stop], "temperature": 0}  # fmt: skip
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=300, trust_env=False) as r:
            r.raise_for_status()
            r.read()

    def client() -> None:
        while time.monotonic() < end:
            prompt = f"req{uuid.uuid4().hex} {words} {ASK[kind]}" if context else ASK[kind]
            try:
                if stream_stop:
                    stream(prompt)
                else:
                    _chat(url, model, prompt, max_tokens, timeout=300)
            except httpx.HTTPError:
                time.sleep(0.5)  # restarting: try again

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
        time.sleep(0.05)  # users arrive one after another, not in one burst (48 in 2.4 s; 0.2 s made it 9.6 s)
    for t in threads:
        t.join()


def _variant(name: str, doc: dict):
    drill_dir = paths.LAB_DIR / "drills"
    drill_dir.mkdir(parents=True, exist_ok=True)
    path = drill_dir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _up(path) -> None:
    r = _sparkctl("up", "-i", str(path), "--json", timeout=600)
    if r.returncode != 0:
        raise SparkctlError(f"drill: `sparkctl up -i {path}` exited {r.returncode}: {r.stderr[-500:]}")


def _served_model() -> str:
    return _inventory()["runtime"]["served_model_name"]


def _wait_unhealthy(timeout: float = 60) -> None:
    """Until the head's /health is not 200 (the engine died): the drill is in effect."""
    if not _until(lambda: not _serving(timeout=2), timeout, 0.25):
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
        Drill("engine-stalled", "engine-stalled", "runtime.progress", "head",
              "the collective hangs with two streams running: no token, /health still 200", _engine_stalled,
              ("SparkctlEngineStalled",)),
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
        Drill("weights-corrupt", "weights.verified", "weights.verified", "worker",
              "a byte of one model shard on the worker changes (a disk error)", _weights_corrupt, needs_runtime=False),
        Drill("stuck-lock", "state.lock", "state.lock", "head", "a sparkctl up --force killed with SIGKILL leaves the cluster lock behind",
              _stuck_lock),
        Drill("reload-rolled-back", "state.last_reload", "state.last_reload", "head",
              "a reload with a KV pool too small for max_model_len never serves: sparkctl rolls back", _reload_rolled_back),
        Drill("kv-cache-full", "kv-cache-full", "runtime.metrics", "head",
              "max_num_seqs raised to 48: 48 users' 62K-token contexts overflow the KV pool", _kv_cache_full,
              ("SparkctlPreemptionsRising",)),
        Drill("long-ttft", "long-ttft", "runtime.ttft", "head",
              "a batch job's 250K-token cold prompts hold the token budget: chat users wait for their first token",
              _long_ttft, ("SparkctlTTFTHigh",), hands=_long_prompts_moved),
        Drill("gateway-holding", "gateway-holding", "gateway.holding", "head",
              "a hold a dead restart left behind: the front door holds every request, then 503", _gateway_holding,
              ("SparkctlGatewayHolding",)),
        Drill("gateway-down", "gateway-down", "gateway.answers", "head",
              "the front door's container stops: clients get connection refused, the engine is fine", _gateway_down,
              ("SparkctlGatewayDown",)),
        Drill("zero-token-streams", "gateway-zero-tokens", "gateway.zero_tokens", "head",
              'an IDE plugin streams with stop ["\\n"]: every code answer ends empty ("HTTP up, zero tokens")',
              _zero_token_streams, ("SparkctlZeroTokenStreams",), hands=_plugin_fixed),
        Drill("spec-acceptance-low", "spec-acceptance-low", "runtime.spec_acceptance", "head",
              "an agent job with 250K-token contexts: speculative acceptance decays with context", _spec_acceptance_low,
              ("SparkctlSpecAcceptanceLow",), hands=_batch_moved),
    ]
}  # fmt: skip


def snapshot() -> dict:
    """What a repaired drill must leave as it found it, per host: each link's state, MTU and IPv4
    addresses, each sparkctl container's state, image and config hash (not its id: a repair may
    restart the runtime), the runtime tag's image, the cluster lock and reload journal, the
    Engram mount; and the drills' own background loads. Compare two with `changes()`."""
    from concurrent.futures import ThreadPoolExecutor

    target = _inventory()["engram"]["target"]
    script = (
        "ip -j addr show; echo '#'; docker ps -aq --filter label=io.sparkctl.cluster | xargs -r docker inspect -f "
        "'{{.Name}} {{.State.Status}} {{.Image}} {{index .Config.Labels \"io.sparkctl.config-hash\"}}'; echo '#'; "
        f"docker image inspect -f '{{{{.Id}}}}' {IMAGE} 2>/dev/null; echo '#'; "
        f"ls /var/lib/sparkctl/state/lock /var/lib/sparkctl/state/journal.json 2>/dev/null; findmnt -n -o FSTYPE,TARGET {target}; true"
    )

    def host(name: str) -> dict:
        links, containers, image, rest = _sh(name, script).split("#\n", 3)
        return {
            "links": {
                i["ifname"]: (
                    i.get("operstate"),
                    i.get("mtu"),
                    sorted(f"{a['local']}/{a['prefixlen']}" for a in i.get("addr_info", []) if a.get("family") == "inet"),
                )
                for i in json.loads(links)
                if i["ifname"] != "lo"
            },
            "containers": sorted(containers.split("\n")[:-1]),
            "image": image.strip(),
            "lock, journal, engram mount": rest.split(),
        }

    with ThreadPoolExecutor(len(HOSTS)) as pool:
        out = dict(zip(HOSTS, pool.map(host, HOSTS)))
    out["drill loads"] = sorted(p.name for p in LOAD_DIR.glob("load-*.pid")) if LOAD_DIR.exists() else []
    return out


def changes(before: dict, after: dict, where: str = "") -> list[str]:
    """What differs between two snapshot()s, one line per leaf, e.g. `worker links enp1s0f1np1:
    ('UP', 9000, [...]) -> ('UP', 1500, [...])` (nothing: the lab is as it was)."""
    out = []
    for key in sorted(set(before) | set(after)):
        b, a = before.get(key), after.get(key)
        if isinstance(b, dict) and isinstance(a, dict):
            out += changes(b, a, f"{where}{key} ")
        elif b != a:
            out.append(f"{where}{key}: {b!r} -> {a!r}")
    return out


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
    if d.needs_runtime and not _serving(timeout=3):
        raise InputError(f"drill {name} needs the runtime serving", fix=f"`sparkctl up -i {paths.INVENTORY_PATH}` first")
    done = d.inject()
    return {**describe(d), "done": done}


if __name__ == "__main__":  # the background load: python -m sparkctl_lab.drills load KIND CLIENTS CONTEXT MAX_TOKENS
    if sys.argv[1:2] == ["load"]:
        _load(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), json.loads(sys.argv[6]) if sys.argv[6:] else "")
