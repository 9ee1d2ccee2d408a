"""The launch of every host, rendered from the inventory alone (pure: no host is touched).

One container per node. With `distributed_executor_backend: ray`, as vLLM's
examples/online_serving/run_cluster.sh runs a Ray cluster:
- head:    `ray start --head --node-ip-address=<fabric ip> --port=6379`, then `vllm serve ...`
- worker:  `ray start --block --address=<head fabric ip>:6379 --node-ip-address=<own fabric ip>`
With `mp` (vLLM's multiprocessing executor, no Ray; engine/arg_utils.py, entrypoints/cli/serve.py):
- head:    `vllm serve ... --nnodes N --node-rank 0 --master-addr <head fabric ip> --master-port P`
- worker:  the same line with `--node-rank R --headless` (it hosts rank R, no API server)
  Start order under mp: vLLM 0.33 needs neither first. Rank 0 (head) hosts torch.distributed's
  TCPStore on master_addr:master_port and waits for every rank; a headless rank's store client
  retries connecting until the process-group timeout (parallel_state.py init_distributed_environment,
  `--distributed-timeout-seconds`, else torch's default). sparkctl still starts the worker first, as
  under Ray: the head's start (what `up` waits on and reload times warm/cold) then begins with its
  peer already waiting, and the head answering /health proves every rank joined (its engine cannot
  finish start-up without them). The head stops first (it drains); a headless rank never exits by
  itself when the head goes (vllm#32136), so the worker is always stopped with it (one restart group).
- drafter: (speculative drafter on the offload host, sPLIce shape) `vllm serve <drafter> ...`
- gateway: (on the head, `gateway.enabled`) `python3 -m sparkctl.gateway` in the runtime image on
  runtime.port, the engine behind it on gateway.engine_port; its code comes from sparkctl itself
  (launch/gateway_code.py), its own restart group, so an engine change never restarts it.
Every container: host networking and IPC, all GPUs, /dev/infiniband, memlock unlimited, the
NCCL/Gloo/UCX/Ray environment pinned to the fabric, the node's persistent cache volume at the
runtime's cache root, and labels carrying cluster, role and config hash. Each starts with an explicit
entrypoint (LAUNCHER), never the image's: vLLM's image has ENTRYPOINT `vllm serve`, NGC's and the
community Spark images NVIDIA's wrapper, the lab's none (docs/inventory.md "Images").

The same inventory always renders the same specs and the same config hash, so "is the running
runtime what the inventory says?" is a comparison of hashes.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import weakref
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field

from sparkctl.inventory.models import Inventory
from sparkctl.launch.endpoints import engine_api_key, engine_port, fabric_ip, head_fabric_address
from sparkctl.launch.names import LABEL_PREFIX, RAY_PORT

# vLLM has no flag for a drafter on another machine; the sPLIce overlay reads its address from env.
DRAFTER_URL_ENV = "SPLICE_DRAFTER_URL"

# NVIDIA's pass-through ENTRYPOINT of NGC images and of images built FROM them (eugr's
# spark-vllm-docker): it sources /opt/nvidia/entrypoint.d/*.sh, among them the CUDA forward
# compatibility set-up a Spark needs when its driver is older than the image's CUDA, then
# `exec "$@"`. vLLM's own image (FROM nvidia/cuda's base variant) has none.
NVIDIA_ENTRYPOINT = "/opt/nvidia/nvidia_entrypoint.sh"
# How every container starts its process, whatever ENTRYPOINT/CMD the image declares: docker's
# --entrypoint is LAUNCHER[0], the rest goes after the image, before the process's argv. The shell
# execs NVIDIA's wrapper ($0) with the argv when the image holds it, else the argv itself.
LAUNCHER = ["/bin/sh", "-c", 'if [ -x "$0" ]; then exec "$0" "$@"; fi; exec "$@"', NVIDIA_ENTRYPOINT]


# Every container sparkctl starts keeps at most 3 x 50 MB of log (docker's json-file rotation): a
# client that makes the gateway log per request, or an engine in a crash loop, cannot fill the disk.
LOG_ROTATION = {"max-size": "50m", "max-file": "3"}


class Mount(BaseModel):
    model_config = ConfigDict(frozen=True)
    source: str = Field(..., description="Path on the node (resolved on that node, never expanded elsewhere).")
    target: str
    read_only: bool = False


class ContainerSpec(BaseModel):
    """Everything `docker run` needs for one node's runtime container."""

    model_config = ConfigDict(frozen=True)
    host: str
    role: str = Field(..., description="head | worker | drafter")
    name: str
    image: str
    launcher: list[str] = Field(..., description="Starts `command` (LAUNCHER): docker's --entrypoint, then its arguments.")
    command: list[str] = Field(..., description="The process the container runs, as argv.")
    env: dict[str, str]
    mounts: list[Mount]
    devices: list[str]
    gpus: str = Field("all", description="all | none")
    network_mode: str = "host"
    ipc_mode: str = "host"
    ulimits: dict[str, int]
    stop_timeout: int
    labels: dict[str, str]
    memory_bytes: Optional[int] = Field(None, description="docker --memory: the container is killed past it (None: no limit).")
    log_options: dict[str, str] = Field(
        default_factory=lambda: dict(LOG_ROTATION), description="docker's json-file log driver options (--log-opt)."
    )

    @property
    def entrypoint(self) -> str:
        """docker's --entrypoint: one executable, replacing the image's ENTRYPOINT (and its CMD)."""
        return self.launcher[0]

    @property
    def arguments(self) -> list[str]:
        """What goes after the image in `docker run` (the container's Cmd): the launcher's arguments, then the process."""
        return [*self.launcher[1:], *self.command]

    def docker_run_argv(self) -> list[str]:
        """The equivalent `docker run` command as argv (what containers.create_args asks the engine for)."""
        parts = ["docker", "run", "-d", "--name", self.name, f"--network={self.network_mode}", f"--ipc={self.ipc_mode}"]
        parts += [f"--gpus={self.gpus}"] if self.gpus != "none" else []
        parts += [f"--device={d}" for d in self.devices]
        parts += [f"--ulimit={k}={v}:{v}" for k, v in self.ulimits.items()]
        parts += [f"--memory={self.memory_bytes}"] if self.memory_bytes else []
        parts += ["--log-driver=json-file", *(f"--log-opt={k}={v}" for k, v in self.log_options.items())]
        parts += [f"--stop-timeout={self.stop_timeout}"]
        for m in self.mounts:
            parts += ["-v", f"{m.source}:{m.target}" + (":ro" if m.read_only else "")]
        for k, v in self.env.items():
            parts += ["-e", f"{k}={v}"]
        for k, v in self.labels.items():
            parts += ["--label", f"{k}={v}"]
        parts += [f"--entrypoint={self.entrypoint}", self.image, *self.arguments]
        return parts

    def docker_run(self) -> str:
        """The equivalent `docker run` line, for an operator to read or copy (secrets redacted by the caller)."""
        return shlex.join(self.docker_run_argv())


def restart_group(role: str) -> str:
    """Containers that must restart together: the engine (head and workers: one Ray cluster, vLLM
    has no partial restart), the drafter (its own server on the offload host) or the gateway (the
    front door: restarted only when its own launch changes)."""
    return role if role in ("drafter", "gateway") else "engine"


class LaunchPlan(BaseModel):
    """Every host's runtime container, in start order (drafter, worker, head), the gateway (its own
    step starts it before them and stops it after them), and the config hashes: one for the whole
    cluster (what `up` records) and one per restart group (each container's label), so a change to
    the drafter alone restarts the drafter alone."""

    model_config = ConfigDict(frozen=True)
    cluster: str
    config_hash: str
    containers: list[ContainerSpec]
    gateway: Optional[ContainerSpec] = None
    group_hashes: dict[str, str] = Field(default_factory=dict)

    def for_host(self, host: str) -> list[ContainerSpec]:
        return [c for c in self.containers if c.host == host]

    def expected_hash(self, name: str) -> Optional[str]:
        """The config hash the container `name` must carry (its restart group's), None if not in the plan."""
        spec = next((c for c in self.all_containers if c.name == name), None)
        return self.group_hashes.get(restart_group(spec.role)) if spec else None

    @property
    def all_containers(self) -> list[ContainerSpec]:
        """The gateway first (it starts first), then the runtime in start order."""
        return ([self.gateway] if self.gateway else []) + list(self.containers)


def fabric_env(inv: Inventory, host: str, peer: str) -> dict[str, str]:
    """NCCL/Gloo/UCX/Ray variables pinning traffic to the fabric towards `peer`.

    NCCL_IB_HCA names every RDMA device of every rail to the peer (both ConnectX-7 twins:
    ~161 Gb/s instead of ~98 with one). NCCL_IB_GID_INDEX is deliberately not pinned: the
    RoCE v2 index has been seen to move from 3 to 4 (spark-fabric.md).
    """
    rails = [link for link in inv.hosts[host].fabric if link.peer == peer]
    if not rails:
        return {}
    first = rails[0]
    ip = str(first.address.ip)
    hcas = dict.fromkeys(d for r in rails for d in r.rdma)  # each device once, in rail order
    env = {
        "VLLM_HOST_IP": ip,
        "RAY_NODE_IP_ADDRESS": ip,
        "RAY_OVERRIDE_NODE_IP_ADDRESS": ip,
        "NCCL_SOCKET_IFNAME": first.device,
        "GLOO_SOCKET_IFNAME": first.device,
        "TP_SOCKET_IFNAME": first.device,
        "UCX_NET_DEVICES": first.device,
        "OMPI_MCA_btl_tcp_if_include": first.device,
        "NCCL_IB_DISABLE": "0",
        "NCCL_IGNORE_CPU_AFFINITY": "1",
        "RAY_memory_monitor_refresh_ms": "0",
    }
    if hcas:
        env["NCCL_IB_HCA"] = ",".join(hcas)
    return env


# The CUDA driver's JIT cache (PTX -> SASS; GB10 is sm_121, so every kernel shipped as PTX only is
# compiled at load) defaults to ~/.nv/ComputeCache inside the container, capped at 256 MiB: thrown
# away with the container. On the volume, with the driver's largest cap (4 GiB, CUDA Programming
# Guide, "CUDA Environment Variables"): one model's kernels fit, and the driver evicts the oldest.
CUDA_CACHE_DIR = "cuda_cache"
CUDA_CACHE_MAXSIZE = 4 << 30
TORCH_EXTENSIONS_DIR = "torch_extensions"  # torch.utils.cpp_extension builds (default ~/.cache/torch_extensions)


def cache_env(inv: Inventory) -> dict[str, str]:
    """Point every compile cache at the one persistent volume mounted at the cache root
    (vLLM 0.33 keeps inductor's and DeepGEMM's under VLLM_CACHE_ROOT itself)."""
    root = inv.caches.container_path
    return {
        "VLLM_CACHE_ROOT": root,
        "TRITON_CACHE_DIR": f"{root}/triton_cache",
        # FlashInfer JIT lands in $FLASHINFER_WORKSPACE_BASE/.cache/flashinfer/
        "FLASHINFER_WORKSPACE_BASE": root,
        "CUDA_CACHE_PATH": f"{root}/{CUDA_CACHE_DIR}",
        "CUDA_CACHE_MAXSIZE": str(CUDA_CACHE_MAXSIZE),
        "TORCH_EXTENSIONS_DIR": f"{root}/{TORCH_EXTENSIONS_DIR}",
    }


def weights_env(inv: Inventory) -> dict[str, str]:
    """sparkctl placed and verified the weights (`weights`): the engine never downloads a second copy
    (huggingface_hub and vLLM read HF_HUB_OFFLINE and refuse any hub call)."""
    return {"HF_HUB_OFFLINE": "1"} if inv.weights is not None else {}


def weights_version(inv: Inventory, role: str) -> Optional[dict]:
    """The checkpoint version a container loads, as the inventory names it (repo or folder, revision,
    file patterns), where sparkctl places it: part of its restart group's hash, since a new revision
    at the same runtime.model changes the files under the same mount and only a restart loads them."""
    w = inv.weights
    if w is None or role == "gateway":
        return None
    if role == "drafter":
        return w.drafter.model_dump(mode="json") if w.drafter else None
    return w.model_dump(mode="json", include={"repo", "revision", "directory", "include", "exclude"})


def vllm_serve_args(inv: Inventory) -> list[str]:
    """`vllm serve` flags for the main model: only flags the real vLLM accepts (vllm-interface.md)."""
    r = inv.runtime
    args = [
        "vllm",
        "serve",
        r.model,
        "--served-model-name",
        r.served_model_name,
        # behind a gateway, the head's loopback only (host networking): the gateway is the only way in
        "--host",
        "127.0.0.1" if inv.gateway.enabled else "0.0.0.0",
        "--port",
        str(engine_port(inv)),
        "--tensor-parallel-size",
        str(r.tensor_parallel_size),
        "--distributed-executor-backend",
        r.distributed_executor_backend,
        "--kv-cache-dtype",
        r.kv_cache_dtype,
        "--block-size",
        str(r.block_size),
        "--gpu-memory-utilization",
        str(r.gpu_memory_utilization),
        "--max-model-len",
        str(r.max_model_len),
        "--max-num-seqs",
        str(r.max_num_seqs),
        "--max-num-batched-tokens",
        str(r.max_num_batched_tokens),
    ]
    if r.moe_backend:
        args += ["--moe-backend", r.moe_backend]
    if r.speculative:
        spec = r.speculative.model_dump(
            include={"method", "num_speculative_tokens", "model", "draft_tensor_parallel_size"}, exclude_none=True
        )
        args += ["--speculative-config", json.dumps(spec, separators=(",", ":"), sort_keys=True)]
    args += ["--shutdown-timeout", str(r.shutdown_timeout)]
    return args


GATEWAY_STOP_GRACE = 10  # seconds the gateway may finish answering on SIGTERM (the engine is gone by then)


def gateway_node(inv: Inventory, code_hash: str) -> dict:
    """The gateway's launch: sparkctl's gateway code (content-addressed on the head, read-only in
    the container) run by the runtime image's python3, which ships aiohttp and prometheus_client."""
    from sparkctl.launch import gateway as gw

    g, r = inv.gateway, inv.runtime
    head = inv.hosts_with_role("head")[0]
    cmd = [
        "python3",
        "-m",
        "sparkctl.gateway",
        "--listen",
        f"0.0.0.0:{r.port}",
        "--upstream",
        f"http://127.0.0.1:{g.engine_port}",
        "--admin-socket",
        gw.ADMIN_SOCKET,
        "--hold-s",
        f"{g.hold_s:g}",
        "--hold-max-s",
        f"{g.hold_max_s:g}",
        "--hold-queue",
        str(g.hold_queue),
        "--upstream-connections",
        str(g.upstream_connections),
        "--shutdown-timeout-s",
        str(GATEWAY_STOP_GRACE),
        "--max-body-bytes",
        str(g.max_body_bytes),
        "--max-buffered-bytes",
        str(g.max_buffered_bytes),
        "--upstream-idle-s",
        f"{g.upstream_idle_s:g}",
    ]
    lc = g.long_context
    if lc:
        cmd += [
            "--long-context-tokens",
            str(lc.tokens),
            "--long-context-max-concurrent",
            str(lc.max_concurrent),
            "--long-context-queue",
            str(lc.queue),
            "--long-context-wait-s",
            f"{lc.wait_s:g}",
        ]
    env = {"PYTHONPATH": gw.CONTAINER_CODE, "PYTHONUNBUFFERED": "1"}
    mounts = [
        Mount(source=f"{gw.CODE_ROOT}/{code_hash}", target=gw.CONTAINER_CODE, read_only=True),
        Mount(source=gw.ADMIN_DIR, target=gw.ADMIN_DIR),
    ]
    if g.api_keys_file:  # the keys stay in their file on the head; the container reads it
        cmd += ["--api-keys-file", gw.CONTAINER_KEYS_FILE]
        mounts.append(Mount(source=g.api_keys_file, target=gw.CONTAINER_KEYS_FILE, read_only=True))
    engine_key = engine_api_key(inv)
    if engine_key:  # the engine asks for its key: the gateway sends it on (an environment value, never argv)
        from sparkctl.launch.gateway import ENGINE_KEY_ENV

        env[ENGINE_KEY_ENV] = engine_key
    return dict(
        host=head,
        role=gw.ROLE,
        image=r.image,
        launcher=LAUNCHER,
        command=cmd,
        env=env,
        mounts=mounts,
        ulimits={"nofile": g.open_files} if g.open_files else {},
        memory_bytes=g.memory_limit_bytes,
    )


def mp_serve_args(inv: Inventory, master_addr: str, node_rank: int) -> list[str]:
    """The `vllm serve` line of node `node_rank` under the mp executor: the main model's line plus
    vLLM's multi-node flags (config/parallel.py nnodes, node_rank, master_addr, master_port);
    every rank but 0 runs `--headless` (entrypoints/cli/serve.py run_headless: no API server)."""
    nnodes = 1 + len(inv.hosts_with_role("worker"))
    args = vllm_serve_args(inv)
    if nnodes > 1:
        args += [
            "--nnodes",
            str(nnodes),
            "--node-rank",
            str(node_rank),
            "--master-addr",
            master_addr,
            "--master-port",
            str(inv.runtime.master_port),
        ]
    return args + (["--headless"] if node_rank else [])


def _model_mounts(inv: Inventory, model_path: Optional[str]) -> list[Mount]:
    mounts = [Mount(source=inv.caches.host_path, target=inv.caches.container_path)]
    if model_path and model_path.startswith("/"):
        mounts.append(Mount(source=model_path, target=model_path, read_only=True))
    return mounts


def _hash(obj: object) -> str:
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=lambda o: o.model_dump())
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# The one cache of launches (RunContext.launch, doctor's Context.plan, the facts and steps all
# read render()): id(inventory) -> its plan, for as long as that inventory object lives. An
# inventory is frozen, so its launch never changes; the entry goes with the object (a
# weakref.finalize), so a long-lived process (status --watch, the test suite) keeps no inventory
# alive, and an id reused after the object died finds no stale plan. A copy is a new object.
_RENDERED: dict[int, LaunchPlan] = {}


def render(inv: Inventory) -> LaunchPlan:
    """The launch for this inventory (pure and frozen, so each inventory object renders once)."""
    key = id(inv)
    plan = _RENDERED.get(key)
    if plan is None:
        plan = _render(inv)  # an inventory render cannot handle raises here, every time: not cached
        if key not in _RENDERED:
            weakref.finalize(inv, _RENDERED.pop, key, None)
        plan = _RENDERED.setdefault(key, plan)  # two threads rendering at once agree on one plan
    return plan


def _render(inv: Inventory) -> LaunchPlan:
    """Render the launch of every host. Pure: same inventory, same plan, same hash."""
    r = inv.runtime
    head = inv.hosts_with_role("head")[0]
    workers = inv.hosts_with_role("worker")
    head_ip = head_fabric_address(inv)
    stop_timeout = r.shutdown_timeout + 15  # docker stop waits for vLLM's drain, then kills
    base_env = {**cache_env(inv), **weights_env(inv), **r.env}

    def node(host: str, role: str, image: str, command: list[str], env: dict, model_path: Optional[str]) -> dict:
        version = weights_version(inv, role)
        return dict(
            host=host,
            role=role,
            image=image,
            launcher=LAUNCHER,
            command=command,
            env={**base_env, **env},
            mounts=_model_mounts(inv, model_path),
            **({"weights": version} if version else {}),  # hashed, not a container setting
        )

    nodes: list[dict] = []  # in start order: drafter, workers, head
    spec = r.speculative
    drafter_env: dict[str, str] = {}
    if spec and spec.drafter_host:
        d = spec.drafter_host
        d_ip = fabric_ip(inv, d, head)
        drafter_env = {DRAFTER_URL_ENV: f"http://{d_ip}:{spec.drafter_port}"}
        gpu = inv.hosts[d].gpu
        draft_tp = spec.draft_tensor_parallel_size or (gpu.count if gpu else 1)
        draft_cmd = [
            "vllm",
            "serve",
            spec.model or r.model,
            "--served-model-name",
            "drafter",
            "--host",
            d_ip,
            "--port",
            str(spec.drafter_port),
            "--tensor-parallel-size",
            str(draft_tp),
            "--shutdown-timeout",
            str(r.shutdown_timeout),
        ]
        # the drafter spreads over the offload host's own GPUs (two RTX 3090 in sPLIce)
        gpus = {"CUDA_VISIBLE_DEVICES": ",".join(map(str, range(draft_tp)))}
        image = spec.drafter_image or r.image
        nodes.append(node(d, "drafter", image, draft_cmd, {**fabric_env(inv, d, head), **gpus}, spec.model))
    head_env = {**(fabric_env(inv, head, workers[0]) if workers else {}), **drafter_env}
    if r.distributed_executor_backend == "mp":
        # Every node runs the same `vllm serve` line (each builds the whole engine config); the head
        # hosts rank 0 and the rendezvous on its fabric address, each worker is headless. No Ray, so
        # no RAY_* (the drafter keeps its env: switching executors leaves it running).
        def no_ray(env: dict) -> dict:
            return {k: v for k, v in env.items() if not k.startswith("RAY_")}

        for rank, w in enumerate(workers, start=1):
            nodes.append(node(w, "worker", r.image, mp_serve_args(inv, head_ip, rank), no_ray(fabric_env(inv, w, head)), r.model))
        nodes.append(node(head, "head", r.image, mp_serve_args(inv, head_ip, 0), no_ray(head_env), r.model))
    else:
        for w in workers:
            w_ip = fabric_ip(inv, w, head)
            ray_cmd = ["ray", "start", "--block", f"--address={head_ip}:{RAY_PORT}", f"--node-ip-address={w_ip}"]
            nodes.append(node(w, "worker", r.image, ray_cmd, fabric_env(inv, w, head), r.model))
        head_cmd = f"ray start --head --node-ip-address={head_ip} --port={RAY_PORT} && exec " + shlex.join(vllm_serve_args(inv))
        nodes.append(node(head, "head", r.image, ["/bin/sh", "-c", head_cmd], head_env, r.model))

    gateway = None
    if inv.gateway.enabled:
        from sparkctl.launch.gateway_code import code_hash

        gateway = gateway_node(inv, code_hash())
    every = nodes + ([gateway] if gateway else [])
    config_hash = _hash(
        {"cluster": inv.cluster.name, "nodes": nodes, "stop_timeout": stop_timeout, **({"gateway": gateway} if gateway else {})}
    )
    group_hashes = {
        g: _hash(
            {
                "cluster": inv.cluster.name,
                "group": g,
                "stop_timeout": stop_timeout,
                "nodes": [n for n in every if restart_group(n["role"]) == g],
            }
        )
        for g in dict.fromkeys(restart_group(n["role"]) for n in every)
    }
    containers = [
        ContainerSpec(
            **{k: v for k, v in n.items() if k != "weights"},
            name=f"sparkctl-{n['role']}",
            devices=["/dev/infiniband"] if any(link.rdma for link in inv.hosts[n["host"]].fabric) else [],
            stop_timeout=stop_timeout,
            ulimits={"memlock": r.memlock},
            labels={
                f"{LABEL_PREFIX}.cluster": inv.cluster.name,
                f"{LABEL_PREFIX}.role": n["role"],
                f"{LABEL_PREFIX}.config-hash": group_hashes[restart_group(n["role"])],
            },
        )
        for n in nodes
    ]
    gateway_spec = None
    if gateway:
        gateway_spec = ContainerSpec(
            **gateway,
            name=f"sparkctl-{gateway['role']}",
            devices=[],
            gpus="none",
            stop_timeout=GATEWAY_STOP_GRACE + 5,
            labels={
                f"{LABEL_PREFIX}.cluster": inv.cluster.name,
                f"{LABEL_PREFIX}.role": gateway["role"],
                f"{LABEL_PREFIX}.config-hash": group_hashes["gateway"],
            },
        )
    return LaunchPlan(
        cluster=inv.cluster.name, config_hash=config_hash, containers=containers, gateway=gateway_spec, group_hashes=group_hashes
    )
