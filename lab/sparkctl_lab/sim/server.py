"""`vllm serve` as a process: its state, serving, death and drain.

Start-up runs the executor (executor.py: where each rank runs) and the phases (startup.py: weights,
compile caches, KV cache, warm-up); then the API listens and logs `Starting vLLM server on
http://HOST:PORT`. Serving: the engine (engine.py) steps; the HTTP layer (http_api.py) streams its
tokens. A lost rank (the worker node leaves the Ray cluster), a lost GCS, a lost remote drafter or
the seeds' CUDA crash kill the engine: `/health` turns 503, the log shows the lost rank / traceback
and `EngineCore encountered a fatal error.`, and the process exits 1 after SIM_DEATH_LINGER seconds.
SIGTERM drains in-flight requests for up to --shutdown-timeout seconds, then aborts the rest and
exits 0. During the drain the API server answers as vLLM 0.33's does: `/health` stays 200
(v1/engine/async_llm.py check_health fails only on a dead engine) and a new request is accepted,
reaches the engine and is finished at once, empty, with `finish_reason: "abort"` (v1/engine/core.py
_reject_add_in_shutdown): a 200, not an error status.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

from . import calibration, cluster, vlog
from . import knobs as knobs_mod
from .engine import Engine, Request, SpecParams
from .executor import Executor
from .http_api import SimHTTPServer
from .metrics import VllmMetrics
from .serve_args import ServeConfig, StartupError, effective_backend, validate_multinode
from .startup import SIM, Fatal, Interrupted, MoeChoice, StartupPhases, drafter_healthy
from .vlog import SITE

# A remote drafter that fails this many /health checks in a row, DRAFTER_CHECK_S apart, kills the
# head's engine. Both numbers are the simulator's own model of the sPLIce overlay, which is not
# public: seed 000 says nothing about how its head watches the drafter, and vLLM 0.33 has no remote
# drafter (a proposer that raises in a step kills EngineCore at once: v1/engine/core.py:1586). The
# overlay must ride out a drafter restart (docs/inventory.md), yet a restarting vLLM 0.33 refuses
# connections exactly as a dead one does (launchers/launcher.py setup_server binds, serve_http
# listens only once the engine is built), so only the outage's length tells them apart: an outage
# under 2 s never kills the head, one over ~4 s always does (checks 1-1.25 s apart). The checks watch
# a real process over a real network, so they run in real seconds, as the Ray heartbeat timeout does
# (cluster.py); the drafter's modelled load is SIM_TIME_SCALE'd, its interpreter and container are not.
DRAFTER_LOST_CHECKS = 3
DRAFTER_CHECK_S = 1.0
ROUTES = (
    ("/health", "GET"),
    ("/metrics", "GET"),
    ("/ping", "GET, POST"),
    ("/tokenize", "POST"),
    ("/version", "GET"),
    ("/v1/models", "GET"),
    ("/v1/chat/completions", "POST"),
    ("/v1/completions", "POST"),
)


class Runtime(StartupPhases, Executor):
    """One `vllm serve` process: the state its phases, executor, HTTP layer and background share."""

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
        self.inflight: set[str] = set()  # ids of the requests the HTTP layer still answers
        self.inflight_lock = threading.Condition()
        self.api_keys = cfg.api_keys or ([env["VLLM_API_KEY"]] if env.get("VLLM_API_KEY") else [])
        self.role = knobs.role or ("drafter" if "draft" in os.path.basename(cfg.model.rstrip("/")).lower() else "target")
        spec_method = (cfg.speculative or {}).get("method")
        self.profile = calibration.pick_profile(knobs.profile, spec_method, cfg.model)
        self.phases = self.profile.phases.scaled_for_drafter() if self.role == "drafter" else self.profile.phases
        self.slow = knobs.faults.get("slow_start") or 1.0
        if self.slow == 1.0 and "slow_start" in knobs.faults:
            self.slow = 5.0
        self.drafter_url = env.get("SPLICE_DRAFTER_URL", "").rstrip("/")
        # The MoE backend the target ranks select (startup.MoeChoice: vLLM 0.33's maps for the checkpoint's path).
        self.moe = MoeChoice(knobs.checkpoint_quant, cfg.moe_backend, "marlin" in knobs.faults, knobs.checkpoint_swiglu_limit)
        self.marlin = self.role == "target" and self.moe.marlin
        self.backend = effective_backend(cfg, knobs.gpu_count)
        self.max_model_len = 0
        self.kv_pool = 0
        self.kv_concurrency = 0.0
        self.step_model = self.profile.step.with_overrides(knobs.step_model)
        self.compilation_seconds = 0.0
        self.cache_report: dict = {}
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

    def healthy(self) -> bool:
        # Not `draining`: vLLM's /health (entrypoints/serve/instrumentator/health.py health) is 503 only on
        # EngineDeadError from AsyncLLM.check_health (v1/engine/async_llm.py), so it stays 200 while draining.
        return not (self.dead or (self.engine and self.engine.dead))

    def submit(self, req: Request) -> None:
        with self.inflight_lock:
            self.inflight.add(req.request_id)
        try:
            self.engine.add(req)
        except Exception:
            self.finished(req)
            raise

    def finished(self, req: Request) -> None:
        with self.inflight_lock:
            self.inflight.discard(req.request_id)
            self.inflight_lock.notify_all()

    def models_payload(self) -> dict:
        created = int(self.boot_wall)
        permission = {
            "object": "model_permission",
            "created": created,
            "allow_create_engine": False,
            "allow_sampling": True,
            "allow_logprobs": True,
            "allow_search_indices": False,
            "allow_view": True,
            "allow_fine_tuning": False,
            "organization": "*",
            "group": None,
            "is_blocking": False,
        }
        data = [
            {
                "id": name,
                "object": "model",
                "created": created,
                "owned_by": "vllm",
                "root": self.cfg.model,
                "parent": None,
                "max_model_len": self.max_model_len,
                "permission": [{"id": "modelperm-" + os.urandom(16).hex(), **permission}],
            }
            for name in self.cfg.served_model_names
        ]
        return {"object": "list", "data": data}

    def sim_state(self) -> dict:
        spec = self.spec_params(self.cfg.num_speculative_tokens)
        k, acc = spec.k, spec.acceptance
        return {
            "role": self.role,
            "profile": self.profile.name,
            "time_scale": self.knobs.time_scale,
            "step_time_scale": self.knobs.step_time_scale,
            "num_speculative_tokens": k,
            "acceptance": acc,
            "acceptance_decay": spec.decay,
            "acceptance_decay_tokens": spec.decay_tokens,
            "expected_mean_acceptance_length": {w: calibration.expected_acceptance_length(p, k) for w, p in acc.items()}
            if k
            else {},
            "step_model": self.step_model.__dict__,
            "marlin": self.marlin,
            "decode_step_seconds_1_stream": self.step_model.step_seconds(1, k, marlin=self.marlin),
            "kv_pool_tokens": self.kv_pool,
            "max_model_len": self.max_model_len,
            "compile": self.cache_report,
            "compilation_seconds": self.compilation_seconds,
            "engine": self.engine.snapshot() if self.engine else None,
            "faults_applied": getattr(self, "applied_faults", {}),
        }

    def spec_params(self, k: int) -> SpecParams:
        """The acceptance model: the profile's, with the SIM_ACCEPTANCE* knobs over it."""
        k_ = self.knobs
        return SpecParams(
            k=k,
            acceptance={**self.profile.acceptance, **k_.acceptance},
            decay=k_.acceptance_decay if k_.acceptance_decay >= 0 else self.profile.acceptance_decay,
            decay_tokens=(
                k_.acceptance_decay_tokens if k_.acceptance_decay_tokens >= 0 else self.profile.acceptance_decay_tokens
            ),
        )

    def _engine_fatal(self, kind: str) -> None:
        if ":" in kind:  # a simulator bug: keep its traceback in the log
            self.set_fatal("engine_bug", {"traceback": kind})
        else:
            self.set_fatal(kind, self.peer_lost if kind == "peer_lost" else self.fatal_info.detail if self.fatal_info else {})
        self.die()

    # ---- death ----
    def log_fatal(self, fatal: Fatal, starting: bool) -> None:
        """The death lines of vLLM 0.33: the executor's (ray_executor_v2.py / multiproc_executor.py) or the
        worker's traceback, then EngineCore's logger.exception (core.py) with the traceback on every line
        behind the prefix (NewLineFormatter), then the API server's output handler (async_llm.py)."""
        log, core = self.api_log, self.core_log
        kind, d = fatal.kind, fatal.detail
        tb_head = [
            "Traceback (most recent call last):",
            f'  File "{SITE}/v1/engine/core.py", line 1578, in run_engine_core',
            "    engine_core.run_busy_loop()",
            f'  File "{SITE}/v1/engine/core.py", line 1620, in run_busy_loop',
            "    self._process_engine_step()",
            f'  File "{SITE}/v1/engine/core.py", line 1655, in _process_engine_step',
            "    outputs, model_executed = self.step_fn()",
            f'  File "{SITE}/v1/engine/core.py", line 480, in step',
            "    model_output = self.model_executor.execute_model(scheduler_output)",
        ]
        if kind == "rank_lost":  # Ray: the executor watches its actors
            rank = d.get("rank", 1)
            core.error("ray_executor_v2.py:522", f"RayWorkerProc rank={[rank]} died unexpectedly, shutting down executor.")
            exc = [
                "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
                "\tclass_name: RayWorkerProc",
                f"\tpid: {d.get('pid')}",
                f"\tip: {d.get('ip')}",
                f"The actor is dead because its node has died. Node Id: {d.get('node_id', '')}",
            ]
        elif kind == "peer_lost":
            # mp: rank 0's collective with the lost rank fails (pynccl_wrapper.py NCCL_CHECK: "NCCL error: " +
            # ncclGetErrorString(ncclRemoteError)); WorkerProc logs it and answers FAILURE, and the executor's
            # collective_rpc raises "Worker failed with error ..." in EngineCore (multiproc_executor.py).
            nccl = "NCCL error: remote process exited or there was a network error"
            self.worker_log(0).error(
                "multiproc_executor.py:1189",
                "\n".join(
                    [
                        "WorkerProc hit an exception.",
                        "Traceback (most recent call last):",
                        f'  File "{SITE}/v1/executor/multiproc_executor.py", line 1180, in _execute_worker_rpc',
                        "    output = func(*args, **kwargs)",
                        f'  File "{SITE}/distributed/device_communicators/pynccl_wrapper.py", line 464, in NCCL_CHECK',
                        '    raise RuntimeError(f"NCCL error: {error_str}")',
                        f"RuntimeError: {nccl}",
                    ]
                ),
            )
            exc = [f"RuntimeError: Worker failed with error '{nccl}', please check the stack trace above for the root cause"]
        elif kind == "gcs_lost":
            core.error("ray_executor_v2.py:522", "RayWorkerProc rank=[0, 1] died unexpectedly, shutting down executor.")
            exc = ["ray.exceptions.RaySystemError: System error: Failed to connect to GCS at " + str(d.get("address"))]
        elif kind == "drafter_lost":
            core.error(SIM, f"[simulator] Remote drafter at {self.drafter_url} is unreachable: {d.get('why')}")
            exc = [f"ConnectionError: remote drafter {self.drafter_url} unreachable"]
        elif kind == "oom_start":
            exc = [
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
                "119.70 GiB of which 1.12 GiB is free. Process has 117.10 GiB memory in use."
            ]
        elif kind == "engine_bug":
            exc = str(d.get("traceback", "RuntimeError: simulator engine error")).splitlines()
        else:  # device-side assert (concurrent long context, or forced): the worker's traceback reaches the log
            wl = self.worker_log(1 if 1 in self.rank_nodes else 0)
            cuda = [
                "Traceback (most recent call last):",
                f'  File "{SITE}/v1/worker/gpu_model_runner.py", line 2612, in execute_model',
                "    model_output = self.model(",
                f'  File "{SITE}/models/deepseek_v4/nvidia/model.py", line 1318, in forward',
                "    attn_output = self.sparse_mla_attn(q, kv_cache, attn_metadata)",
                f'  File "{SITE}/models/deepseek_v4/sparse_mla.py", line 744, in forward',
                "    topk_indices = self.indexer(hidden_states, positions)",
                "torch.AcceleratorError: CUDA error: device-side assert triggered",
                "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
                "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
                "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
            ]
            wl.raw("\n".join(cuda))
            exc = [
                "ray.exceptions.RayTaskError(AcceleratorError): ray::RayWorkerProc.execute_method()"
                if self.backend == "ray"
                else "RuntimeError: Worker failed with error 'CUDA error: device-side assert triggered'",
                "torch.AcceleratorError: CUDA error: device-side assert triggered",
                "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
            ]
        if starting:
            core.error("core.py:1584", "\n".join(["EngineCore failed to start."] + tb_head + exc))
        else:
            core.error("core.py:1586", "\n".join(["EngineCore encountered a fatal error."] + tb_head + exc))
            log.error(
                "async_llm.py:943",
                "\n".join(
                    [
                        "AsyncLLM output_handler failed.",
                        "Traceback (most recent call last):",
                        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for "
                        "the root cause.",
                    ]
                ),
            )
        vlog.plain("\n".join(["Traceback (most recent call last):", *exc]), sys.stderr)

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
        crash_after = self.knobs.faults.get("crash_after")
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
            if self.drafter_url and now - last_drafter >= DRAFTER_CHECK_S:
                last_drafter = now
                drafter_failures = self._check_drafter(drafter_failures)
            if not self.cfg.disable_log_stats and now - last_log >= interval:
                elapsed = now - last_log
                last_log = now
                last_prompt, last_gen = self._log_stats(elapsed, last_prompt, last_gen)

    def _check_drafter(self, failures: int) -> int:
        """One /health check of the remote drafter; returns the failures in a row since. Each failure
        and the drafter's return are logged (the overlay's lines are the simulator's)."""
        url = self.drafter_url
        if drafter_healthy(url):
            if failures:
                self.core_log.info(
                    SIM, f"[simulator] Remote drafter at {url} answers /health again after {failures} failed check(s)"
                )
            return 0
        failures += 1
        if failures >= DRAFTER_LOST_CHECKS:
            self.set_fatal("drafter_lost", {"why": f"{DRAFTER_LOST_CHECKS} failed health checks"})
            self.die()
        else:
            self.core_log.warning(
                SIM, f"[simulator] Remote drafter at {url} did not answer /health ({failures} of {DRAFTER_LOST_CHECKS} checks)"
            )
        return failures

    def _runtime_faults(self, faults: dict) -> None:
        eng = self.engine
        if eng is None:
            return
        if "crash_now" in faults and not eng.dead:
            eng.crash("device_assert")
        eng.set_hang("hang" in faults)
        eng.slow_factor = faults.get("slow_decode", 1.0) or 1.0
        # what /sim/state reports, once in effect: a test waits for it, not a sleep (reported before
        # set_hang, whose lock may wait, requests sent at once ran unhung: ci25, ci30, ci36)
        self.applied_faults = dict(faults)

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
        # v1/metrics/loggers.py LoggingStatLogger.log(): optional parts only when non-zero / non-empty.
        parts = [
            f"Avg prompt throughput: {prompt_tp:.1f} tokens/s",
            f"Avg generation throughput: {gen_tp:.1f} tokens/s",
            f"Running: {running} reqs",
            f"Waiting: {waiting} reqs",
        ]
        if iv.get("preemptions"):
            parts.append(f"Preemptions: {iv['preemptions']}")
        parts.append(f"GPU KV cache usage: {usage * 100:.1f}%")
        if queries:
            parts.append(f"Prefix cache hit rate: {hit_rate:.1f}%")
        self.api_log.info("loggers.py:335", "Engine 000: " + ", ".join(parts))
        drafts = iv.get("drafts", 0)
        if drafts:
            accepted, drafted = iv.get("accepted", 0), iv.get("draft_tokens", 0)
            rates = ", ".join(f"{c / drafts:.3f}" for c in pos)
            self.api_log.info(
                "metrics.py:120",
                f"SpecDecoding metrics: Mean acceptance length: {1 + accepted / drafts:.2f}, "
                f"Accepted throughput: {accepted / elapsed:.2f} tokens/s, Drafted throughput: {drafted / elapsed:.2f} "
                f"tokens/s, Accepted: {accepted} tokens, Drafted: {drafted} tokens, Per-position acceptance rate: "
                f"{rates}, Avg Draft acceptance rate: {100.0 * accepted / drafted if drafted else 0:.1f}%",
            )
        return prompt_tp, gen_tp


def _env_float(env: dict, name: str, default: float) -> float:
    try:
        value = float(env.get(name, default))
        return value if value > 0 else default
    except ValueError:
        return default


def print_startup_error(exc_text: str) -> None:
    lines = [
        "Traceback (most recent call last):",
        '  File "/usr/local/bin/vllm", line 10, in <module>',
        "    sys.exit(main())",
        f'  File "{SITE}/entrypoints/cli/main.py", line 73, in main',
        "    args.dispatch_function(args)",
        f'  File "{SITE}/entrypoints/cli/serve.py", line 60, in cmd',
        "    uvloop.run(run_server(args))",
    ]
    vlog.plain("\n".join([*lines, exc_text]), sys.stderr)


def serve(cfg: ServeConfig, knobs: knobs_mod.Knobs, env: dict[str, str]) -> int:
    rt = Runtime(cfg, knobs, env)

    def on_signal(signum, _frame):
        if not rt.ready:
            rt.stop_event.set()
            return
        if rt.draining:
            return
        rt.draining = True
        threading.Thread(target=_drain, args=(rt, signal.Signals(signum).name), daemon=True).start()

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
            rt.core_log.warning(SIM, "[simulator] hang_start: start-up will not finish")
            while True:
                rt.sleep(3600)
        took = rt.compile_and_warmup()
        rt.make_engine()
        rt.core_log.info(
            "core.py:405",
            f"init engine (profile, create kv cache, warmup model) took {took:.2f} s "
            f"(compilation: {rt.compilation_seconds:.2f} s)",
        )
        rt.sleep(rt.phases.server_start)
    except StartupError as e:
        rt.core_log.error("core.py:1584", "EngineCore failed to start.")
        print_startup_error(str(e))
        _teardown(rt)
        return 1
    except Fatal as f:
        rt.log_fatal(f, starting=True)
        _teardown(rt)
        return 1
    except Interrupted:
        rt.api_log.info(SIM, "[simulator] Shutting down during start-up (signal received).")
        _teardown(rt)
        return 0
    rt.engine.start()
    rt.httpd.server_activate()
    rt.ready = True
    threading.Thread(target=rt.httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
    shown = "0.0.0.0" if cfg.host in (None, "") else cfg.host
    rt.api_log.info("entry.py:139", f"Starting vLLM server on http://{shown}:{cfg.port}")
    rt.api_log.info("launcher.py:188", "Available routes are:")
    for route, methods in ROUTES:
        rt.api_log.info("launcher.py:197", f"Route: {route}, Methods: {methods}")
    # uvicorn's own logger: no vLLM prefix.
    vlog.plain(f"INFO:     Started server process [{os.getpid()}]")
    vlog.plain("INFO:     Waiting for application startup.")
    vlog.plain("INFO:     Application startup complete.")
    if "crash_now" in knobs.faults:
        rt.engine.crash("device_assert")
    threading.Thread(target=rt.background, daemon=True).start()
    if rt.fatal_event.is_set():  # a rank died between the last phase and now
        rt.engine.kill(rt.fatal_info.kind)
        rt.die()
    rt.stop_event.wait()
    if rt.dead:
        if env.get("VLLM_KEEP_ALIVE_ON_ENGINE_DEATH", "0") not in ("", "0"):
            threading.Event().wait()  # stay up answering 503, as vLLM does with this set
        time.sleep(knobs.death_linger)
    _shutdown_http(rt)
    _teardown(rt)
    return 1 if rt.dead else 0


def _drain(rt: Runtime, signame: str = "SIGTERM") -> None:
    timeout = rt.cfg.shutdown_timeout
    # v1/engine/core.py: SIGTERM sets shutdown_state REQUESTED; from then on _reject_add_in_shutdown
    # finishes every new request as aborted while the in-flight ones drain.
    rt.engine.begin_shutdown()
    n = rt.engine.num_unfinished()
    mode = "abort" if timeout == 0 else "drain"
    # vLLM 0.33's shutdown lines (entrypoints/launchers/launcher.py serve_http, v1/engine/core.py
    # run_engine_core's signal_handler and _handle_shutdown)
    rt.api_log.info("launcher.py:256", "[shutdown] API server: shutdown triggered")
    rt.api_log.info("launcher.py:272", f"[shutdown] API server: stopping engine client mode={mode} timeout={timeout}s")
    rt.core_log.info("core.py:1525", f"[shutdown] EngineCore: trigger received signal={signame}")
    rt.core_log.info("core.py:1712", f"[shutdown] EngineCore: start mode={mode} timeout={timeout}s")
    if n and timeout == 0:
        rt.core_log.info("core.py:1721", f"[shutdown] EngineCore: aborting in-flight requests count={n}")
    elif n:
        rt.core_log.info("core.py:1732", f"[shutdown] EngineCore: draining in-flight requests count={n} timeout={timeout}s")
    deadline = time.monotonic() + max(0, timeout)
    with rt.inflight_lock:
        # The drain waits for the work there was at SIGTERM (core.py: until not has_work()); requests
        # that arrive during it are rejected at once and never become work, however many keep coming.
        draining = set(rt.inflight)
    if timeout > 0:
        with rt.inflight_lock:
            while draining & rt.inflight and time.monotonic() < deadline and not rt.dead:
                rt.inflight_lock.wait(min(0.1, max(0.0, deadline - time.monotonic())))
    left = rt.engine.abort_all()
    if left:
        rt.api_log.info(SIM, f"[simulator] Shutdown timeout reached: aborted {len(left)} in-flight request(s).")
    else:  # every in-flight request finished within the timeout
        rt.core_log.info("core.py:1743", "[shutdown] EngineCore: request processing complete; starting resource teardown")
    # let the aborted responses reach their clients
    end = time.monotonic() + 2.0
    with rt.inflight_lock:
        while draining & rt.inflight and time.monotonic() < end:
            rt.inflight_lock.wait(0.05)
    rt.stop_event.set()


def _shutdown_http(rt: Runtime) -> None:
    vlog.plain("INFO:     Shutting down")
    if rt.httpd:
        threading.Thread(target=rt.httpd.shutdown, daemon=True).start()
        time.sleep(0.15)
        rt.httpd.server_close()
    vlog.plain("INFO:     Waiting for application shutdown.")
    vlog.plain("INFO:     Application shutdown complete.")
    vlog.plain(f"INFO:     Finished server process [{os.getpid()}]")


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
    """`vllm serve ... --nnodes N --node-rank R --headless` (entrypoints/cli/serve.py run_headless): no API
    server and no engine; a MultiprocExecutor that starts this node's `VllmWorker-<rank>` processes
    (mp_worker.py) and watches them inline. A worker that dies unexpectedly is logged in the executor's
    words and the command returns (exit 0, as `vllm serve` returns from run_headless); SIGTERM stops the
    workers. The process is not decorated, so vLLM's prefix names it `MainProcess`."""
    import subprocess

    log = vlog.Logger(f"MainProcess pid={os.getpid()}")
    try:
        validate_multinode(cfg)  # create_engine_config(headless=True)
        if cfg.node_rank == 0:
            raise StartupError("ValueError: [simulator] a headless node_rank 0 (data-parallel engines) is not simulated")
    except StartupError as e:
        print_startup_error(str(e))
        return 1
    stopping = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.set())
    log.info(
        "serve.py:224",
        f"Launching vLLM (v{knobs.vllm_version}) headless multiproc executor, with head node address "
        f"{cfg.master_addr}:{cfg.master_port} for torch.distributed process group.",
    )
    world = cfg.tensor_parallel_size * cfg.pipeline_parallel_size
    local = world // cfg.nnodes
    address = f"{cfg.master_addr}:{cfg.master_port}"
    procs = {
        r: subprocess.Popen([sys.executable, "-m", "sparkctl_lab.sim.mp_worker", address, str(r), str(world)], env=env)
        for r in range(cfg.node_rank * local, (cfg.node_rank + 1) * local)
    }
    while not stopping.wait(0.1):
        died = next((r for r, p in procs.items() if p.poll() is not None), None)
        if died is not None:  # start_worker_monitor(inline=True): proc.name, proc.exitcode (-N for a signal)
            log.error(
                "multiproc_executor.py:380",
                f"Worker proc VllmWorker-{died} died unexpectedly (exit code: {procs[died].returncode}), shutting down executor.",
            )
            break
    alive = [p for p in procs.values() if p.poll() is None]
    log.info("multiproc_executor.py:580", f"[shutdown] Executor: waiting for worker exit count={len(alive)}")
    for p in alive:
        p.terminate()
    grace = time.monotonic() + _env_float(env, "VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS", 5.0)
    for p in alive:
        try:
            p.wait(max(0.0, grace - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
    log.info("multiproc_executor.py:587", "[shutdown] Executor: all workers exited gracefully")
    return 0
