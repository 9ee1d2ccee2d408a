"""`vllm serve`'s start-up phases after the executor has placed the ranks, each with vLLM 0.33's lines.

banner and args -> config checks -> weights (the MoE backend each rank selects; a remote sPLIce
drafter named by SPLICE_DRAFTER_URL must answer /health) -> torch.compile per rank (cache hit or
miss at <cache root>/torch_compile_cache/<hash>/rank_<r>_0/<tag>/) -> profiling -> KV cache size
-> FlashInfer JIT and autotune -> CUDA graphs -> the engine. Every phase sleeps its simulated
time x SIM_TIME_SCALE (Runtime.sleep). docs/conformance.md gives each line's vLLM source.
"""

from __future__ import annotations

import http.client
import os
import sys
import time
import urllib.parse

from . import calibration, compile_cache, vlog, weights
from .engine import Engine
from .metrics import VllmMetrics
from .serve_args import StartupError, validate

SIM = "simulator:0"  # the [file:line] of lines that are the simulator's own (they say [simulator])

# map_nvfp4_backend() / map_mxfp4_backend() of vllm/model_executor/layers/fused_moe/oracle/{nvfp4,mxfp4}.py:
# --moe-backend value -> the enum value(s) vLLM logs, first = the one selected here.
MOE_BACKENDS = {
    "nvfp4": {
        "b12x": ["B12X"],
        "cutlass": ["VLLM_CUTLASS"],
        "flashinfer_trtllm": ["FLASHINFER_TRTLLM"],
        "flashinfer_cutlass": ["FLASHINFER_CUTLASS"],
        "flashinfer_cutedsl": ["FLASHINFER_CUTEDSL"],
        "flashinfer_moe_ep_cutedsl": ["FLASHINFER_MOE_EP_CUTEDSL"],
        "flashinfer_b12x": ["FLASHINFER_B12X"],
        "marlin": ["MARLIN"],
        "humming": ["HUMMING"],
        "emulation": ["EMULATION"],
    },
    "mxfp4": {
        "b12x": ["B12X_MXFP4_MXFP8", "B12X_MXFP4_BF16"],
        "deep_gemm": ["DEEPGEMM_MXFP4"],
        "flashinfer_trtllm": ["FLASHINFER_TRTLLM_MXFP4_BF16", "FLASHINFER_TRTLLM_MXFP4_MXFP8"],
        "flashinfer_trtllm_afp8": ["FLASHINFER_TRTLLM_MXFP4_MXFP8"],
        "flashinfer_cutlass": ["FLASHINFER_CUTLASS_MXFP4_BF16", "FLASHINFER_CUTLASS_MXFP4_MXFP8"],
        "flashinfer_cutlass_afp8": ["FLASHINFER_CUTLASS_MXFP4_MXFP8"],
        "flashinfer_moe_ep_cutedsl": ["FLASHINFER_MOE_EP_CUTEDSL"],
        "flashinfer_moe_ep_mega_deep_gemm": ["FLASHINFER_MOE_EP_DEEP_GEMM"],
        "triton": ["TRITON"],
        "triton_unfused": ["TRITON_UNFUSED"],
        "humming": ["HUMMING"],
        "marlin": ["MARLIN"],
        "aiter": [
            "AITER_MXFP4_BF16",
            "AITER_TRITON_MXFP4_BF16",
            "AITER_MXFP4_FP8",
            "AITER_MXFP4_MXFP4",
            "AITER_TRITON_MXFP4_MXFP4",
        ],
        "aiter_triton_mxfp4_bf16": ["AITER_TRITON_MXFP4_BF16"],
        "aiter_mxfp4_fp8": ["AITER_MXFP4_FP8"],
        "aiter_triton_mxfp4_mxfp4": ["AITER_TRITON_MXFP4_MXFP4"],
        "aiter_mxfp4_mxfp4": ["AITER_MXFP4_MXFP4"],
        "xpu": ["XPU"],
        "cpu": ["CPU"],
        "emulation": ["EMULATION"],
    },
}
# nvfp4.py select_nvfp4_moe_backend(): AVAILABLE_BACKENDS, the list its line names (not reordered on
# SM121: prioritize_humming only moves HUMMING on SM90).
NVFP4_AVAILABLE = [
    "FLASHINFER_TRTLLM",
    "FLASHINFER_CUTEDSL",
    "FLASHINFER_CUTEDSL_BATCHED",
    "FLASHINFER_CUTLASS",
    "VLLM_CUTLASS",
    "MARLIN",
    "HUMMING",
    "EMULATION",
]
# nvfp4.py NVFP4_BACKENDS_WITH_CLAMP: what a checkpoint that sets swiglu_limit may run (and lists)
NVFP4_WITH_CLAMP = {
    "B12X",
    "FLASHINFER_TRTLLM",
    "FLASHINFER_CUTLASS",
    "FLASHINFER_CUTEDSL",
    "FLASHINFER_MOE_EP_CUTEDSL",
    "VLLM_CUTLASS",
    "MARLIN",
    "EMULATION",
    "HUMMING",
}


class MoeChoice:
    """The MoE backend a target rank selects, and the [file:line] of the line that says so."""

    def __init__(self, quant: str, requested: str, fallback: bool, swiglu_limit: float | None = None):
        self.quant, self.requested = quant, requested
        table = MOE_BACKENDS[quant]
        self.error = None
        auto = requested == "auto" or fallback
        if not auto and requested not in table:
            path = "NvFP4" if quant == "nvfp4" else "MXFP4"
            self.error = (
                f"ValueError: moe_backend='{requested}' is not supported for {path} MoE. Expected one of {list(table.keys())}."
            )
        elif not auto and quant == "nvfp4" and swiglu_limit is not None and table[requested][0] not in NVFP4_WITH_CLAMP:
            # nvfp4.py select_nvfp4_moe_backend(): an explicit backend without the SwiGLU clamp is refused
            self.error = (
                f"ValueError: Model sets swiglu_limit={swiglu_limit}, but the explicitly requested "
                f"moe_backend={requested!r} does not apply the SwiGLU clamp. Use 'flashinfer_trtllm', "
                "'flashinfer_cutlass', 'flashinfer_cutedsl', 'flashinfer_moe_ep_cutedsl', 'cutlass', 'b12x', "
                "'marlin', or 'humming' instead."
            )
        potential = NVFP4_AVAILABLE if swiglu_limit is None else [b for b in NVFP4_AVAILABLE if b in NVFP4_WITH_CLAMP]
        # auto on GB10: the FlashInfer TRTLLM/CuteDSL kernels are SM100-only, so the selection ends on
        # Marlin (the seeds' "silent Marlin fallback"); the `marlin` fault forces the same.
        self.name = "MARLIN" if auto else (table.get(requested) or ["?"])[0]
        self.marlin = self.name == "MARLIN"
        if quant == "nvfp4":
            self.where = "nvfp4.py:314" if auto else "nvfp4.py:270"
            self.line = f"Using '{self.name}' NvFp4 MoE backend out of potential backends: {potential}."
        else:
            self.where = "mxfp4.py:827" if auto else "mxfp4.py:609"
            self.line = f"Using '{self.name}' Mxfp4 MoE backend."


class Interrupted(Exception):
    """Start-up stopped by a signal or by a fatal cluster event."""


class Fatal(Exception):
    def __init__(self, kind: str, detail: dict | None = None):
        super().__init__(kind)
        self.kind, self.detail = kind, detail or {}


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


def _mmss(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 60:02d}:{s % 60:02d}"


class StartupPhases:
    """Mixed into Runtime: the phases from the banner to a ready engine."""

    def boot(self) -> None:
        cfg, log = self.cfg, self.api_log
        self.boot_wall = time.time()
        v = self.knobs.vllm_version
        # entrypoints/common/startup.py log_version_and_model(): one multi-line message (the logo).
        log.info(
            "startup.py:38",
            "\n"
            "       █     █     █▄   ▄█\n"
            f" ▄▄ ▄█ █     █     █ ▀▄▀ █  version {v}\n"
            f"  █▄█▀ █     █     █     █  model   {cfg.model}\n"
            "   ▀▀  ▀▀▀▀▀ ▀▀▀▀▀ ▀     ▀\n",
        )
        log.info("startup.py:96", f"non-default args: {cfg.non_default}")
        if "model" in cfg.non_default and not cfg.non_default.get("model_tag"):
            log.warning(
                "argparse_utils.py:330",
                "With `vllm serve`, you should provide the model as a positional argument or in "
                "a config file instead of via the `--model` option. The `--model` option will be removed in a future version.",
            )

    def check_config(self) -> None:
        validate(self.cfg, self.knobs.model_max_len if self.role == "target" else 131072, self.knobs.gpu_count)
        if self.knobs.check_model_path:
            for model in self._weight_dirs():
                if not os.path.isdir(model):
                    raise StartupError(
                        f"OSError: {model} is not a local folder and is not a valid model identifier listed on "
                        "'https://huggingface.co/models'"
                    )
                err = weights.config_error(model)
                if err:
                    raise StartupError(err)
        if self.role == "target" and self.moe.error:
            raise StartupError(self.moe.error)
        self.api_log.info(
            "model.py:744",
            "Resolved architecture: " + ("DeepseekV4ForCausalLM" if self.role == "target" else "DeepSeekV4MTPModel"),
        )

    def _weight_dirs(self) -> list[str]:
        """The model folders each rank loads: the model, then a drafter loaded in-process (not a remote one)."""
        dirs = [self.cfg.model]
        spec = self.cfg.speculative or {}
        if self.role == "target" and spec.get("model") and not self.drafter_url:
            if spec.get("method") not in ("ngram", "ngram_gpu", "suffix"):
                dirs.append(spec["model"])
        return dirs

    def _check_weights(self) -> tuple[int | None, dict | None, int]:
        """SIM_CHECK_MODEL_PATH: every rank reads the folders on its own node, as vLLM's workers do.
        (files rank 0 loads, the first failing rank's error or None, that rank)."""
        dirs = self._weight_dirs()
        reports = {}
        for r in sorted(self.rank_nodes):
            node = self.rank_nodes[r]
            if node.get("remote"):
                reports[r] = self.driver.call(node["node_id"], "check_weights", {"models": dirs})
            else:
                reports[r] = weights.report(dirs)
        bad = next((r for r in sorted(reports) if reports[r]["error"]), None)
        return reports[0]["shards"] or None, reports[bad]["error"] if bad is not None else None, bad or 0

    def _weights_failed(self, rank: int, err: dict) -> StartupError:
        """The rank's loader exception as vLLM 0.33 reports it: under Ray the worker's RayTaskError,
        with mp the worker's traceback and WorkerProc's exception, in one process the exception itself."""
        from .vlog import SITE

        loader, utils = (
            f"{SITE}/model_executor/model_loader/default_loader.py",
            f"{SITE}/model_executor/model_loader/weight_utils.py",
        )
        frames = {
            "prepare": [
                f'  File "{loader}", line 270, in _get_weights_iterator',
                "    hf_folder, hf_weights_files, use_safetensors, index_file = (",
                f'  File "{loader}", line 252, in _prepare_weights',
                "    hf_weights_files = filter_duplicate_safetensors_files(",
                f'  File "{utils}", line 611, in filter_duplicate_safetensors_files',
                "    raise FileNotFoundError(",
            ],
            "open": [
                f'  File "{utils}", line 1244, in safetensors_weights_iterator',
                '    with safe_open(st_file, framework="pt") as f:',
            ],
        }[err["where"]]
        if err["line"].startswith("RuntimeError: Cannot find any model weights"):
            frames = frames[:2] + [f'  File "{loader}", line 259, in _prepare_weights', "    raise RuntimeError("]
        elif err["line"].startswith(("json.", "KeyError")):
            frames = frames[:4] + [
                f'  File "{utils}", line 602, in filter_duplicate_safetensors_files',
                '    weight_map = json.load(f)["weight_map"]',
            ]
        node = self.rank_nodes.get(rank, {})
        exc_type = err["line"].split(":", 1)[0].rsplit(".", 1)[-1]
        if self.backend == "ray":
            ip = node.get("ip") or self._driver_ip()
            head = f"ray.exceptions.RayTaskError({exc_type}): ray::RayWorkerProc.initialize_worker() (pid={node.get('pid')}, ip={ip})"
            return StartupError("\n".join([head, *frames, err["line"]]))
        if len(self.rank_nodes) > 1:
            vlog.plain("\n".join(["Traceback (most recent call last):", *frames, err["line"]]), sys.stderr)
            return StartupError(
                "Exception: WorkerProc initialization failed due to an exception in a background process. "
                "See stack trace for root cause."
            )
        return StartupError("\n".join([*frames, err["line"]]))

    def load_weights(self) -> None:
        cfg = self.cfg
        lead = self.worker_log(0)
        lead.info("gpu_model_runner.py:4978", f"Starting to load model {cfg.model}...")
        if self.role == "target":
            for r in self.rank_nodes:  # each rank's MoE layers select their kernels while the model is built
                self.worker_log(r).info(self.moe.where, self.moe.line)
        shards, failed, failed_rank = (None, None, 0)
        if self.knobs.check_model_path:
            shards, failed, failed_rank = self._check_weights()
            if failed and failed["where"] == "prepare" and failed_rank == 0 and failed["model"] == cfg.model:
                raise self._weights_failed(failed_rank, failed)  # refused before rank 0 opens a file
        shards = shards or (46 if self.role == "target" else 4)
        # rank 0's bar stops where its own load fails (another rank's failure surfaces once rank 0 is done)
        stop = failed["loaded"] if failed and failed_rank == 0 and failed["model"] == cfg.model else shards
        wall = 0.0
        for i in sorted({i for i in (0, shards // 4, shards // 2, 3 * shards // 4, shards) if i <= stop} | {stop}):
            if i:
                wall += self.sleep(self.phases.weights / 4)
            pct = int(100 * i / shards)
            # tqdm (model_loader/weight_utils.py desc "Loading safetensors checkpoint shards"): no log prefix.
            lead.raw(f"Loading safetensors checkpoint shards: {pct:3d}% Completed | {i}/{shards} [{_mmss(wall)}<?, ?it/s]")
        if failed:
            raise self._weights_failed(failed_rank, failed)
        lead.info("default_loader.py:506", f"Loading weights took {wall:.2f} seconds")
        if self.role == "target" and self.marlin and self.moe.quant == "nvfp4":
            # marlin_utils_fp4.py prepare_nvfp4_moe_layer_for_marlin(), when the weights are repacked.
            for r in self.rank_nodes:
                self.worker_log(r).warning(
                    "marlin_utils_fp4.py:340",
                    "Your GPU does not have native support for FP4 computation "
                    "but FP4 quantization is being used. Weight-only FP4 compression will be used leveraging "
                    "the Marlin kernel. This may degrade performance for compute-heavy workloads.",
                )
        spec = cfg.speculative or {}
        if spec and self.role == "target":
            if self.drafter_url:
                self._wait_for_drafter()
            elif spec.get("method") not in ("ngram", "ngram_gpu", "suffix"):
                lead.info("gpu_model_runner.py:5010", "Loading drafter model...")
                wall += self.sleep(self.phases.drafter_local)
        gib = self.profile.weights_gib if self.role == "target" else 3.2
        lead.info("gpu_model_runner.py:5088", f"Model loading took {gib:.2f} GiB memory and {wall:.6f} seconds")

    def _wait_for_drafter(self) -> None:
        # The sPLIce image's remote drafter (seed 000) is not upstream vLLM: its lines are the simulator's.
        lead = self.worker_log(0)
        url = self.drafter_url
        lead.info(SIM, f"[simulator] Loading drafter model... (remote drafter at {url})")
        waited = 0.0
        while not drafter_healthy(url):
            self.sleep(1.0)
            waited += 1.0
            if waited % 10 == 0:
                lead.warning(SIM, f"[simulator] Waiting for the remote drafter at {url} to become healthy ({int(waited)} s)")
            if waited >= 1800:
                raise StartupError(f"TimeoutError: the remote drafter at {url} did not become healthy within 1800 seconds")
        self.sleep(self.phases.drafter_remote_connect)
        lead.info(SIM, f"[simulator] Connected to remote drafter at {url}")

    # ---- compile caches ----
    def _rank_specs(self) -> list[dict]:
        cfg = self.cfg
        h, factors = compile_cache.compile_hash(self.knobs.vllm_version, cfg.hash_inputs, self.env)
        prefixes = ["backbone"]  # compilation/backends.py model_tag; drafters compile under set_model_tag(...)
        method = (cfg.speculative or {}).get("method")
        if cfg.speculative and not self.drafter_url and self.role == "target":
            if method == "dspark":
                prefixes.append("dspark_head")
            elif method in ("eagle", "eagle3", "mtp", "deepseek_mtp", "medusa"):
                prefixes.append("eagle_head")
            elif method in ("draft_model", "dflash", "mlp_speculator"):
                prefixes.append("draft_model")
        ops = ["sampling_sm121", "sparse_mla_decode_sm120"]
        if self.role == "target" and not self.marlin:
            ops.append("fused_moe_b12x_sm121")
        return [
            {
                "hash": h,
                "rank": r,
                "dp_rank": 0,
                "prefixes": prefixes,
                "compile_range": [1, cfg.max_num_batched_tokens],
                "factors": factors,
                "flashinfer_ops": ops,
                "cache_root": self.env.get("VLLM_CACHE_ROOT"),
            }
            for r in sorted(self.rank_nodes)
        ]

    def compile_and_warmup(self) -> float:
        """Profile, compile (or load), KV cache, warm-up; returns the init-engine wall seconds."""
        t0 = time.monotonic()
        ph = self.phases
        specs = self._rank_specs()
        prefixes = specs[0]["prefixes"]
        # (spec, what its node has cached, its logger) per rank, in rank order
        ranks = [(s, self.rank_call(s["rank"], "init_rank", s), self.worker_log(s["rank"])) for s in specs]
        self.cache_report = {str(s["rank"]): st for s, st, _ in ranks}
        compiled_all = all(st["compiled_hit"] for _, st, _ in ranks)
        range_ = f"(1, {self.cfg.max_num_batched_tokens})"  # config/utils.py Range.__str__
        c0 = time.monotonic()
        for _, st, wl in ranks:
            for prefix in prefixes:
                wl.info(
                    "backends.py:1125",
                    f"[{prefix}] Using cache directory: {os.path.join(st['rank_dir'], prefix)} for vLLM's torch.compile",
                )
        dyn = self.sleep(ph.dynamo_warm if compiled_all else ph.dynamo_cold)
        for _, _, wl in ranks:
            for prefix in prefixes:
                wl.info("backends.py:1187", f"[{prefix}] Dynamo bytecode transform time: {dyn:.2f} s")
        for _, st, wl in ranks:
            if not st["compiled_hit"]:
                for prefix in prefixes:
                    wl.info("backends.py:401", f"[{prefix}] Cache the graph of compile range {range_} for later use")
        took = self.sleep(ph.compile_warm if compiled_all else ph.compile_cold)
        # a rank that hits while another compiles has loaded its graphs long before the others finish
        load_took = took if compiled_all else min(took, ph.compile_warm * self.knobs.time_scale)
        for s, st, wl in ranks:
            for prefix in prefixes:
                if not st["compiled_hit"]:
                    wl.info("backends.py:417", f"[{prefix}] Compiling a graph for compile range {range_} takes {took:.2f} s")
                    continue
                wl.info(
                    "backends.py:310",
                    f"[{prefix}] Directly load the compiled graph(s) for compile range {range_} "
                    f"from the cache, took {load_took:.3f} s",
                )
                if compiled_all:
                    wl.info("decorators.py:326", f"[{prefix}] Directly load AOT compilation from path {st['aot_dir']}/model")
            if not st["compiled_hit"]:
                self.rank_call(s["rank"], "save_rank", {**s, "compiled": True})
        self.compilation_seconds = time.monotonic() - c0
        for _, _, wl in ranks:
            wl.info("monitor.py:62", f"[backbone] torch.compile took {self.compilation_seconds:.2f} s in total")
        prof = self.sleep(ph.profile_run)
        self.worker_log(0).info("monitor.py:91", f"[backbone] Initial profiling/warmup run took {prof:.2f} s")
        self._kv_cache()
        # FlashInfer JIT (outside the vLLM cache root; FlashInfer's own lines, told here by the simulator).
        fi_all = all(st["flashinfer_hit"] for _, st, _ in ranks)
        for s, st, wl in ranks:
            if not st["flashinfer_hit"]:
                wl.info(
                    SIM, f"[simulator] flashinfer.jit: compiling JIT modules {s['flashinfer_ops']} into {st['flashinfer_dir']}"
                )
        took = self.sleep(ph.flashinfer_jit_warm if fi_all else ph.flashinfer_jit_cold)
        for s, st, wl in ranks:
            if not st["flashinfer_hit"]:
                self.rank_call(s["rank"], "save_rank", {**s, "flashinfer": True})
                wl.info(SIM, f"[simulator] flashinfer.jit: JIT compilation finished in {took:.2f} s")
        for s, st, wl in ranks:
            if st["autotune_hit"]:
                wl.info(
                    "flashinfer_sparse_mla_warmup.py:224",
                    f"FlashInfer SM120 sparse MLA DSv4 decode autotune cache loaded on "
                    f"rank {s['rank']} from {st['autotune_file']}.",
                )
            elif s["rank"] == 0:  # is_leader
                wl.info(
                    "flashinfer_sparse_mla_warmup.py:167",
                    f"Autotuning FlashInfer SM120 sparse MLA DSv4 decode with cache: {st['autotune_file']}",
                )
        self.sleep(ph.autotune_warm if all(st["autotune_hit"] for _, st, _ in ranks) else ph.autotune_cold)
        for s, st, _ in ranks:
            if not st["autotune_hit"]:
                self.rank_call(s["rank"], "save_rank", {**s, "autotune": True})
        took = self.sleep(ph.cudagraph_warm if (compiled_all and fi_all) else ph.cudagraph_cold)
        for _, _, wl in ranks:
            wl.info("gpu_model_runner.py:6516", f"Graph capturing finished in {max(1, round(took))} secs, took 0.34 GiB")
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
            self.worker_log(r).info("gpu_worker.py:772", f"Available KV cache memory: {max(0.0, available):.2f} GiB")
        if pool <= 0:
            raise StartupError(
                "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
                "when initializing the engine."
            )
        model_max = k.model_max_len if self.role == "target" else 131072
        if cfg.max_model_len is None:
            mml = model_max
            if pool < model_max:
                raise StartupError(self._kv_too_small(model_max, pool, available))
        elif cfg.max_model_len == -1:
            mml = min(model_max, pool)
        else:
            mml = cfg.max_model_len
            if mml > pool:
                raise StartupError(self._kv_too_small(mml, pool, available))
        # kv_cache_utils.py update_kv_cache_capacity(): num_tokens = int(max_concurrency * max_model_len),
        # one line; the same figure becomes cache_config.kv_cache_size_tokens (vllm:cache_config_info).
        concurrency = pool / mml
        self.max_model_len, self.kv_pool, self.kv_concurrency = mml, pool, concurrency
        self.core_log.info(
            "kv_cache_utils.py:1147",
            f"GPU KV cache size: {pool:,} tokens, Maximum concurrency for {mml:,} tokens per request: {concurrency:.2f}x",
        )

    def _kv_too_small(self, mml: int, pool: int, available: float) -> str:
        need = available * mml / pool if pool else 0.0
        return (
            f"ValueError: To serve at least one request with the models's max seq len ({mml}), ({need:.2f} GiB KV cache is "
            f"needed, which is larger than the available KV cache memory ({available:.2f} GiB). Based on the available "
            f"memory, the estimated maximum model length is {pool}. Try increasing `gpu_memory_utilization` or "
            "decreasing `max_model_len` when initializing the engine."
        )

    # ---- the engine ----
    def make_engine(self) -> None:
        cfg = self.cfg
        k = cfg.num_speculative_tokens if self.role == "target" else 0
        spec = self.spec_params(k) if k else None
        self.metrics = VllmMetrics(cfg.served_model_name, self.max_model_len, k, self.cache_config_info())
        step = self.step_model
        if self.role == "drafter":
            step = calibration.StepModel(
                fixed_ms=6.0,
                per_token_ms=0.3,
                draft_fixed_ms=0,
                draft_per_seq_ms=0,
                prefill_ms_per_token=0.02,
                prefill_attn_us_per_ktok=0.05,
            )
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
            crash_context_tokens=self.knobs.crash_context_tokens if self.role == "target" else 0,
            on_fatal=self._engine_fatal,
        )
        if "crash_on_request" in self.knobs.faults:
            self.engine.crash_on_work = True
        d1 = step.step_seconds(1, k, marlin=self.marlin)
        self.core_log.info(
            SIM,
            f"[simulator] step model: profile={self.profile.name}, k={k}, "
            f"decode step {d1 * 1000:.1f} ms at 1 stream, {step.step_seconds(4, k, marlin=self.marlin) * 1000:.1f} ms "
            f"at 4 streams (moe={'marlin x%.1f' % step.marlin_factor if self.marlin else self.moe.name}), "
            f"time scale {self.knobs.step_time_scale:g}",
        )

    def cache_config_info(self) -> dict[str, str]:
        """vllm:cache_config_info's labels: CacheConfig.metrics_info() = every field of vllm/config/cache.py's
        CacheConfig as str(value), in declaration order (engine is added by the logger)."""
        cfg = self.cfg
        values = {
            "block_size": cfg.block_size,
            "user_specified_block_size": True,
            "kv_cache_layout": None,
            "prefix_match_unit": None,
            "gpu_memory_utilization": cfg.gpu_memory_utilization,
            "cache_dtype": cfg.kv_cache_dtype,
            "is_attention_free": False,
            "num_gpu_blocks_override": None,
            "sliding_window": None,
            "enable_prefix_caching": cfg.enable_prefix_caching,
            "prefix_caching_hash_algo": "sha256",
            "prefix_cache_retention_interval": 0,
            "kv_cache_dtype_skip_layers": [],
            "mamba_page_size_padded": None,
            "skip_page_size_padded": None,
            "mamba_block_size": None,
            "mamba_cache_dtype": "auto",
            "mamba_ssm_cache_dtype": "auto",
            "mamba_cache_mode": "none",
            "enable_mamba_shared_prefix_checkpoint": False,
            "replayssm_buffer_len": 16,
            "use_replayssm": False,
            "use_kda_recoverssm": False,
            "num_gpu_blocks": self.kv_pool // cfg.block_size,
            "num_cpu_blocks": None,
            "simple_cpu_offload_num_blocks": None,
            "effective_attention_block_size": None,
            "kv_cache_size_tokens": self.kv_pool,
            "kv_cache_max_concurrency": self.kv_concurrency,
            "hash_block_size": cfg.block_size,
            "cache_hit_alignment_tokens": None,
            "kv_sharing_fast_prefill": False,
            "swa_bounded_replay": True,
            "kv_cache_memory_bytes": None,
            "kv_offloading_size": None,
            "kv_offloading_backend": "native",
            "_block_size_resolved": True,
        }
        return {k: str(v) for k, v in values.items()}
