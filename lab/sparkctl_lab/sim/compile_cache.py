"""Compile artefacts at vLLM's cache layout, keyed by what vLLM's compile hash covers.

`<VLLM_CACHE_ROOT>/torch_compile_cache/<hash>/rank_<r>_<dp>/<prefix>/` holds the compiled graphs
(`vllm_compile_cache.py` indexes them and is written last, so an interrupted compile is a miss);
`torch_compile_cache/torch_aot_compile/<sha256>/rank_<r>_<dp>/model` the AOT artefact;
`<rank dir>/inductor_cache` and `triton_cache` (unless TRITON_CACHE_DIR is set) the kernels;
`<root>/flashinfer_autotune_cache/...` the autotuner's configs. FlashInfer's JIT cache is outside
the root: `$FLASHINFER_WORKSPACE_BASE/.cache/flashinfer/` (default base `$HOME`).

The hash covers the vLLM version, the model/cache/parallel/scheduler/speculative/compilation/
kernel settings and every `VLLM_*` variable except those vLLM ignores (envs.compile_factors):
served name, host, port, API keys, gpu_memory_utilization and shutdown timeout do not change it.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass

FLASHINFER_VERSION = "0.6.12"
SM = "121a"  # GB10

# vllm/envs.py compile_factors(): VLLM_* variables that never change compiled code.
IGNORED_ENV = {
    "VLLM_RPC_BASE_PATH",
    "VLLM_USE_MODELSCOPE",
    "VLLM_RINGBUFFER_WARNING_INTERVAL",
    "VLLM_DEBUG_DUMP_PATH",
    "VLLM_PORT",
    "VLLM_CACHE_ROOT",
    "VLLM_SERVER_DEV_MODE",
    "VLLM_DP_MASTER_IP",
    "VLLM_DP_MASTER_PORT",
    "VLLM_NIXL_SIDE_CHANNEL_HOST",
    "VLLM_RANDOMIZE_DP_DUMMY_INPUTS",
    "VLLM_CI_USE_S3",
    "VLLM_MODEL_REDIRECT_PATH",
    "VLLM_HOST_IP",
    "VLLM_FORCE_AOT_LOAD",
    "VLLM_USAGE_STATS_SERVER",
    "VLLM_NO_USAGE_STATS",
    "VLLM_DO_NOT_TRACK",
    "VLLM_LOGGING_LEVEL",
    "VLLM_LOGGING_PREFIX",
    "VLLM_LOGGING_STREAM",
    "VLLM_LOGGING_CONFIG_PATH",
    "VLLM_LOGGING_COLOR",
    "VLLM_LOG_STATS_INTERVAL",
    "VLLM_DEBUG_LOG_API_SERVER_RESPONSE",
    "VLLM_TUNED_CONFIG_FOLDER",
    "VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR",
    "VLLM_ENGINE_ITERATION_TIMEOUT_S",
    "VLLM_HTTP_TIMEOUT_KEEP_ALIVE",
    "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS",
    "VLLM_KEEP_ALIVE_ON_ENGINE_DEATH",
    "VLLM_SLEEP_WHEN_IDLE",
    "VLLM_IMAGE_FETCH_TIMEOUT",
    "VLLM_VIDEO_FETCH_TIMEOUT",
    "VLLM_AUDIO_FETCH_TIMEOUT",
    "VLLM_MEDIA_URL_ALLOW_REDIRECTS",
    "VLLM_MEDIA_LOADING_THREAD_COUNT",
    "VLLM_MAX_AUDIO_CLIP_FILESIZE_MB",
    "VLLM_VIDEO_LOADER_BACKEND",
    "VLLM_MEDIA_CONNECTOR",
    "VLLM_ASSETS_CACHE",
    "VLLM_ASSETS_CACHE_MODEL_CLEAN",
    "VLLM_MM_INPUT_CACHE_GIB",
    "VLLM_WORKER_MULTIPROC_METHOD",
    "VLLM_ENABLE_V1_MULTIPROCESSING",
    "VLLM_V1_OUTPUT_PROC_CHUNK_SIZE",
    "VLLM_CPU_KVCACHE_SPACE",
    "VLLM_CPU_OMP_THREADS_BIND",
    "VLLM_CPU_NUM_OF_RESERVED_CPU",
    "VLLM_CPU_MOE_PREPACK",
    "VLLM_CPU_SGL_KERNEL",
    "VLLM_TEST_FORCE_LOAD_FORMAT",
    "VLLM_NCCL_SO_PATH",
    "VLLM_RAY_PER_WORKER_GPUS",
    "VLLM_RAY_BUNDLE_INDICES",
    "VLLM_API_KEY",
}


def env_factors(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in sorted(env.items()) if k.startswith("VLLM_") and k not in IGNORED_ENV}


def compile_hash(version: str, hash_inputs: dict, env: dict[str, str]) -> tuple[str, dict]:
    factors = {"vllm_version": version, "config": hash_inputs, "env": env_factors(env)}
    digest = hashlib.sha256(json.dumps(factors, sort_keys=True, default=str).encode()).hexdigest()
    return digest[:10], factors


def default_cache_root(env: dict[str, str]) -> str:
    root = env.get("VLLM_CACHE_ROOT") or os.path.join(
        env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "vllm"
    )
    return os.path.expanduser(root)


def flashinfer_base(env: dict[str, str]) -> str:
    base = env.get("FLASHINFER_WORKSPACE_BASE") or env.get("HOME") or os.path.expanduser("~")
    return os.path.join(base, ".cache", "flashinfer", FLASHINFER_VERSION, SM)


@dataclass
class RankCache:
    """The artefacts of one rank in one cache root."""

    root: str
    hash: str
    rank: int
    dp_rank: int
    prefixes: list[str]
    compile_range: tuple[int, int]
    factors: dict
    flashinfer_dir: str
    flashinfer_ops: list[str]
    triton_dir: str | None = None

    @property
    def rank_dir(self) -> str:
        return os.path.join(self.root, "torch_compile_cache", self.hash, f"rank_{self.rank}_{self.dp_rank}")

    def prefix_dir(self, prefix: str) -> str:
        return os.path.join(self.rank_dir, prefix)

    @property
    def aot_dir(self) -> str:
        aot = hashlib.sha256((self.hash + "aot").encode()).hexdigest()
        return os.path.join(self.root, "torch_compile_cache", "torch_aot_compile", aot, f"rank_{self.rank}_{self.dp_rank}")

    @property
    def autotune_file(self) -> str:
        key = hashlib.sha256((self.hash + "autotune").encode()).hexdigest()
        return os.path.join(self.root, "flashinfer_autotune_cache", FLASHINFER_VERSION, SM, key, "autotune_configs.json")

    def _range_key(self) -> str:
        return f"compile_range_{self.compile_range[0]}_{self.compile_range[1]}"

    def compiled_hit(self) -> bool:
        for prefix in self.prefixes:
            index = os.path.join(self.prefix_dir(prefix), "vllm_compile_cache.py")
            try:
                with open(index, encoding="utf-8") as f:
                    if self._range_key() not in f.read():
                        return False
            except OSError:
                return False
        return os.path.exists(os.path.join(self.aot_dir, "model"))

    def flashinfer_hit(self) -> bool:
        return all(os.path.exists(os.path.join(self.flashinfer_dir, "cached_ops", op, f"{op}.so")) for op in self.flashinfer_ops)

    def autotune_hit(self) -> bool:
        return os.path.exists(self.autotune_file)

    def write_compiled(self) -> None:
        key = self._range_key()
        for prefix in self.prefixes:
            d = self.prefix_dir(prefix)
            os.makedirs(d, exist_ok=True)
            _write(os.path.join(d, "cache_key_factors.json"), json.dumps(self.factors, indent=2, sort_keys=True, default=str))
            _write(os.path.join(d, "computation_graph.py"), f"# simulated FX graph of {prefix}\n")
            _write(os.path.join(d, "transformed_code.py"), f"# simulated Dynamo bytecode transform of {prefix}\n")
            for i in range(4):
                _write(os.path.join(d, f"artifact_{key}_subgraph_{i}"), f"simulated inductor artefact {i}\n")
            index = {key: [f"artifact_{key}_subgraph_{i}" for i in range(4)]}
            _write(os.path.join(d, "vllm_compile_cache.py"), repr(index) + "\n")
        inductor = os.path.join(self.rank_dir, "inductor_cache", self.hash[:2])
        os.makedirs(inductor, exist_ok=True)
        _write(os.path.join(inductor, f"c{self.hash}.py"), "# simulated inductor kernel\n")
        triton = self.triton_dir or os.path.join(self.rank_dir, "triton_cache")
        os.makedirs(os.path.join(triton, self.hash), exist_ok=True)
        _write(os.path.join(triton, self.hash, "kernel.json"), "{}\n")
        os.makedirs(self.aot_dir, exist_ok=True)
        _write(os.path.join(self.aot_dir, "model"), "simulated AOT artefact\n")

    def write_flashinfer(self) -> None:
        for op in self.flashinfer_ops:
            d = os.path.join(self.flashinfer_dir, "cached_ops", op)
            os.makedirs(d, exist_ok=True)
            _write(os.path.join(d, f"{op}.so"), "simulated JIT module\n")

    def write_autotune(self) -> None:
        os.makedirs(os.path.dirname(self.autotune_file), exist_ok=True)
        _write(self.autotune_file, json.dumps({"configs": 30}) + "\n")

    def describe(self) -> dict:
        return {
            "root": self.root,
            "rank_dir": self.rank_dir,
            "compiled_hit": self.compiled_hit(),
            "flashinfer_hit": self.flashinfer_hit(),
            "autotune_hit": self.autotune_hit(),
            "flashinfer_dir": self.flashinfer_dir,
            "autotune_file": self.autotune_file,
            "aot_dir": self.aot_dir,
        }


def _write(path: str, text: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def rank_cache_from_spec(spec: dict, env: dict[str, str]) -> RankCache:
    """Build a rank's cache from the driver's description, resolving paths on *this* node.

    The driver's VLLM_CACHE_ROOT travels with the job (vLLM copies VLLM_* env to Ray workers);
    without it each node uses its own default under its own $HOME. FlashInfer's base and
    TRITON_CACHE_DIR are the node's own.
    """
    root = spec.get("cache_root") or default_cache_root(env)
    return RankCache(
        root=root,
        hash=spec["hash"],
        rank=spec["rank"],
        dp_rank=spec.get("dp_rank", 0),
        prefixes=list(spec["prefixes"]),
        compile_range=tuple(spec["compile_range"]),
        factors=spec["factors"],
        flashinfer_dir=flashinfer_base(env),
        flashinfer_ops=list(spec["flashinfer_ops"]),
        triton_dir=env.get("TRITON_CACHE_DIR") or None,
    )


def rank_call(method: str, spec: dict, env: dict[str, str], pid: int | None) -> dict:
    """The one writer of a rank's caches, on whichever node hosts the rank (the driver for its own
    ranks, a node agent for remote ones): `init_rank` reports what is cached, `save_rank` writes
    what the spec says was just built."""
    rc = rank_cache_from_spec(spec, env)
    if method == "init_rank":
        return {**rc.describe(), "pid": pid}
    if method != "save_rank":
        raise ValueError(f"unknown rank method {method!r}")
    if spec.get("compiled"):
        rc.write_compiled()
    if spec.get("flashinfer"):
        rc.write_flashinfer()
    if spec.get("autotune"):
        rc.write_autotune()
    return {"ok": True}
