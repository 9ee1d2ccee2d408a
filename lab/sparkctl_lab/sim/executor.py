"""The executor around the engine: where each tensor-parallel rank runs and how the driver reaches it.

Ray (`--distributed-executor-backend ray`): join the cluster `ray start` made, wait for a placement
group of one GPU per rank (rank 0 on this node), as vllm/v1/executor/ray_utils.py does. mp
multi-node (`--nnodes N`): host the rendezvous and wait for the `--headless` nodes. Single node:
every rank is local. A rank's compile caches are read and written on the node that hosts it
(compile_cache.rank_call, via the node agent for remote ranks). A lost rank node or GCS is a
fatal cluster event (`Runtime.set_fatal`).
"""

from __future__ import annotations

import os
import time
from collections import Counter

from . import cluster, compile_cache, vlog
from .ray_cli import find_address, temp_dir
from .serve_args import StartupError

PG_WAIT_TIMEOUT = 1800  # vllm/v1/executor/ray_utils.py


def ray_log(level: str, where: str, msg: str) -> None:
    """A line of Ray's own logger (ray_constants.LOGGER_FORMAT): `%(asctime)s\\t%(levelname)s %(filename)s:%(lineno)s -- %(message)s`."""
    now = time.time()
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)) + f",{int(now * 1000) % 1000:03d}"
    vlog.plain(f"{stamp}\t{level} {where} -- {msg}")


def _local_rank(rank: int, ip: str) -> dict:
    """A rank in a process of this node (vLLM's workers are its children: a neighbouring pid)."""
    return {"pid": os.getpid() + 10 + rank, "ip": ip}


class _RemoteLogger(vlog.Logger):
    """A headless node's rank under mp: the line is printed by that node's worker process (mp_worker.py)."""

    def __init__(self, tag: str, driver, node_id: str):
        super().__init__(tag)
        self.driver, self.node_id = driver, node_id

    def _emit(self, level: str, where: str, msg: str) -> None:
        self._send({"level": level, "where": where, "msg": msg})

    def raw(self, text: str) -> None:
        self._send({"raw": text})

    def _send(self, args: dict) -> None:
        try:
            self.driver.call(self.node_id, "log", args, timeout=10)
        except (ConnectionError, OSError, TimeoutError):
            pass  # the node is gone: its lines went with it


class Executor:
    """Mixed into Runtime: the rank placement and the per-rank loggers and cache calls."""

    _head_ip: str | None = None
    peer_lost: dict | None = None  # mp: a headless node's rank that went away while serving

    def worker_log(self, rank: int) -> vlog.Logger:
        """Rank r's process logs as `Worker_TP<r>` (multiproc_executor.py); under Ray its lines reach the
        driver behind Ray's actor prefix `(RayWorkerProc pid=N[, ip=X])` (ray/_private/worker.py)."""
        node = self.rank_nodes.get(rank) or _local_rank(rank, "")
        pid = node["pid"]
        tag = f"Worker_TP{rank} pid={pid}"
        if self.backend == "ray":
            return vlog.Logger(tag, f"RayWorkerProc pid={pid}" + (f", ip={node['ip']}" if node.get("remote") else ""))
        if node.get("remote"):  # mp: a headless node's rank logs on that node (nothing forwards it here)
            return _RemoteLogger(tag, self.driver, node["node_id"])
        return vlog.Logger(tag)

    def setup_executor(self) -> None:
        cfg = self.cfg
        world = cfg.tensor_parallel_size * cfg.pipeline_parallel_size
        self.sleep(self.phases.api_init)
        log = self.core_log
        log.info(
            "core.py:139",
            f"Initializing a V1 LLM engine (v{self.knobs.vllm_version}) with config: model='{cfg.model}', "
            f"speculative_config={cfg.speculative}, tensor_parallel_size={cfg.tensor_parallel_size}, "
            f"pipeline_parallel_size={cfg.pipeline_parallel_size}, kv_cache_dtype={cfg.kv_cache_dtype}, "
            f"served_model_name={cfg.served_model_name}, enable_prefix_caching={cfg.enable_prefix_caching}, "
            f"enable_chunked_prefill=True",
        )
        self.sleep(self.phases.engine_start)
        if self.backend == "ray":
            self._setup_ray(world)
        elif cfg.nnodes > 1:
            self._setup_mp_multinode(world)
        else:
            self.rank_nodes = {r: _local_rank(r, "127.0.0.1") for r in range(world)}
        self.sleep(self.phases.workers_init)
        for r in range(world):
            if self.backend != "ray" and self.rank_nodes.get(r, {}).get("remote"):
                continue  # a headless node's rank logged its own line there (mp_worker.py)
            self.worker_log(r).info(
                "parallel_state.py:1929",
                f"world_size={world} rank={r} local_rank={0 if self.backend == 'ray' else r} "
                f"distributed_init_method=tcp://{self._driver_ip()}:{cfg.master_port} backend=nccl",
            )

    def _driver_ip(self) -> str:
        return self.env.get("VLLM_HOST_IP") or self._head_ip or "127.0.0.1"

    def _on_cluster_event(self, event: dict) -> None:
        if event.get("op") == "gcs_lost":
            self.set_fatal("gcs_lost", event)
            return
        node_id = event.get("node_id")
        for rank, node in self.rank_nodes.items():
            if node.get("node_id") == node_id:
                lost = {"rank": rank, **node, "why": event.get("why", "")}
                if self.backend == "ray" or not self.ready:
                    self.set_fatal("rank_lost" if self.backend == "ray" else "peer_lost", lost)
                else:
                    # mp: the head's worker monitor watches its own processes only (multiproc_executor.py
                    # start_worker_monitor); a lost remote rank is found by the next collective, i.e. the
                    # next step with work. Until then /health stays 200.
                    self.peer_lost = lost
                    if self.engine is not None:
                        self.engine.die_on_work = "peer_lost"
                return

    def _pg_wait_line(self, waited: float, specs: list) -> None:
        self.core_log.info(
            "ray_utils.py:223",
            f"Waiting for creating a placement group of specs for {int(waited)} seconds. "
            f"specs={specs}. Check `ray status` and `ray list nodes` to see if you have enough resources, "
            "and make sure the IP addresses used by ray cluster are the same as VLLM_HOST_IP environment "
            "variable specified in each node if you are running on a multi-node.",
        )

    def _setup_ray(self, world: int) -> None:
        specs = [{"GPU": 1.0}] * world  # ray_utils.py: one bundle per rank, strategy PACK
        address = find_address(None, temp_dir())
        if not address:
            ray_log("INFO", "worker.py:1951", "Started a local Ray instance.")
            # A fresh local instance has only this node's GPUs.
            if world > self.knobs.gpu_count:
                self._wait_forever_for_pg(specs)
            self.rank_nodes = {r: _local_rank(r, self._driver_ip()) for r in range(world)}
            return
        self._head_ip = address.rpartition(":")[0]
        ray_log("INFO", "worker.py:1771", f"Connecting to existing Ray cluster at address: {address}...")
        try:
            self.driver = cluster.DriverClient(address, self._on_cluster_event)
        except OSError as e:
            raise StartupError(f"ConnectionError: Could not connect to the Ray cluster at {address}: {e}") from None
        ray_log("INFO", "worker.py:1951", "Connected to Ray cluster.")
        self.core_log.info("ray_utils.py:358", "No current placement group found. Creating a new placement group.")
        gpus = sum(n["resources"].get("GPU", 0) for n in self.driver.nodes() if n["alive"])
        if world > gpus:
            self.core_log.warning(
                "ray_utils.py:364",
                "The number of required GPUs exceeds the total number of available GPUs in the placement group.",
            )
        waited, interval = 0.0, 10.0
        next_line = interval
        while True:
            nodes = [n for n in self.driver.nodes() if n["alive"]]
            placement = self._place(nodes, world)
            if placement:
                break
            self.sleep(1.0)
            waited += 1.0
            if waited >= next_line:  # ray.wait(timeout=interval), interval doubling after each line
                self._pg_wait_line(waited, specs)
                interval *= 2
                next_line += interval
            if waited >= PG_WAIT_TIMEOUT:
                raise StartupError(
                    f"ValueError: Cannot provide a placement group requiring {world} GPUs "
                    f"(placement_group_specs={specs}) within {PG_WAIT_TIMEOUT} seconds."
                )
        driver_ip = self._driver_ip()
        if placement is None or not any(node["ip"] == driver_ip for node in placement.values()):
            # [simulator] vLLM 0.33 has no such check; the placement would not include the driver node.
            worker_ips = sorted({n["ip"] for n in placement.values()})
            raise StartupError(
                f"ValueError: [simulator] Ray does not allocate any GPUs on the driver node. Driver IP: "
                f"{driver_ip}, worker IPs: {worker_ips}."
            )
        for rank, node in placement.items():
            self.driver.reserve(node["node_id"], "GPU", 1.0)
            remote = not (node["ip"] == driver_ip and node.get("is_head", False)) and rank != 0
            info = {"node_id": node["node_id"], "ip": node["ip"], "remote": remote, "pid": node.get("pid", 0)}
            if remote:
                hello = self.driver.call(node["node_id"], "hello", {})
                info["pid"] = hello["pid"]
            self.rank_nodes[rank] = info
        for node_id, n in Counter(node["node_id"] for node in placement.values()).items():
            if n < self.cfg.tensor_parallel_size:
                self.core_log.warning(
                    "ray_utils.py:77",
                    f"tensor_parallel_size={self.cfg.tensor_parallel_size} is bigger than a reserved "
                    f"number of GPUs ({n} GPUs) in a node {node_id}. Tensor parallel workers can be spread out to 2+ nodes "
                    "which can degrade the performance unless you have fast interconnect across nodes, like Infiniband. "
                    f"To resolve this issue, make sure you have more than {self.cfg.tensor_parallel_size} GPUs available "
                    "at each node.",
                )
        # Rank-node liveness: a node that died while we placed is caught here.
        alive = {n["node_id"] for n in self.driver.nodes() if n["alive"]}
        for rank, node in self.rank_nodes.items():
            if node["node_id"] not in alive:
                self.set_fatal("rank_lost", {"rank": rank, **node, "why": "node died during start-up"})
                raise self.fatal_info

    def _place(self, nodes: list[dict], world: int) -> dict[int, dict] | None:
        driver_ip = self._driver_ip()
        free = {n["node_id"]: n["resources"].get("GPU", 0) - n["used"].get("GPU", 0) for n in nodes}
        order = sorted(nodes, key=lambda n: (not (n["ip"] == driver_ip and n["is_head"]), n["ip"] != driver_ip))
        placement: dict[int, dict] = {}
        rank = 0
        for n in order:
            while free[n["node_id"]] >= 1 and rank < world:
                placement[rank] = n
                free[n["node_id"]] -= 1
                rank += 1
        return placement if rank == world else None

    def _wait_forever_for_pg(self, specs: list) -> None:
        waited, interval = 0.0, 10.0
        while True:
            self.sleep(interval)
            waited += interval
            self._pg_wait_line(waited, specs)
            interval *= 2
            if waited >= PG_WAIT_TIMEOUT:
                raise StartupError(
                    f"ValueError: Cannot provide a placement group requiring {len(specs)} GPUs "
                    f"(placement_group_specs={specs}) within {PG_WAIT_TIMEOUT} seconds."
                )

    def _setup_mp_multinode(self, world: int) -> None:
        cfg, log = self.cfg, self.core_log
        try:
            self.embedded_gcs = cluster.GcsServer(cfg.master_addr, cfg.master_port, self.knobs.ray_health_timeout)
        except OSError as e:
            raise StartupError(f"OSError: [Errno 98] could not listen on {cfg.master_addr}:{cfg.master_port}: {e}") from None
        self.embedded_gcs.serve_in_background()
        address = f"{cfg.master_addr}:{cfg.master_port}"
        self.driver = cluster.DriverClient(address, self._on_cluster_event)
        log.info(
            "multiproc_executor.py:167",
            f"DP group leader: node_rank=0, node_rank_within_dp=0, master_addr={cfg.master_addr}, "
            f"mq_connect_ip={cfg.master_addr} (local), world_size={world}, local_world_size={max(1, world // cfg.nnodes)}",
        )
        waited = 0.0
        while True:
            nodes = [n for n in self.driver.nodes() if n["alive"]]
            if len(nodes) >= cfg.nnodes - 1:
                break
            self.sleep(1.0)
            waited += 1.0
            if waited % 10 == 0:
                log.info(
                    "simulator:0",
                    f"[simulator] waiting for {cfg.nnodes - 1 - len(nodes)} headless node(s) to connect to tcp://{address}",
                )
        per_node = max(1, world // cfg.nnodes)
        for r in range(world):
            if r < per_node:
                self.rank_nodes[r] = _local_rank(r, cfg.master_addr)
            else:
                node = nodes[(r - per_node) // per_node]
                hello = self.driver.call(node["node_id"], "hello", {})
                self.rank_nodes[r] = {"node_id": node["node_id"], "ip": node["ip"], "remote": True, "pid": hello["pid"]}

    def rank_call(self, rank: int, method: str, spec: dict) -> dict:
        """A rank's cache call on the node that hosts the rank (compile_cache.rank_call there)."""
        node = self.rank_nodes[rank]
        if node.get("remote"):
            try:
                return self.driver.call(node["node_id"], method, spec)
            except ConnectionError:
                if self.fatal_event.is_set():
                    raise self.fatal_info from None  # the engine's fatal error is the cause; the lost link its symptom
                raise
        return compile_cache.rank_call(method, spec, self.env, node.get("pid"))
