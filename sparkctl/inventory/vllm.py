"""What the inventory knows of vLLM's vocabulary: flag names, known value sets, token counts.

The value sets mirror vLLM's own `Literal`s (config/cache.py `CacheDType`, config/kernel.py
`MoEBackend`, config/speculative.py `SpeculativeMethod`) plus the values the seeds and
shared/reference/vllm-interface.md name for the Spark builds (`nvfp4_ds_mla` of the DSpark image,
the `dspark` method, `flashinfer_b12x`). A value outside them is an error with a "did you mean",
because a typo there does not fail loudly at launch: per seed 002 a MoE backend the image does
not know silently falls back to Marlin at half the throughput. An image that really supports
another value names that key in `runtime.custom_values`.
"""

from __future__ import annotations

import re

KV_CACHE_DTYPES = frozenset(
    {
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
        "nvfp4_ds_mla",  # the DSpark image's packed sparse-MLA NVFP4 cache (seed 002)
    }
)

MOE_BACKENDS = frozenset(
    {
        "auto",
        "triton",
        "triton_unfused",
        "deep_gemm",
        "deep_gemm_mega_moe",
        "cutlass",
        "flashinfer_trtllm",
        "flashinfer_cutlass",
        "flashinfer_cutedsl",
        "flashinfer_b12x",  # native MXFP4 on GB10 (seed 002)
        "marlin",
        "humming",
        "aiter",
        "emulation",
    }
)

SPECULATIVE_METHODS = frozenset(
    {
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
        "dspark",  # DeepSpec's DSpark decoding (seed 002)
    }
)

# Methods whose drafter is a separate checkpoint that `speculative.model` must name.
METHODS_NEEDING_MODEL = frozenset({"draft_model", "eagle", "eagle3", "medusa", "mlp_speculator", "dflash"})

# The checked keys, by their path in the inventory, with the set each must come from.
KNOWN_VALUES: dict[str, frozenset[str]] = {
    "kv_cache_dtype": KV_CACHE_DTYPES,
    "moe_backend": MOE_BACKENDS,
    "speculative.method": SPECULATIVE_METHODS,
}

# runtime key -> the `vllm serve` flag it becomes, in the order `inventory show` lists them.
RUNTIME_FLAGS: dict[str, str] = {
    "image": "(container image, head and worker)",
    "model": "vllm serve MODEL (positional)",
    "served_model_name": "--served-model-name",
    "port": "--port",
    "tensor_parallel_size": "--tensor-parallel-size",
    "distributed_executor_backend": "--distributed-executor-backend",
    "master_port": "--master-port (mp only, with --nnodes/--node-rank/--master-addr)",
    "kv_cache_dtype": "--kv-cache-dtype",
    "block_size": "--block-size",
    "gpu_memory_utilization": "--gpu-memory-utilization",
    "max_model_len": "--max-model-len",
    "max_num_seqs": "--max-num-seqs",
    "max_num_batched_tokens": "--max-num-batched-tokens",
    "kv_pool_tokens": "(checked by sparkctl, not passed)",
    "moe_backend": "--moe-backend",
    "shutdown_timeout": "--shutdown-timeout",
    "speculative": "--speculative-config '<json>'",
}

# vLLM's human_readable_int: lower-case suffixes are decimal (1k = 1000, decimals allowed),
# upper-case are binary (1K = 1024, whole numbers only).
_HUMAN_INT = re.compile(r"(\d+(?:\.\d+)?)([kKmMgG])")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30}


def parse_token_count(value: object) -> object:
    """`262144`, `"262144"`, `"256K"` (262144), `"262k"` (262000), `"2.83m"` -> int, as vLLM reads them.

    Anything else is returned unchanged for pydantic to reject with its usual message.
    """
    if isinstance(value, bool) or not isinstance(value, str):
        return value
    if value.strip().lower() in {"auto", "-1"}:
        raise ValueError(
            f"'{value}' lets vLLM pick the length at start-up; sparkctl needs the number to check it "
            "against the KV pool before anything starts: write it, e.g. 262144 or 256K"
        )
    return token_count(value)


def token_count(value: str) -> int:
    """A token count as vLLM's human_readable_int reads it: the one parser of the inventory's token
    keys and of every `bench` token option (so `32k` is 32000 in both, `32K` 32768). ValueError if not."""
    text = value.strip().replace("_", "")
    if text.isdigit():
        return int(text)
    m = _HUMAN_INT.fullmatch(text)
    if not m:
        raise ValueError(f"'{value}' is not a token count: write a whole number like 262144, 256K (x1024) or 262k (x1000)")
    number, suffix = m.groups()
    if suffix in _DECIMAL:
        return int(float(number) * _DECIMAL[suffix])
    if "." in number:
        raise ValueError(
            f"'{value}': decimals are only allowed with decimal suffixes (k, m, g), as in vLLM; "
            f"did you mean '{number}{suffix.lower()}'?"
        )
    return int(number) * _BINARY[suffix]


# fused_moe/oracle/nvfp4.py select_nvfp4_moe_backend(): NVFP4_BACKENDS_WITH_CLAMP, as --moe-backend
# names (map_nvfp4_backend). A checkpoint that sets swiglu_limit refuses any other explicit backend.
NVFP4_MOE_WITH_CLAMP = frozenset(
    {
        "b12x",
        "flashinfer_trtllm",
        "flashinfer_cutlass",
        "flashinfer_cutedsl",
        "flashinfer_moe_ep_cutedsl",
        "cutlass",
        "marlin",
        "emulation",
        "humming",
    }
)


def swiglu_clamp_refusal(moe_backend, moe_quantization, swiglu_limit) -> str | None:
    """vLLM 0.33's start-up refusal for this combination (None: it starts), in its own words."""
    backend = (moe_backend or "auto").replace("-", "_")
    if swiglu_limit is None or backend == "auto" or moe_quantization == "mxfp4" or backend in NVFP4_MOE_WITH_CLAMP:
        return None
    return (
        f"Model sets swiglu_limit={float(swiglu_limit)}, but the explicitly requested moe_backend={backend!r} does "
        "not apply the SwiGLU clamp. Use 'flashinfer_trtllm', 'flashinfer_cutlass', 'flashinfer_cutedsl', "
        "'flashinfer_moe_ep_cutedsl', 'cutlass', 'b12x', 'marlin', or 'humming' instead."
    )
