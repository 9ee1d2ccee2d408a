"""`vllm serve` command line, parsed the way vLLM's FlexibleArgumentParser parses it.

Unknown flags and bad values end with argparse's usage + `vllm serve: error: ...` and exit 2, as
vLLM does. Flags vLLM knows but the simulator has no use for are accepted and ignored. Checks
vLLM makes after parsing (config validation) live in `validate()` and surface at start-up as the
same exceptions vLLM raises, with exit 1.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from typing import Any

KV_CACHE_DTYPES = [
    "auto",
    "float16",
    "bfloat16",
    "fp8",
    "fp8_e4m3",
    "fp8_e5m2",
    "fp8_inc",
    "fp8_ds_mla",
    "fp8_per_token_head",
    "int8_per_token_head",
    "int4_per_token_head",
    "turboquant_k8v4",
    "turboquant_4bit_nc",
    "turboquant_3bit_nc",
    "nvfp4",
    "nvfp4_ds_mla",
]
MOE_BACKENDS = [  # vllm/config/kernel.py MoEBackend (0.33.0)
    "auto",
    "triton",
    "batched_triton",
    "deep_gemm",
    "deep_gemm_mega_moe",
    "cutlass",
    "flashinfer_trtllm",
    "flashinfer_cutlass",
    "flashinfer_cutedsl",
    "flashinfer_moe_ep_cutedsl",
    "flashinfer_b12x",
    "b12x",
    "flashinfer_moe_ep_mega_deep_gemm",
    "marlin",
    "humming",
    "triton_unfused",
    "aiter",
    "aiter_mega_moe",
    "aiter_triton_mxfp4_bf16",
    "aiter_triton_mxfp4_mxfp4",
    "flydsl",
    "hpc",
    "emulation",
    "rdna3",
]
SPEC_METHODS = [
    "ngram",
    "ngram_gpu",
    "suffix",
    "medusa",
    "mlp_speculator",
    "draft_model",
    "eagle",
    "eagle3",
    "dflash",
    "mtp",
    "deepseek_mtp",
    "dspark",
]
EXECUTOR_BACKENDS = ["ray", "mp", "uni", "external_launcher"]
DEFAULT_MODEL = "Qwen/Qwen3-0.6B"


def human_readable_int(value: str) -> int:
    """vLLM's parser: 1k = 1000 (decimals allowed), 1K = 1024, -1/auto = -1."""
    value = value.strip()
    if value == "-1" or value.lower() == "auto":
        return -1
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", value)
    if match:
        number, suffix = match.groups()
        decimal = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
        binary = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
        if suffix in decimal:
            return int(float(number) * decimal[suffix])
        try:
            return int(number) * binary[suffix]
        except ValueError as e:
            raise argparse.ArgumentTypeError(
                f"Decimals are not allowed with binary suffixes like {suffix}. "
                f"Did you mean to use {number}{suffix.lower()} instead?"
            ) from e
    return int(value)


def json_arg(value: str) -> Any:
    try:
        return json.loads(value)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"{e.msg}: line {e.lineno} column {e.colno} (char {e.pos})") from e


def lower_underscore(value: str) -> str:
    return value.lower().replace("-", "_")


class VllmArgumentParser(argparse.ArgumentParser):
    """argparse with vLLM's conveniences: `--max_model_len` == `--max-model-len`, `-O3`."""

    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        args = list(sys.argv[1:] if args is None else args)
        processed = []
        for arg in args:
            if arg.startswith("--") and not arg.startswith("---"):
                key, eq, value = arg.partition("=")
                processed.append(key.replace("_", "-") + eq + value)
            elif re.fullmatch(r"-O\d", arg):
                processed += ["-O", json.dumps({"mode": int(arg[2:])})]
            else:
                processed.append(arg)
        return super().parse_args(processed, namespace)


def build_parser() -> VllmArgumentParser:
    p = VllmArgumentParser(
        prog="vllm serve",
        usage="vllm serve [model_tag] [options]",
        description="Launch a local OpenAI-compatible API server to serve LLM completions via HTTP.",
    )
    bool_opt = argparse.BooleanOptionalAction
    p.add_argument("model_tag", nargs="?", default=None, help="The model tag to serve (optional if specified in config)")
    p.add_argument("--config", default=None)
    p.add_argument("--headless", action="store_true")
    p.add_argument("--api-server-count", "-asc", type=int, default=None)
    # Frontend
    p.add_argument("--host", default=None)
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--uds", default=None)
    p.add_argument("--uvicorn-log-level", default="info", choices=["critical", "debug", "error", "info", "trace", "warning"])
    p.add_argument("--disable-uvicorn-access-log", action=bool_opt, default=False)
    p.add_argument("--allow-credentials", action=bool_opt, default=False)
    for name in ("--allowed-origins", "--allowed-methods", "--allowed-headers"):
        p.add_argument(name, type=json_arg, default=None)
    p.add_argument("--api-key", nargs="+", default=None)
    p.add_argument("--lora-modules", nargs="+", default=None)
    p.add_argument("--chat-template", default=None)
    p.add_argument("--chat-template-content-format", default="auto")
    p.add_argument("--trust-request-chat-template", action=bool_opt, default=False)
    p.add_argument("--response-role", default="assistant")
    for name in (
        "--ssl-keyfile",
        "--ssl-certfile",
        "--ssl-ca-certs",
        "--root-path",
        "--log-config-file",
        "--tool-parser-plugin",
        "--tool-server",
    ):
        p.add_argument(name, default=None)
    p.add_argument("--ssl-cert-reqs", type=int, default=0)
    p.add_argument("--enable-ssl-refresh", action=bool_opt, default=False)
    p.add_argument("--middleware", action="append", default=[])
    for name in (
        "--return-tokens-as-token-ids",
        "--disable-frontend-multiprocessing",
        "--enable-request-id-headers",
        "--enable-auto-tool-choice",
        "--exclude-tools-when-tool-choice-none",
        "--disable-fastapi-docs",
        "--enable-prompt-tokens-details",
        "--enable-server-load-tracking",
        "--enable-force-include-usage",
        "--enable-tokenizer-info-endpoint",
        "--enable-log-outputs",
        "--log-error-stack",
        "--disable-log-stats",
        "--enable-log-requests",
        "--disable-log-requests",
    ):
        p.add_argument(name, action=bool_opt, default=False)
    p.add_argument("--tool-call-parser", default=None)
    p.add_argument("--max-log-len", type=int, default=None)
    p.add_argument("--h11-max-incomplete-event-size", type=int, default=None)
    p.add_argument("--h11-max-header-count", type=int, default=None)
    p.add_argument("--shutdown-timeout", type=int, default=0)
    # Model
    p.add_argument("--model", default=None)
    for name in (
        "--runner",
        "--convert",
        "--task",
        "--tokenizer",
        "--tokenizer-mode",
        "--revision",
        "--code-revision",
        "--tokenizer-revision",
        "--hf-config-path",
        "--allowed-local-media-path",
        "--config-format",
        "--generation-config",
        "--model-impl",
        "--override-attention-dtype",
        "--io-processor-plugin",
        "--logits-processor-pattern",
        "--logprobs-mode",
        "--quantization",
        "--download-dir",
        "--safetensors-load-strategy",
        "--pt-load-map-location",
        "--reasoning-parser",
        "--reasoning-parser-plugin",
        "--guided-decoding-backend",
        "--prefix-caching-hash-algo",
        "--mamba-cache-dtype",
        "--mamba-ssm-cache-dtype",
        "--kv-offloading-backend",
        "--all2all-backend",
        "--expert-placement-strategy",
        "--worker-cls",
        "--worker-extension-cls",
        "--scheduler-cls",
        "--show-hidden-metrics-for-version",
        "--otlp-traces-endpoint",
        "--collect-detailed-traces",
        "--attention-backend",
        "--linear-backend",
        "--data-parallel-address",
        "--data-parallel-backend",
        "--mm-processor-cache-type",
        "--mm-encoder-tp-mode",
        "--lora-dtype",
        "--kv-cache-memory-bytes",
        "--kv-offloading-size",
        "--default-mm-loras",
        "--ignore-patterns",
    ):
        if name == "--quantization":
            p.add_argument(name, "-q", default=None)
        else:
            p.add_argument(name, default=None)
    p.add_argument("--hf-token", nargs="?", const=True, default=None)
    p.add_argument("--served-model-name", nargs="+", default=None)
    p.add_argument("--dtype", default="auto", choices=["auto", "half", "float16", "bfloat16", "float", "float32"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-model-len", type=human_readable_int, default=None)
    p.add_argument("--max-logprobs", type=int, default=20)
    p.add_argument("--rope-theta", type=float, default=None)
    for name in (
        "--trust-remote-code",
        "--enforce-eager",
        "--disable-sliding-window",
        "--disable-cascade-attn",
        "--skip-tokenizer-init",
        "--enable-prompt-embeds",
        "--enable-sleep-mode",
        "--use-tqdm-on-load",
        "--calculate-kv-scales",
        "--kv-sharing-fast-prefill",
        "--enable-lora",
        "--fully-sharded-loras",
        "--disable-custom-all-reduce",
        "--enable-expert-parallel",
        "--enable-eplb",
        "--ray-workers-use-nsight",
        "--enable-multimodal-encoder-data-parallel",
        "--data-parallel-hybrid-lb",
        "--enable-dbo",
        "--disable-hybrid-kv-cache-manager",
        "--disable-chunked-mm-input",
        "--async-scheduling",
        "--enable-flashinfer-autotune",
        "--interleave-mm-strings",
        "--skip-mm-profiling",
        "--disable-mm-preprocessor-cache",
        "--kv-cache-metrics",
        "--cudagraph-metrics",
        "--enable-mfu-metrics",
    ):
        p.add_argument(name, action=bool_opt, default=None)
    p.add_argument("--enable-prefix-caching", action=bool_opt, default=None)
    p.add_argument("--enable-chunked-prefill", action=bool_opt, default=None)
    for name in (
        "--hf-overrides",
        "--rope-scaling",
        "--override-generation-config",
        "--model-loader-extra-config",
        "--pooler-config",
        "--override-pooler-config",
        "--structured-outputs-config",
        "--limit-mm-per-prompt",
        "--media-io-kwargs",
        "--mm-processor-kwargs",
        "--kv-transfer-config",
        "--kv-events-config",
        "--additional-config",
        "--eplb-config",
        "--logits-processors",
    ):
        p.add_argument(name, type=json_arg, default=None)
    p.add_argument("--load-format", default="auto")
    # Parallel
    p.add_argument("--distributed-executor-backend", default=None, choices=EXECUTOR_BACKENDS)
    p.add_argument("--pipeline-parallel-size", "-pp", type=int, default=1)
    p.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    p.add_argument("--decode-context-parallel-size", "-dcp", type=int, default=1)
    p.add_argument("--data-parallel-size", "-dp", type=int, default=1)
    p.add_argument("--data-parallel-rank", "-dpn", type=int, default=None)
    p.add_argument("--data-parallel-start-rank", "-dpr", type=int, default=None)
    p.add_argument("--data-parallel-size-local", "-dpl", type=int, default=None)
    p.add_argument("--data-parallel-rpc-port", "-dpp", type=int, default=None)
    p.add_argument("--max-parallel-loading-workers", type=int, default=None)
    p.add_argument("--nnodes", type=int, default=1)
    p.add_argument("--node-rank", type=int, default=0)
    p.add_argument("--master-addr", default="127.0.0.1")
    p.add_argument("--master-port", type=int, default=29501)
    # Cache
    p.add_argument("--block-size", type=int, default=None)
    p.add_argument("--gpu-memory-utilization", type=float, default=0.92)
    p.add_argument("--kv-cache-memory", type=human_readable_int, default=None)
    p.add_argument("--swap-space", type=float, default=4)
    p.add_argument("--kv-cache-dtype", default="auto", choices=KV_CACHE_DTYPES)
    p.add_argument("--num-gpu-blocks-override", type=int, default=None)
    p.add_argument("--cpu-offload-gb", type=float, default=0)
    # Scheduler
    p.add_argument("--max-num-batched-tokens", type=human_readable_int, default=None)
    p.add_argument("--max-num-seqs", type=int, default=None)
    p.add_argument("--max-num-partial-prefills", type=int, default=1)
    p.add_argument("--max-long-partial-prefills", type=int, default=1)
    p.add_argument("--long-prefill-token-threshold", type=int, default=0)
    p.add_argument("--cuda-graph-sizes", nargs="*", type=int, default=None)
    p.add_argument("--cudagraph-capture-sizes", nargs="+", type=int, default=None)
    p.add_argument("--max-cudagraph-capture-size", type=int, default=None)
    p.add_argument("--scheduling-policy", default="fcfs", choices=["fcfs", "priority"])
    p.add_argument("--stream-interval", type=int, default=1)
    p.add_argument("--max-num-queued-reqs", type=int, default=None)
    # LoRA / MM
    for name in (
        "--max-loras",
        "--max-lora-rank",
        "--max-cpu-loras",
        "--mm-processor-cache-gb",
        "--mm-shm-cache-max-object-size-mb",
    ):
        p.add_argument(name, type=float, default=None)
    # Speculative decoding, compilation, kernels
    p.add_argument("--speculative-config", type=json_arg, default=None)
    p.add_argument("--compilation-config", "-O", type=json_arg, default=None)
    p.add_argument("--moe-backend", type=lower_underscore, default="auto", choices=MOE_BACKENDS)
    return p


@dataclass
class ServeConfig:
    model: str
    served_model_names: list[str]
    host: str | None
    port: int
    tensor_parallel_size: int
    pipeline_parallel_size: int
    distributed_executor_backend: str | None
    kv_cache_dtype: str
    block_size: int
    gpu_memory_utilization: float
    max_model_len: int | None  # None = derived; -1 = auto
    max_num_seqs: int
    max_num_batched_tokens: int
    speculative: dict[str, Any] | None
    moe_backend: str
    shutdown_timeout: int
    enable_prefix_caching: bool
    nnodes: int
    node_rank: int
    master_addr: str
    master_port: int
    headless: bool
    api_server_count: int | None = None
    api_keys: list[str] = field(default_factory=list)
    disable_access_log: bool = False
    disable_log_stats: bool = False
    enable_force_include_usage: bool = False
    seed: int = 0
    non_default: dict[str, Any] = field(default_factory=dict)
    hash_inputs: dict[str, Any] = field(default_factory=dict)

    @property
    def served_model_name(self) -> str:
        return self.served_model_names[0]

    @property
    def num_speculative_tokens(self) -> int:
        if not self.speculative:
            return 0
        return int(self.speculative.get("num_speculative_tokens") or 0)


def parse(argv: list[str]) -> ServeConfig:
    parser = build_parser()
    ns = parser.parse_args(argv)
    defaults = vars(parser.parse_args([]))
    non_default = {k: v for k, v in vars(ns).items() if defaults.get(k) != v}
    model = ns.model_tag or ns.model or DEFAULT_MODEL
    if ns.model_tag:
        non_default["model"] = model
    served = ns.served_model_name or [model]
    max_num_seqs = ns.max_num_seqs if ns.max_num_seqs is not None else 1024
    batched = ns.max_num_batched_tokens if ns.max_num_batched_tokens is not None else 8192
    cfg = ServeConfig(
        model=model,
        served_model_names=served,
        host=ns.host,
        port=ns.port,
        tensor_parallel_size=ns.tensor_parallel_size,
        pipeline_parallel_size=ns.pipeline_parallel_size,
        distributed_executor_backend=ns.distributed_executor_backend,
        kv_cache_dtype=ns.kv_cache_dtype,
        block_size=ns.block_size or 16,
        gpu_memory_utilization=ns.gpu_memory_utilization,
        max_model_len=ns.max_model_len,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=batched,
        speculative=ns.speculative_config,
        moe_backend=ns.moe_backend,
        shutdown_timeout=ns.shutdown_timeout,
        enable_prefix_caching=ns.enable_prefix_caching is not False,
        nnodes=ns.nnodes,
        node_rank=ns.node_rank,
        master_addr=ns.master_addr,
        master_port=ns.master_port,
        headless=ns.headless,
        api_server_count=ns.api_server_count,
        api_keys=list(ns.api_key or []),
        disable_access_log=bool(ns.disable_uvicorn_access_log),
        disable_log_stats=bool(ns.disable_log_stats),
        enable_force_include_usage=bool(ns.enable_force_include_usage),
        seed=ns.seed,
        non_default=non_default,
    )
    # What vLLM's compile hash covers from the command line (model, cache, parallel, scheduler,
    # speculative, compilation and kernel configs). Served name, host, port, keys, timeouts: not.
    cfg.hash_inputs = {
        "model": model,
        "block_size": cfg.block_size,
        "max_num_batched_tokens": batched,
        "max_num_seqs": max_num_seqs,
        **{
            name: getattr(ns, name)
            for name in (
                "dtype",
                "quantization",
                "revision",
                "max_model_len",
                "hf_overrides",
                "kv_cache_dtype",
                "tensor_parallel_size",
                "pipeline_parallel_size",
                "data_parallel_size",
                "enable_expert_parallel",
                "speculative_config",
                "compilation_config",
                "enforce_eager",
                "moe_backend",
                "cudagraph_capture_sizes",
            )
        },
    }
    return cfg


class StartupError(Exception):
    """A config error vLLM reports at start-up (traceback + exception line, exit 1); str() is that line."""


def _pydantic(model: str, msg: str, kind: str = "value_error") -> StartupError:
    return StartupError(
        f"pydantic_core._pydantic_core.ValidationError: 1 validation error for {model}\n"
        f"  {msg} [type={kind}, input_type=ArgsKwargs]\n"
        f"    For further information visit https://errors.pydantic.dev/2.11/v/{kind}"
    )


def check_headless(cfg: ServeConfig) -> None:
    """entrypoints/cli/serve.py ServeSubcommand.cmd: the first check, before any config is built."""
    if cfg.headless and cfg.api_server_count is not None and cfg.api_server_count > 0:
        raise StartupError(
            f"ValueError: --api-server-count={cfg.api_server_count} cannot be used with --headless "
            "(no API servers are started in headless mode)."
        )


def validate_multinode(cfg: ServeConfig) -> None:
    """The multi-node launch checks of engine/arg_utils.py create_engine_config and config/parallel.py
    ParallelConfig.__post_init__ (vLLM 0.33.0), in that order, with their messages."""
    world = cfg.tensor_parallel_size * cfg.pipeline_parallel_size
    if cfg.nnodes > 1:
        if world % cfg.nnodes != 0:
            raise StartupError(
                f"ValueError: Invalid data-parallel launch options: `--nnodes {cfg.nnodes}` must evenly divide "
                f"the total world size ({world}). Adjust `--nnodes`, `--data-parallel-size`, "
                "`--pipeline-parallel-size`, `--tensor-parallel-size`, or `--prefill-context-parallel-size`."
            )
        if not 0 <= cfg.node_rank < cfg.nnodes:
            raise StartupError(
                f"ValueError: Invalid data-parallel launch options: `--node-rank` must be between 0 and "
                f"{cfg.nnodes - 1}; got `--node-rank {cfg.node_rank}`. Set it to this node's zero-based index."
            )
        if cfg.distributed_executor_backend not in (None, "mp", "uni", "external_launcher"):
            raise StartupError(
                "ValueError: nnodes > 1 can only be set when distributed executor backend is mp, uni or external_launcher."
            )


def validate(cfg: ServeConfig, model_max_len: int, local_gpus: int) -> None:
    """Config checks vLLM makes before loading anything; raises StartupError."""
    validate_multinode(cfg)
    if not 0 < cfg.gpu_memory_utilization <= 1:
        raise _pydantic(
            "CacheConfig",
            f"gpu_memory_utilization\n  Input should be less than or equal to 1 [type=less_than_equal, input_value={cfg.gpu_memory_utilization}]"
            if cfg.gpu_memory_utilization > 1
            else f"gpu_memory_utilization\n  Input should be greater than 0 [type=greater_than, input_value={cfg.gpu_memory_utilization}]",
            "less_than_equal" if cfg.gpu_memory_utilization > 1 else "greater_than",
        )
    if cfg.max_num_seqs < 1:
        raise _pydantic(
            "SchedulerConfig",
            f"max_num_seqs\n  Input should be greater than or equal to 1 [input_value={cfg.max_num_seqs}]",
            "greater_than_equal",
        )
    if cfg.max_num_batched_tokens < cfg.max_num_seqs:
        raise _pydantic(
            "SchedulerConfig",
            f"Value error, max_num_batched_tokens ({cfg.max_num_batched_tokens}) must be greater than or equal to "
            f"max_num_seqs ({cfg.max_num_seqs}).",
        )
    if cfg.max_model_len is not None and cfg.max_model_len > model_max_len:
        raise _pydantic(
            "ModelConfig",
            f"Value error, User-specified max_model_len ({cfg.max_model_len}) is greater than the derived max_model_len "
            f"(max_position_embeddings={model_max_len} or model_max_length=None in model's config.json). To allow "
            "overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. VLLM_ALLOW_LONG_MAX_MODEL_LEN "
            "must be used with extreme caution.",
        )
    if cfg.max_model_len is not None and cfg.max_model_len < -1 or cfg.max_model_len == 0:
        raise _pydantic("ModelConfig", f"Value error, max_model_len must be positive or -1 (auto), got {cfg.max_model_len}")
    if cfg.block_size < 1 or cfg.block_size & (cfg.block_size - 1):
        raise _pydantic("CacheConfig", f"Value error, block_size ({cfg.block_size}) must be a power of two.")
    if cfg.tensor_parallel_size < 1:
        raise _pydantic(
            "ParallelConfig", "tensor_parallel_size\n  Input should be greater than or equal to 1", "greater_than_equal"
        )
    spec = cfg.speculative
    if spec is not None:
        if not isinstance(spec, dict):
            raise _pydantic("SpeculativeConfig", f"Input should be a valid dictionary [input_value={spec!r}]", "dict_type")
        allowed = {
            "method",
            "model",
            "num_speculative_tokens",
            "draft_tensor_parallel_size",
            "quantization",
            "max_model_len",
            "revision",
            "code_revision",
            "disable_padded_drafter_batch",
            "prompt_lookup_max",
            "prompt_lookup_min",
            "draft_load_config",
            "speculative_token_tree",
            "parallel_drafting",
            "rejection_sample_method",
            "disable_by_batch_size",
            "enforce_eager",
        }
        extra = sorted(set(spec) - allowed)
        if extra:
            raise _pydantic(
                "SpeculativeConfig",
                f"{extra[0]}\n  Extra inputs are not permitted [input_value={spec[extra[0]]!r}]",
                "extra_forbidden",
            )
        method = spec.get("method")
        if method is None and spec.get("model"):
            method = spec["method"] = "draft_model"
        if method not in SPEC_METHODS:
            raise _pydantic(
                "SpeculativeConfig",
                f"method\n  Input should be {', '.join(repr(m) for m in SPEC_METHODS)} [type=literal_error, input_value={method!r}]",
                "literal_error",
            )
        k = spec.get("num_speculative_tokens")
        if k is None:
            raise _pydantic("SpeculativeConfig", "Value error, num_speculative_tokens must be provided with speculative model.")
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise _pydantic("SpeculativeConfig", f"Value error, Expected num_speculative_tokens to be greater than zero ({k}).")
        if method in ("draft_model", "eagle", "eagle3", "medusa", "mlp_speculator", "dflash") and not spec.get("model"):
            raise _pydantic("SpeculativeConfig", f'Value error, method {method!r} needs a draft model: set "model".')
    world = cfg.tensor_parallel_size * cfg.pipeline_parallel_size
    backend = effective_backend(cfg, local_gpus)
    if backend in ("mp", "uni") and cfg.nnodes == 1 and world > local_gpus:
        raise StartupError(
            f"ValueError: World size ({world}) is larger than the number of available GPUs ({local_gpus}) in this node. "
            "If this is intentional and you are using:\n"
            "- ray, set '--distributed-executor-backend ray'.\n"
            "- multiprocessing, set '--nnodes' appropriately."
        )


def effective_backend(cfg: ServeConfig, local_gpus: int) -> str:
    """vLLM's choice when --distributed-executor-backend is not given."""
    if cfg.distributed_executor_backend:
        return cfg.distributed_executor_backend
    world = cfg.tensor_parallel_size * cfg.pipeline_parallel_size
    if world == 1:
        return "uni"
    if cfg.nnodes > 1 or world <= local_gpus:
        return "mp"
    return "ray"
