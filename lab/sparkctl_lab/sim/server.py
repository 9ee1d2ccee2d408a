"""`vllm serve`: start-up phases, the cluster around the engine, serving, death and drain.

Start-up (each phase logs vLLM's lines and sleeps its simulated time x SIM_TIME_SCALE):
banner and args -> port reserved (bound, not listening: connections are refused) -> config
checks -> executor: Ray (wait for the placement group: one GPU per TP rank, rank 0 on this
node) or mp multi-node (wait for the --headless node) -> weights -> drafter (a remote sPLIce
drafter named by SPLICE_DRAFTER_URL must answer /health) -> torch.compile per rank (cache hit
or miss at <cache root>/torch_compile_cache/<hash>/rank_<r>_0/) -> KV cache size -> FlashInfer
JIT and autotune -> CUDA graphs -> `init engine ... took X s (compilation: Y s)` -> listen and
`Starting vLLM server on http://HOST:PORT`.

Serving: the engine (engine.py) steps; the HTTP layer (http_api.py) streams its tokens. A lost
rank (the worker node leaves the Ray cluster), a lost GCS, a lost remote drafter or the seeds'
CUDA crash kill the engine: `/health` turns 503, the log shows the lost rank / traceback and
`EngineCore encountered a fatal error.`, and the process exits 1 after SIM_DEATH_LINGER seconds.
SIGTERM drains in-flight requests for up to --shutdown-timeout seconds (new ones get 503),
then aborts the rest and exits 0.
"""

from __future__ import annotations

import http.client
import os
import signal
import socket
import sys
import threading
import time
import urllib.parse

from . import calibration, cluster, compile_cache, knobs as knobs_mod, vlog
from .engine import Engine, Request, SpecParams
from .http_api import SimHTTPServer
from .metrics import VllmMetrics
from .serve_args import ServeConfig, StartupError, effective_backend, validate

SITE = "/usr/local/lib/python3.12/dist-packages/vllm"


class Interrupted(Exception):
    """Start-up stopped by a signal or by a fatal cluster event."""


class Fatal(Exception):
    def __init__(self, kind: str, detail: dict | None = None):
        super().__init__(kind)
        self.kind, self.detail = kind, detail or {}


class Runtime:
    def __init__(self, cfg: ServeConfig, knobs: knobs_mod.Knobs, env: dict[str, str]):
        self.cfg, self.knobs, self.env = cfg, knobs, env
        self.api_log = vlog.api_logger()
        self.core_log = vlog.engine_logger()
        self.stop_event = threading.Event()
        self.fatal_event = threading.Event()
        self.fatal_info: Fatal | None = None
        self.ready = False
        self.draining = False
        self.dead = False
        self.engine: Engine | None = None
        self.metrics: VllmMetrics | None = None
        self.httpd: SimHTTPServer | None = None
        self.driver: cluster.DriverClient | None = None
        self.embedded_gcs: cluster.GcsServer | None = None
        self.rank_nodes: dict[int, dict] = {}
        self.inflight = 0
        self.inflight_lock = threading.Condition()
        self.api_keys = cfg.api_keys or ([env["VLLM_API_KEY"]] if env.get("VLLM_API_KEY") else [])
        self.role = knobs.role or ("drafter" if "draft" in os.path.basename(cfg.model.rstrip("/")).lower() else "target")
        spec_method = (cfg.speculative or {}).get("method")
        self.profile = calibration.pick_profile(knobs.profile, spec_method, cfg.model)
        self.phases = self.profile.phases.scaled_for_drafter() if self.role == "drafter" else self.profile.phases
        self.slow = knobs.fault("slow_start") or 1.0
        if self.slow == 1.0 and "slow_start" in knobs.faults:
            self.slow = 5.0
        self.drafter_url = env.get("SPLICE_DRAFTER_URL", "").rstrip("/")
        self.marlin = self.role == "target" and (cfg.moe_backend != "flashinfer_b12x" or "marlin" in knobs.faults)
        self.backend = effective_backend(cfg, knobs.gpu_count)
        self.max_model_len = 0
        self.kv_pool = 0
        self.step_model = self.profile.step.with_overrides(knobs.step_model)
        self.compilation_seconds = 0.0
        self.cache_report: dict = {}
        self.worker_tags: dict[int, vlog.Logger] = {}
        self.boot_started = time.monotonic()
        self.boot_wall = time.time()
        self.die_lock = threading.Lock()

    # ---- small helpers ----
    def sleep(self, sim_seconds: float) -> float:
        """Spend a start-up phase; returns the wall seconds spent. Raises if stopped or fatal."""
        wall = sim_seconds * self.knobs.time_scale * self.slow
        end = time.monotonic() + wall
        while True:
            if self.stop_event.is_set():
                raise Interrupted("signal")
            if self.fatal_event.is_set():
                raise self.fatal_info or Fatal("unknown")
            left = end - time.monotonic()
            if left <= 0:
                return wall
            self.stop_event.wait(min(left, 0.05))

    def set_fatal(self, kind: str, detail: dict | None = None) -> None:
        if self.fatal_event.is_set():
            return
        self.fatal_info = Fatal(kind, detail)
        self.fatal_event.set()
        if self.engine is not None and self.ready:
            self.engine.kill(kind)

    def health_state(self) -> str:
        if self.dead or (self.engine and self.engine.dead):
            return "dead"
        if self.draining:
            return "draining"
        return "ok"

    def submit(self, req: Request) -> None:
        with self.inflight_lock:
            self.inflight += 1
        try:
            self.engine.add(req)
        except Exception:
            self.finished(req)
            raise

    def finished(self, req: Request) -> None:
        with self.inflight_lock:
            if getattr(req, "_counted_done", False):
                return
            req._counted_done = True  # type: ignore[attr-defined]
            self.inflight -= 1
            self.inflight_lock.notify_all()

    def models_payload(self) -> dict:
        created = int(self.boot_wall)
        data = []
        for name in self.cfg.served_model_names:
            data.append({
                "id": name, "object": "model", "created": created, "owned_by": "vllm", "root": self.cfg.model,
                "parent": None, "max_model_len": self.max_model_len,
                "permission": [{"id": "modelperm-" + os.urandom(16).hex(), "object": "model_permission", "created": created,
                                "allow_create_engine": False, "allow_sampling": True, "allow_logprobs": True,
                                "allow_search_indices": False, "allow_view": True, "allow_fine_tuning": False,
                                "organization": "*", "group": None, "is_blocking": False}],
            })
        return {"object": "list", "data": data}

    def sim_state(self) -> dict:
        k = self.cfg.num_speculative_tokens
        acc = dict(self.profile.acceptance)
        acc.update(self.knobs.acceptance)
        decay, decay_tokens = self._decay()
        return {
            "role": self.role,
            "profile": self.profile.name,
            "time_scale": self.knobs.time_scale,
            "step_time_scale": self.knobs.step_time_scale,
            "num_speculative_tokens": k,
            "acceptance": acc,
            "acceptance_decay": decay,
            "acceptance_decay_tokens": decay_tokens,
            "expected_mean_acceptance_length": {w: calibration.expected_acceptance_length(p, k) for w, p in acc.items()} if k else {},
            "step_model": self.step_model.__dict__,
            "marlin": self.marlin,
            "decode_step_seconds_1_stream": self.step_model.step_seconds(1, k, marlin=self.marlin),
            "kv_pool_tokens": self.kv_pool,
            "max_model_len": self.max_model_len,
            "compile": self.cache_report,
            "compilation_seconds": self.compilation_seconds,
            "engine": self.engine.snapshot() if self.engine else None,
        }

    def _decay(self) -> tuple[float, float]:
        decay = self.knobs.acceptance_decay if self.knobs.acceptance_decay >= 0 else self.profile.acceptance_decay
        tokens = self.knobs.acceptance_decay_tokens if self.knobs.acceptance_decay_tokens >= 0 else self.profile.acceptance_decay_tokens
        return decay, tokens

    def worker_log(self, rank: int) -> vlog.Logger:
        node = self.rank_nodes.get(rank, {})
        pid = node.get("pid", os.getpid() + 10 + rank)
        if self.backend == "ray":
            tag = f"RayWorkerWrapper pid={pid}" + (f", ip={node['ip']}" if node.get("remote") else "")
        else:
            tag = f"Worker_TP{rank} pid={pid}"
        return vlog.Logger(tag)

    # ---- start-up ----
    def boot(self) -> None:
        cfg, log = self.cfg, self.api_log
        self.boot_wall = time.time()
        v = self.knobs.vllm_version
        log.info("utils.py:344", "")
        log.info("utils.py:344", "       █     █     █▄   ▄█")
        log.info("utils.py:344", f" ▄▄ ▄█ █     █     █ ▀▄▀ █  version {v}")
        log.info("utils.py:344", f"  █▄█▀ █     █     █     █  model   {cfg.model}")
        log.info("utils.py:344", "   ▀▀  ▀▀▀▀▀ ▀▀▀▀▀ ▀     ▀")
        log.info("utils.py:344", "")
        log.info("utils.py:278", f"non-default args: {cfg.non_default}")
        if "model" in cfg.non_default and not cfg.non_default.get("model_tag"):
            log.warning("arg_utils.py:1610", "With `vllm serve`, you should provide the model as a positional argument or in "
                        "a config file instead of via the `--model` option. The `--model` option will be removed in a future version.")

    def check_config(self) -> None:
        validate(self.cfg, self.knobs.model_max_len if self.role == "target" else 131072, self.knobs.gpu_count)
        if self.knobs.check_model_path and not os.path.isdir(self.cfg.model):
            raise StartupError(f"OSError: {self.cfg.model} is not a local folder and is not a valid model identifier listed on "
                               "'https://huggingface.co/models'")
        log = self.api_log
        log.info("model.py:617", "Resolved architecture: " + ("DeepseekV4ForCausalLM" if self.role == "target" else "DeepSeekV4MTPModel"))

    def setup_executor(self) -> None:
        cfg = self.cfg
        world = cfg.tensor_parallel_size * cfg.pipeline_parallel_size
        self.sleep(self.phases.api_init)
        log = self.core_log
        log.info("core.py:112", f"Initializing a V1 LLM engine (v{self.knobs.vllm_version}) with config: model='{cfg.model}', "
                 f"speculative_config={cfg.speculative}, tensor_parallel_size={cfg.tensor_parallel_size}, "
                 f"pipeline_parallel_size={cfg.pipeline_parallel_size}, kv_cache_dtype={cfg.kv_cache_dtype}, "
                 f"served_model_name={cfg.served_model_name}, enable_prefix_caching={cfg.enable_prefix_caching}, "
                 f"enable_chunked_prefill=True")
        self.sleep(self.phases.engine_start)
        if self.backend == "ray":
            self._setup_ray(world)
        elif cfg.nnodes > 1:
            self._setup_mp_multinode(world)
        else:
            for r in range(world):
                self.rank_nodes[r] = {"local": True, "pid": os.getpid() + 10 + r, "ip": "127.0.0.1"}
        self.sleep(self.phases.workers_init)
        for r in range(world):
            self.worker_log(r).info("parallel_state.py:1422",
                                    f"world_size={world} rank={r} local_rank={0 if self.backend == 'ray' else r} "
                                    f"distributed_init_method=tcp://{self._driver_ip()}:{cfg.master_port} backend=nccl")

    def _driver_ip(self) -> str:
        return self.env.get("VLLM_HOST_IP") or self._head_ip or "127.0.0.1"

    _head_ip: str | None = None

    def _ray_address(self) -> str | None:
        from .ray_cli import find_address, temp_dir

        return find_address(None, temp_dir())

    def _on_cluster_event(self, event: dict) -> None:
        if event.get("op") == "gcs_lost":
            self.set_fatal("gcs_lost", event)
            return
        node_id = event.get("node_id")
        for rank, node in self.rank_nodes.items():
            if node.get("node_id") == node_id:
                self.set_fatal("rank_lost", {"rank": rank, **node, "why": event.get("why", "")})
                return

    def _setup_ray(self, world: int) -> None:
        log = self.core_log
        address = self._ray_address()
        if not address:
            log.info("worker.py:1890", "Started a local Ray instance.")
            # A fresh local instance has only this node's GPUs.
            if world > self.knobs.gpu_count:
                self._wait_forever_for_pg(world)
            for r in range(world):
                self.rank_nodes[r] = {"local": True, "pid": os.getpid() + 10 + r, "ip": self._driver_ip()}
            return
        self._head_ip = address.rpartition(":")[0]
        log.info("ray_utils.py:356", f"Connecting to existing Ray cluster at address: {address}...")
        try:
            self.driver = cluster.DriverClient(address, self._on_cluster_event)
        except OSError as e:
            raise StartupError(f"ConnectionError: Could not connect to the Ray cluster at {address}: {e}") from None
        log.info("worker.py:1747", f"Connected to Ray cluster. View the dashboard at http://{self._head_ip}:8265 ")
        specs = [{f"node:{self._driver_ip()}": 0.001, "GPU": 1.0}] + [{"GPU": 1.0}] * (world - 1)
        waited = 0.0
        next_warning = 10.0
        timeout = 1800.0
        while True:
            nodes = [n for n in self.driver.nodes() if n["alive"]]
            placement = self._place(nodes, world)
            if placement:
                break
            self.sleep(1.0)
            waited += 1.0
            if waited >= next_warning:
                log.warning("ray_utils.py:262", f"Waiting for creating a placement group of specs for {int(waited)} seconds. "
                            f"specs={specs}. Check `ray status` and `ray list nodes` to see if you have enough resources, "
                            "and make sure the IP addresses used by ray cluster are the same as VLLM_HOST_IP environment "
                            "variable specified in each node if you are running on a multi-node.")
                next_warning += 10.0
            if waited >= timeout:
                raise StartupError(f"ValueError: Cannot provide a placement group of placement_group_specs={specs} within "
                                   f"{timeout:.0f} seconds. See `ray status` and `ray list nodes` to make sure the cluster "
                                   "has enough resources.")
        driver_ip = self._driver_ip()
        if placement is None or not any(node["ip"] == driver_ip for node in placement.values()):
            worker_ips = sorted({n["ip"] for n in placement.values()})
            raise StartupError(f"ValueError: Ray does not allocate any GPUs on the driver node.Driver IP: {driver_ip}, "
                               f"worker IPs: {worker_ips}.Consider adjusting the Ray placement group or running the driver on a GPU node.")
        for rank, node in placement.items():
            self.driver.reserve(node["node_id"], "GPU", 1.0)
            remote = not (node["ip"] == driver_ip and node.get("is_head", False)) and rank != 0
            info = {"node_id": node["node_id"], "ip": node["ip"], "remote": remote, "pid": node.get("pid", 0)}
            if remote:
                hello = self.driver.call(node["node_id"], "hello", {})
                info["pid"] = hello["pid"]
            self.rank_nodes[rank] = info
        env_names = sorted(k for k in self.env if k.startswith(("VLLM_", "NCCL_", "GLOO_", "TP_", "UCX_")) and k not in ("VLLM_HOST_IP", "VLLM_HOST_PORT"))
        log.info("ray_env.py:66", f"Copying the following environment variables to workers: {env_names}")
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

    def _wait_forever_for_pg(self, world: int) -> None:
        waited = 0.0
        while True:
            self.sleep(10.0)
            waited += 10.0
            self.core_log.warning("ray_utils.py:262", f"Waiting for creating a placement group of specs for {int(waited)} "
                                  f"seconds. specs={[{'GPU': 1.0}] * world}. Check `ray status` and `ray list nodes` to see "
                                  "if you have enough resources.")
            if waited >= 1800:
                raise StartupError("ValueError: Cannot provide a placement group within 1800 seconds.")

    def _setup_mp_multinode(self, world: int) -> None:
        cfg, log = self.cfg, self.core_log
        try:
            self.embedded_gcs = cluster.GcsServer(cfg.master_addr, cfg.master_port, self.knobs.ray_health_timeout)
        except OSError as e:
            raise StartupError(f"OSError: [Errno 98] could not listen on {cfg.master_addr}:{cfg.master_port}: {e}") from None
        self.embedded_gcs.serve_in_background()
        address = f"{cfg.master_addr}:{cfg.master_port}"
        self.driver = cluster.DriverClient(address, self._on_cluster_event)
        log.info("multiproc_executor.py:139", f"DP group leader: node_rank=0, node_rank_within_dp=0, master_addr={cfg.master_addr}, "
                 f"world_size={world}, local_world_size={max(1, world // cfg.nnodes)}")
        waited = 0.0
        while True:
            nodes = [n for n in self.driver.nodes() if n["alive"]]
            if len(nodes) >= cfg.nnodes - 1:
                break
            self.sleep(1.0)
            waited += 1.0
            if waited % 10 == 0:
                log.info("utils.py:741", f"Waiting for {cfg.nnodes - 1 - len(nodes)} remote node(s) to connect to tcp://{address}")
        per_node = max(1, world // cfg.nnodes)
        for r in range(world):
            if r < per_node:
                self.rank_nodes[r] = {"local": True, "pid": os.getpid() + 10 + r, "ip": cfg.master_addr}
            else:
                node = nodes[(r - per_node) // per_node]
                hello = self.driver.call(node["node_id"], "hello", {})
                self.rank_nodes[r] = {"node_id": node["node_id"], "ip": node["ip"], "remote": True, "pid": hello["pid"]}

    def load_weights(self) -> None:
        cfg = self.cfg
        lead = self.worker_log(0)
        lead.info("gpu_model_runner.py:5037", f"Starting to load model {cfg.model}...")
        if self.role == "target":
            for r in self.rank_nodes:
                wl = self.worker_log(r)
                if self.marlin:
                    wl.warning("marlin_utils_fp8.py:118", "Your GPU does not have native support for FP8 computation but FP8 "
                               "quantization is being used. Weight-only FP8 compression will be used leveraging the Marlin "
                               "kernel. This may degrade performance for compute-heavy workloads.")
                    wl.info("oracle.py:389", "Using 'marlin' Mxfp4 MoE backend out of potential backends: "
                            "['flashinfer_b12x', 'flashinfer_cutlass', 'marlin', 'triton'].")
                else:
                    wl.info("oracle.py:389", "Using 'flashinfer_b12x' Mxfp4 MoE backend out of potential backends: "
                            "['flashinfer_b12x', 'flashinfer_cutlass', 'marlin', 'triton'].")
        shards = 46 if self.role == "target" else 4
        wall = 0.0
        for i in (0, shards // 4, shards // 2, 3 * shards // 4, shards):
            if i:
                wall += self.sleep(self.phases.weights / 4)
            pct = int(100 * i / shards)
            lead.raw(f"Loading safetensors checkpoint shards: {pct:3d}% Completed | {i}/{shards} [{_mmss(wall)}<?, ?it/s]")
        lead.info("default_loader.py:397", f"Loading weights took {wall:.2f} seconds")
        spec = cfg.speculative or {}
        if spec and self.role == "target":
            if self.drafter_url:
                self._wait_for_drafter()
            elif spec.get("method") not in ("ngram", "ngram_gpu", "suffix"):
                lead.info("gpu_model_runner.py:5061", "Loading drafter model...")
                wall += self.sleep(self.phases.drafter_local)
        gib = self.profile.weights_gib if self.role == "target" else 3.2
        lead.info("gpu_model_runner.py:5132", f"Model loading took {gib:.2f} GiB memory and {wall:.6f} seconds")

    def _wait_for_drafter(self) -> None:
        lead = self.worker_log(0)
        url = self.drafter_url
        lead.info("gpu_model_runner.py:5061", f"Loading drafter model... (remote drafter at {url})")
        waited = 0.0
        while not drafter_healthy(url):
            self.sleep(1.0)
            waited += 1.0
            if waited % 10 == 0:
                lead.warning("remote_drafter.py:88", f"Waiting for the remote drafter at {url} to become healthy ({int(waited)} s)")
            if waited >= 1800:
                raise StartupError(f"TimeoutError: the remote drafter at {url} did not become healthy within 1800 seconds")
        self.sleep(self.phases.drafter_remote_connect)
        lead.info("remote_drafter.py:102", f"Connected to remote drafter at {url}")

    # ---- compile caches ----
    def _rank_specs(self) -> tuple[list[dict], dict]:
        cfg = self.cfg
        h, factors = compile_cache.compile_hash(self.knobs.vllm_version, cfg.hash_inputs, self.env)
        prefixes = ["backbone"]
        method = (cfg.speculative or {}).get("method")
        if cfg.speculative and not self.drafter_url and self.role == "target":
            if method in ("eagle", "eagle3", "mtp", "deepseek_mtp", "dspark", "medusa"):
                prefixes.append("eagle_head")
            elif method in ("draft_model", "dflash", "mlp_speculator"):
                prefixes.append("draft_model")
        ops = ["sampling_sm121", "sparse_mla_decode_sm120"]
        if self.role == "target" and not self.marlin:
            ops.append("fused_moe_b12x_sm121")
        specs = []
        for r in sorted(self.rank_nodes):
            specs.append({"hash": h, "rank": r, "dp_rank": 0, "prefixes": prefixes,
                          "compile_range": [1, cfg.max_num_batched_tokens], "factors": factors,
                          "flashinfer_ops": ops, "cache_root": self.env.get("VLLM_CACHE_ROOT")})
        return specs, factors

    def _rank_call(self, rank: int, method: str, spec: dict) -> dict:
        node = self.rank_nodes[rank]
        if node.get("remote"):
            try:
                return self.driver.call(node["node_id"], method, spec)
            except ConnectionError:
                if self.fatal_event.is_set():
                    raise self.fatal_info
                raise
        rc = compile_cache.rank_cache_from_spec(spec, self.env)
        if method == "init_rank":
            return {**rc.describe(), "pid": node.get("pid")}
        if spec.get("compiled"):
            rc.write_compiled()
        if spec.get("flashinfer"):
            rc.write_flashinfer()
        if spec.get("autotune"):
            rc.write_autotune()
        return {"ok": True}

    def compile_and_warmup(self) -> float:
        """Profile, compile (or load), KV cache, warm-up; returns the init-engine wall seconds."""
        t0 = time.monotonic()
        ph = self.phases
        specs, _ = self._rank_specs()
        states = {s["rank"]: self._rank_call(s["rank"], "init_rank", s) for s in specs}
        self.cache_report = {str(r): st for r, st in states.items()}
        compiled_all = all(st["compiled_hit"] for st in states.values())
        range_ = f"(1, {self.cfg.max_num_batched_tokens})"
        c0 = time.monotonic()
        for s in specs:
            wl = self.worker_log(s["rank"])
            for prefix in s["prefixes"]:
                wl.info("backends.py:1094", f"Using cache directory: {os.path.join(states[s['rank']]['rank_dir'], prefix)} for vLLM's torch.compile")
        dyn = self.sleep(ph.dynamo_warm if compiled_all else ph.dynamo_cold)
        for s in specs:
            self.worker_log(s["rank"]).info("backends.py:1155", f"Dynamo bytecode transform time: {dyn:.2f} s")
        if compiled_all:
            took = self.sleep(ph.compile_warm)
            for s in specs:
                wl = self.worker_log(s["rank"])
                wl.info("backends.py:292", f"Directly load the compiled graph(s) for compile range {range_} from the cache, took {took:.3f} s")
                wl.info("decorators.py:311", f"Directly load AOT compilation from path {states[s['rank']]['aot_dir']}/model")
        else:
            for s in specs:
                if not states[s["rank"]]["compiled_hit"]:
                    self.worker_log(s["rank"]).info("backends.py:197", "Cache the graph for dynamic shape for later use")
            took = self.sleep(ph.compile_cold)
            for s in specs:
                wl = self.worker_log(s["rank"])
                if states[s["rank"]]["compiled_hit"]:
                    wl.info("backends.py:292", f"Directly load the compiled graph(s) for compile range {range_} from the cache, took {min(took, ph.compile_warm * self.knobs.time_scale):.3f} s")
                else:
                    wl.info("backends.py:215", f"Compiling a graph for compile range {range_} takes {took:.2f} s")
                    self._rank_call(s["rank"], "save_rank", {**s, "compiled": True})
        self.compilation_seconds = time.monotonic() - c0
        for s in specs:
            self.worker_log(s["rank"]).info("monitor.py:53", f"torch.compile took {self.compilation_seconds:.2f} s in total")
        prof = self.sleep(ph.profile_run)
        self.worker_log(0).info("monitor.py:81", f"Initial profiling/warmup run took {prof:.2f} s")
        self._kv_cache()
        # FlashInfer JIT (outside the vLLM cache root) and the autotuner (inside it).
        fi_all = all(st["flashinfer_hit"] for st in states.values())
        if not fi_all:
            for s in specs:
                if not states[s["rank"]]["flashinfer_hit"]:
                    self.worker_log(s["rank"]).info("jit_monitor.py:41", f"flashinfer.jit: Compiling JIT modules {s['flashinfer_ops']} "
                                                    f"into {states[s['rank']]['flashinfer_dir']}")
        took = self.sleep(ph.flashinfer_jit_warm if fi_all else ph.flashinfer_jit_cold)
        for s in specs:
            if not states[s["rank"]]["flashinfer_hit"]:
                self._rank_call(s["rank"], "save_rank", {**s, "flashinfer": True})
                self.worker_log(s["rank"]).info("jit_monitor.py:54", f"flashinfer.jit: JIT compilation finished in {took:.2f} s")
        at_all = all(st["autotune_hit"] for st in states.values())
        for s in specs:
            wl = self.worker_log(s["rank"])
            if states[s["rank"]]["autotune_hit"]:
                wl.info("kernel_warmup.py:268", f"DeepSeek V4 sparse MLA decode autotune cache loaded on rank {s['rank']} from "
                        f"{states[s['rank']]['autotune_file']}.")
            else:
                wl.info("kernel_warmup.py:215", f"Autotuning DeepSeek V4 SM120 sparse MLA decode with FlashInfer cache file: "
                        f"{states[s['rank']]['autotune_file']}")
        self.sleep(ph.autotune_warm if at_all else ph.autotune_cold)
        for s in specs:
            if not states[s["rank"]]["autotune_hit"]:
                self._rank_call(s["rank"], "save_rank", {**s, "autotune": True})
        took = self.sleep(ph.cudagraph_warm if (compiled_all and fi_all) else ph.cudagraph_cold)
        for s in specs:
            self.worker_log(s["rank"]).info("gpu_model_runner.py:6467", f"Graph capturing finished in {max(1, round(took))} secs, took 0.34 GiB")
        if "fail_start" in self.knobs.faults:
            raise Fatal("oom_start")
        return time.monotonic() - t0

    def _kv_cache(self) -> None:
        cfg, k = self.cfg, self.knobs
        if k.kv_pool_tokens > 0:
            pool = k.kv_pool_tokens
            available = pool * calibration.KV_BYTES_PER_TOKEN.get(cfg.kv_cache_dtype, 31790) / calibration.GIB
        elif self.role == "drafter":
            pool, available = 2_000_000, 9.5
        else:
            non_kv = k.non_kv_gib if k.non_kv_gib > 0 else self.profile.non_kv_gib
            pool, available = calibration.kv_pool_tokens(cfg.gpu_memory_utilization, cfg.kv_cache_dtype, k.gpu_memory_gib, non_kv)
        for r in self.rank_nodes:
            self.worker_log(r).info("gpu_worker.py:466", f"Available KV cache memory: {max(0.0, available):.2f} GiB")
        if pool <= 0:
            raise StartupError("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
                               "when initializing the engine.")
        model_max = k.model_max_len if self.role == "target" else 131072
        if cfg.max_model_len is None:
            mml = min(model_max, pool) if pool < model_max else model_max
            if pool < model_max:
                raise StartupError(self._kv_too_small(model_max, pool, available))
        elif cfg.max_model_len == -1:
            mml = min(model_max, pool)
        else:
            mml = cfg.max_model_len
            if mml > pool:
                raise StartupError(self._kv_too_small(mml, pool, available))
        self.max_model_len, self.kv_pool = mml, pool
        self.core_log.info("kv_cache_utils.py:1733", f"GPU KV cache size: {pool:,} tokens")
        self.core_log.info("kv_cache_utils.py:1734", f"Maximum concurrency for {mml:,} tokens per request: {pool / mml:.2f}x")

    def _kv_too_small(self, mml: int, pool: int, available: float) -> str:
        need = available * mml / pool if pool else 0.0
        return (f"ValueError: To serve at least one request with the models's max seq len ({mml}), ({need:.2f} GiB KV cache is "
                f"needed, which is larger than the available KV cache memory ({available:.2f} GiB). Based on the available "
                f"memory, the estimated maximum model length is {pool}. Try increasing `gpu_memory_utilization` or "
                "decreasing `max_model_len` when initializing the engine.")

    # ---- serving ----
    def make_engine(self) -> None:
        cfg = self.cfg
        k = cfg.num_speculative_tokens if self.role == "target" else 0
        spec = None
        if k:
            acc = dict(self.profile.acceptance)
            acc.update(self.knobs.acceptance)
            decay, decay_tokens = self._decay()
            spec = SpecParams(k=k, acceptance=acc, decay=decay, decay_tokens=decay_tokens)
        cache_info = {"block_size": str(cfg.block_size), "cache_dtype": cfg.kv_cache_dtype,
                      "gpu_memory_utilization": str(cfg.gpu_memory_utilization), "num_gpu_blocks": str(self.kv_pool // cfg.block_size),
                      "enable_prefix_caching": str(cfg.enable_prefix_caching)}
        self.metrics = VllmMetrics(cfg.served_model_name, self.max_model_len, k, cache_info)
        step = self.step_model
        if self.role == "drafter":
            step = calibration.StepModel(fixed_ms=6.0, per_token_ms=0.3, draft_fixed_ms=0, draft_per_seq_ms=0,
                                         prefill_ms_per_token=0.02, prefill_attn_us_per_ktok=0.05)
        self.engine = Engine(
            max_num_seqs=cfg.max_num_seqs,
            max_num_batched_tokens=cfg.max_num_batched_tokens,
            max_model_len=self.max_model_len,
            block_size=cfg.block_size,
            kv_pool_tokens=self.kv_pool,
            enable_prefix_caching=cfg.enable_prefix_caching,
            step_model=step,
            spec=spec,
            marlin=self.marlin,
            step_time_scale=self.knobs.step_time_scale,
            metrics=self.metrics,
            log=self.core_log,
            crash_context_tokens=self.knobs.crash_context_tokens if self.role == "target" else 0,
            on_fatal=self._engine_fatal,
        )
        if "crash_on_request" in self.knobs.faults:
            self.engine.crash_on_work = True
        d1 = step.step_seconds(1, k, marlin=self.marlin)
        self.core_log.info("sim_step_model.py:1", f"[simulator] step model: profile={self.profile.name}, k={k}, "
                           f"decode step {d1 * 1000:.1f} ms at 1 stream, {step.step_seconds(4, k, marlin=self.marlin) * 1000:.1f} ms "
                           f"at 4 streams (moe={'marlin x%.1f' % step.marlin_factor if self.marlin else 'flashinfer_b12x'}), "
                           f"time scale {self.knobs.step_time_scale:g}")

    def _engine_fatal(self, kind: str) -> None:
        if ":" in kind:  # a simulator bug: keep its traceback in the log
            self.set_fatal("engine_bug", {"traceback": kind})
        else:
            self.set_fatal(kind, self.fatal_info.detail if self.fatal_info else {})
        self.die()

    # ---- death ----
    def log_fatal(self, fatal: Fatal, starting: bool) -> None:
        log, core = self.api_log, self.core_log
        kind, d = fatal.kind, fatal.detail
        tb_head = ["Traceback (most recent call last):",
                   f'  File "{SITE}/v1/engine/core.py", line 870, in run_engine_core',
                   "    engine_core.run_busy_loop()",
                   f'  File "{SITE}/v1/engine/core.py", line 897, in run_busy_loop',
                   "    self._process_engine_step()",
                   f'  File "{SITE}/v1/engine/core.py", line 922, in _process_engine_step',
                   "    outputs, model_executed = self.step_fn()",
                   f'  File "{SITE}/v1/engine/core.py", line 357, in step',
                   "    model_output = self.model_executor.execute_model(scheduler_output)"]
        if kind == "rank_lost":
            rank = d.get("rank", 1)
            if self.backend == "ray":
                core.error("ray_executor.py:508", f"RayWorkerProc rank={rank} died unexpectedly (node ip={d.get('ip')}, "
                           f"node id={d.get('node_id', '')[:16]}, reason: {d.get('why', 'node died')}).")
                exc = ["ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
                       "\tclass_name: RayWorkerWrapper", f"\tpid: {d.get('pid')}", f"\tip: {d.get('ip')}",
                       f"The actor is dead because its node has died. Node Id: {d.get('node_id', '')}"]
            else:
                core.error("multiproc_executor.py:154", f"Worker proc VllmWorker-{rank} died unexpectedly, shutting down executor.")
                exc = [f"RuntimeError: Worker rank {rank} on {d.get('ip')} died unexpectedly"]
        elif kind == "gcs_lost":
            core.error("ray_executor.py:508", "RayWorkerProc rank=0 died unexpectedly: the Ray GCS at "
                       f"{d.get('address')} is gone (the head's `ray start` stopped).")
            exc = ["ray.exceptions.RaySystemError: System error: Failed to connect to GCS at " + str(d.get("address"))]
        elif kind == "drafter_lost":
            core.error("remote_drafter.py:140", f"Remote drafter at {self.drafter_url} is unreachable: {d.get('why')}")
            exc = [f"ConnectionError: remote drafter {self.drafter_url} unreachable"]
        elif kind == "oom_start":
            exc = ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
                   "119.70 GiB of which 1.12 GiB is free. Process has 117.10 GiB memory in use."]
        elif kind == "engine_bug":
            exc = str(d.get("traceback", "RuntimeError: simulator engine error")).splitlines()
        else:  # device-side assert (concurrent long context, or forced)
            wl = self.worker_log(1 if 1 in self.rank_nodes else 0)
            wl.error("worker_base.py:617", "Error executing method 'execute_model'. This might cause deadlock in distributed execution.")
            cuda = ["Traceback (most recent call last):",
                    f'  File "{SITE}/v1/worker/gpu_model_runner.py", line 2612, in execute_model',
                    "    model_output = self.model(",
                    f'  File "{SITE}/model_executor/models/deepseek_v4.py", line 1318, in forward',
                    "    attn_output = self.sparse_mla_attn(q, kv_cache, attn_metadata)",
                    f'  File "{SITE}/attention/backends/sparse_mla.py", line 744, in forward',
                    "    topk_indices = self.indexer(hidden_states, positions)",
                    "RuntimeError: CUDA error: device-side assert triggered",
                    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
                    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
                    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."]
            for line in cuda:
                wl.error("worker_base.py:617", line)
            exc = ["ray.exceptions.RayTaskError(RuntimeError): ray::RayWorkerWrapper.execute_method()" if self.backend == "ray"
                   else "RuntimeError: Worker failed with error 'CUDA error: device-side assert triggered'",
                   "RuntimeError: CUDA error: device-side assert triggered",
                   "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."]
        where = "core.py:710"
        core.error(where, "EngineCore failed to start." if starting else "EngineCore encountered a fatal error.")
        for line in tb_head + exc:
            core.error(where, line)
        if not starting:
            log.error("async_llm.py:480", "AsyncLLM output_handler failed.")
            log.error("async_llm.py:480", "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.")
        vlog.write_line("Traceback (most recent call last):", sys.stderr)
        for line in exc:
            vlog.write_line(line, sys.stderr)

    def die(self) -> None:
        """Engine dead while serving: 503, log, linger, exit 1 (main loop does the exit)."""
        with self.die_lock:
            if self.dead:
                return
            self.dead = True
        self.log_fatal(self.fatal_info or Fatal("device_assert"), starting=False)
        self.stop_event.set()

    # ---- background: stats, faults, drafter liveness ----
    def background(self) -> None:
        interval = _env_float(self.env, "VLLM_LOG_STATS_INTERVAL", 10.0)
        last_log = time.monotonic()
        last_drafter = time.monotonic()
        drafter_failures = 0
        crash_after = self.knobs.fault("crash_after")
        ready_at = time.monotonic()
        last_prompt = last_gen = 0.0
        while not self.stop_event.wait(0.25):
            now = time.monotonic()
            if self.knobs.faults_file:
                # Re-read each time: removing the file switches its faults off again.
                self._runtime_faults(knobs_mod.read_fault_file(self.knobs.faults_file))
            if crash_after is not None and now - ready_at >= crash_after and self.engine and not self.engine.dead:
                crash_after = None
                self.engine.crash("device_assert")
            if self.drafter_url and now - last_drafter >= 1.0:
                last_drafter = now
                if drafter_healthy(self.drafter_url):
                    drafter_failures = 0
                else:
                    drafter_failures += 1
                    if drafter_failures >= 3:
                        self.set_fatal("drafter_lost", {"why": "3 failed health checks"})
                        self.die()
            if not self.cfg.disable_log_stats and now - last_log >= interval:
                elapsed = now - last_log
                last_log = now
                last_prompt, last_gen = self._log_stats(elapsed, last_prompt, last_gen)

    def _runtime_faults(self, faults: dict) -> None:
        eng = self.engine
        if eng is None:
            return
        if "crash_now" in faults and not eng.dead:
            eng.crash("device_assert")
        eng.hang = "hang" in faults
        eng.slow_factor = faults.get("slow_decode", 1.0) or 1.0

    def _log_stats(self, elapsed: float, last_prompt: float, last_gen: float) -> tuple[float, float]:
        eng = self.engine
        with eng.lock:
            iv, pos = dict(eng.iv), list(eng.iv_pos)
            eng.iv.clear()
            eng.iv_pos = [0] * eng.k
            running, waiting = len(eng.running), len(eng.waiting)
            usage = eng.used_blocks / eng.total_blocks
        prompt_tp = iv.get("prompt", 0) / elapsed
        gen_tp = iv.get("gen", 0) / elapsed
        if not any((prompt_tp, gen_tp, last_prompt, last_gen)):
            return prompt_tp, gen_tp  # vLLM keeps an idle server quiet (debug level)
        queries = iv.get("queries", 0)
        hit_rate = 100.0 * iv.get("hits", 0) / queries if queries else 0.0
        self.api_log.info("loggers.py:271", f"Engine 000: Avg prompt throughput: {prompt_tp:.1f} tokens/s, Avg generation "
                          f"throughput: {gen_tp:.1f} tokens/s, Running: {running} reqs, Waiting: {waiting} reqs, GPU KV cache "
                          f"usage: {usage * 100:.1f}%, Prefix cache hit rate: {hit_rate:.1f}%")
        drafts = iv.get("drafts", 0)
        if drafts:
            accepted, drafted = iv.get("accepted", 0), iv.get("draft_tokens", 0)
            rates = ", ".join(f"{c / drafts:.3f}" for c in pos)
            self.api_log.info("metrics.py:101", f"SpecDecoding metrics: Mean acceptance length: {1 + accepted / drafts:.2f}, "
                              f"Accepted throughput: {accepted / elapsed:.2f} tokens/s, Drafted throughput: {drafted / elapsed:.2f} "
                              f"tokens/s, Accepted: {accepted} tokens, Drafted: {drafted} tokens, Per-position acceptance rate: "
                              f"{rates}, Avg Draft acceptance rate: {100.0 * accepted / drafted if drafted else 0:.1f}%")
        return prompt_tp, gen_tp


def drafter_healthy(url: str, timeout: float = 2.0) -> bool:
    parts = urllib.parse.urlsplit(url)
    try:
        conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)
        conn.request("GET", (parts.path.rstrip("/") or "") + "/health")
        ok = conn.getresponse().status == 200
        conn.close()
        return ok
    except (OSError, http.client.HTTPException):
        return False


def _env_float(env: dict, name: str, default: float) -> float:
    try:
        value = float(env.get(name, default))
        return value if value > 0 else default
    except ValueError:
        return default


def _mmss(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 60:02d}:{s % 60:02d}"


def print_startup_error(exc_text: str) -> None:
    lines = ["Traceback (most recent call last):",
             '  File "/usr/local/bin/vllm", line 10, in <module>',
             "    sys.exit(main())",
             f'  File "{SITE}/entrypoints/cli/main.py", line 73, in main',
             "    args.dispatch_function(args)",
             f'  File "{SITE}/entrypoints/cli/serve.py", line 60, in cmd',
             "    uvloop.run(run_server(args))"]
    for line in lines + exc_text.split("\n"):
        vlog.write_line(line, sys.stderr)


def serve(cfg: ServeConfig, knobs: knobs_mod.Knobs, env: dict[str, str]) -> int:
    rt = Runtime(cfg, knobs, env)

    def on_signal(signum, _frame):
        if not rt.ready:
            rt.stop_event.set()
            return
        if rt.draining:
            return
        rt.draining = True
        threading.Thread(target=_drain, args=(rt,), daemon=True).start()

    # PID 1 in a container ignores signals without a handler: install ours first.
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    rt.boot()
    host = cfg.host if cfg.host is not None else "0.0.0.0"
    try:
        rt.httpd = SimHTTPServer((host, cfg.port), rt)
        rt.httpd.server_bind()  # reserves the port; connections are refused until listen()
    except OSError as e:
        print_startup_error(f"OSError: [Errno {e.errno}] {e.strerror}")
        return 1
    try:
        rt.check_config()
        rt.setup_executor()
        rt.load_weights()
        if "hang_start" in knobs.faults:
            rt.core_log.warning("core.py:95", "[simulator] hang_start: start-up will not finish")
            while True:
                rt.sleep(3600)
        took = rt.compile_and_warmup()
        rt.make_engine()
        rt.core_log.info("core.py:302", f"init engine (profile, create kv cache, warmup model) took {took:.2f} s "
                         f"(compilation: {rt.compilation_seconds:.2f} s)")
        rt.sleep(rt.phases.server_start)
    except StartupError as e:
        rt.core_log.error("core.py:710", "EngineCore failed to start.")
        print_startup_error(e.exc_line)
        _teardown(rt)
        return 1
    except Fatal as f:
        rt.log_fatal(f, starting=True)
        _teardown(rt)
        return 1
    except Interrupted:
        rt.api_log.info("launcher.py:110", "Shutting down during start-up (signal received).")
        _teardown(rt)
        return 0
    rt.engine.start()
    rt.httpd.server_activate()
    rt.ready = True
    threading.Thread(target=rt.httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
    shown = "0.0.0.0" if cfg.host in (None, "") else cfg.host
    rt.api_log.info("api_server.py:1839", f"vLLM API server version {knobs.vllm_version}")
    rt.api_log.info("api_server.py:596", f"Starting vLLM server on http://{shown}:{cfg.port}")
    rt.api_log.info("launcher.py:37", "Available routes are:")
    for route, methods in (("/health", "GET"), ("/metrics", "GET"), ("/ping", "GET"), ("/ping", "POST"), ("/tokenize", "POST"),
                           ("/version", "GET"), ("/v1/models", "GET"), ("/v1/chat/completions", "POST"), ("/v1/completions", "POST")):
        rt.api_log.info("launcher.py:46", f"Route: {route}, Methods: {methods}")
    rt.api_log.raw(f"INFO:     Started server process [{os.getpid()}]")
    rt.api_log.raw("INFO:     Waiting for application startup.")
    rt.api_log.raw("INFO:     Application startup complete.")
    if "crash_now" in knobs.faults:
        rt.engine.crash("device_assert")
    threading.Thread(target=rt.background, daemon=True).start()
    if rt.fatal_event.is_set():  # a rank died between the last phase and now
        rt.engine.kill(rt.fatal_info.kind)
        rt.die()
    rt.stop_event.wait()
    if rt.dead:
        keep = env.get("VLLM_KEEP_ALIVE_ON_ENGINE_DEATH", "0") not in ("", "0")
        if keep:
            threading.Event().wait()  # stay up answering 503, as vLLM does with this set
        time.sleep(knobs.death_linger)
        _shutdown_http(rt)
        _teardown(rt)
        return 1
    _shutdown_http(rt)
    _teardown(rt)
    return 0


def _drain(rt: Runtime) -> None:
    timeout = rt.cfg.shutdown_timeout
    n = rt.engine.num_unfinished()
    rt.api_log.info("launcher.py:110", f"Received SIGTERM: draining {n} in-flight request(s) (shutdown timeout {timeout} s); "
                    "new requests are rejected with 503.")
    deadline = time.monotonic() + max(0, timeout)
    if timeout > 0:
        with rt.inflight_lock:
            while rt.inflight > 0 and time.monotonic() < deadline and not rt.dead:
                rt.inflight_lock.wait(min(0.1, max(0.0, deadline - time.monotonic())))
    left = rt.engine.abort_all()
    if left:
        rt.api_log.info("launcher.py:118", f"Shutdown timeout reached: aborted {left} in-flight request(s).")
    # let the aborted responses reach their clients
    end = time.monotonic() + 2.0
    with rt.inflight_lock:
        while rt.inflight > 0 and time.monotonic() < end:
            rt.inflight_lock.wait(0.05)
    rt.stop_event.set()


def _shutdown_http(rt: Runtime) -> None:
    rt.api_log.raw("INFO:     Shutting down")
    if rt.httpd:
        threading.Thread(target=rt.httpd.shutdown, daemon=True).start()
        time.sleep(0.15)
        rt.httpd.server_close()
    rt.api_log.raw("INFO:     Waiting for application shutdown.")
    rt.api_log.raw("INFO:     Application shutdown complete.")
    rt.api_log.raw(f"INFO:     Finished server process [{os.getpid()}]")


def _teardown(rt: Runtime) -> None:
    if rt.engine:
        rt.engine.stop()
    if rt.driver:
        rt.driver.close()
    if rt.embedded_gcs:
        rt.embedded_gcs.shutdown()
    if rt.httpd and not rt.ready:
        rt.httpd.server_close()


def run_headless(cfg: ServeConfig, knobs: knobs_mod.Knobs, env: dict[str, str]) -> int:
    """`vllm serve ... --nnodes N --node-rank R --headless`: host this node's ranks, no API server."""
    from .ray_cli import node_handlers

    log = vlog.Logger(f"EngineCore_DP0 pid={os.getpid()}")
    log.info("serve.py:126", f"Launching vLLM in headless mode: node_rank={cfg.node_rank}, nnodes={cfg.nnodes}, "
             f"master_addr={cfg.master_addr}, master_port={cfg.master_port}")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    address = f"{cfg.master_addr}:{cfg.master_port}"
    deadline = time.monotonic() + max(knobs.ray_join_timeout, 60)
    agent = None
    while agent is None:
        if stop.is_set():
            return 0
        try:
            agent = cluster.NodeAgent(address, env.get("VLLM_HOST_IP"), {"GPU": float(knobs.gpu_count)}, False, node_handlers(),
                                      knobs.ray_health_timeout, socket.gethostname(), os.getpid())
        except (OSError, ConnectionError):
            if time.monotonic() > deadline:
                log.error("core.py:710", f"EngineCore failed to start: could not reach the master at {address}.")
                return 1
            time.sleep(0.5)
    log.info("multiproc_executor.py:139", f"Connected to master at {address} as node_rank={cfg.node_rank}")
    while not stop.is_set() and not agent.lost.is_set():
        stop.wait(0.2)
    if stop.is_set():
        agent.close()
        return 0
    log.error("core.py:710", "EngineCore encountered a fatal error.")
    log.error("core.py:710", f"RuntimeError: lost the connection to the master node at {address}")
    return 1
