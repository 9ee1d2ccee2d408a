"""Which inventory fields feed vLLM's torch.compile cache hash, and sparkctl's key over them: a
start whose key this cluster has served before is warm. Read by reload (warm/cold prediction) and
by the record step (each applied event carries its key); its own module so neither imports the other.
"""

from __future__ import annotations

import re

from sparkctl.inventory.paths import flatten
from sparkctl.transport.redact import redact_obj, state_digests

# inventory fields that feed vLLM's torch.compile cache hash (vllm-interface.md: vLLM version and
# code = the image, model, cache, parallel and scheduler config, speculative and MoE kernels, and
# VLLM_* env), and where the kernel caches live (the volume; the CUDA driver's JIT cache and torch
# extensions, which runtime.env may move: launch.cache_env); a change to any of them compiles
# again (cold), to anything else reuses the cache.
COMPILE_FIELDS = (
    "runtime.image",
    "runtime.model",
    "runtime.max_model_len",
    "runtime.kv_cache_dtype",
    "runtime.block_size",
    "runtime.tensor_parallel_size",
    "runtime.max_num_seqs",
    "runtime.max_num_batched_tokens",
    "runtime.moe_backend",
    "runtime.moe_quantization",
    "runtime.speculative",
    "caches.host_path",
    "caches.container_path",
)
# Deliberately absent: runtime.distributed_executor_backend and runtime.master_port. vLLM 0.33's
# ParallelConfig.compute_hash ignores the executor and the multi-node launch (master_addr/port,
# nnodes, node_rank), envs.compile_factors ignores VLLM_HOST_IP, and each rank keeps its
# rank_<r>_0 directory on the same node: switching ray <-> mp restarts the engine warm.
COMPILE_ENV = re.compile(r"^runtime\.env\.(VLLM_|CUDA_CACHE_|TORCH_EXTENSIONS_DIR$)")


def compiles(path: str) -> bool:
    """Does a change to this dotted inventory field compile again?"""
    return path.startswith(COMPILE_FIELDS) or bool(COMPILE_ENV.match(path))


def compile_key(inventory: dict) -> str:
    """sparkctl's digest of the inventory fields vLLM's compile hash covers: two configs with the
    same key compile the same graphs, so a start whose key this cluster has served before is warm
    (the persistent cache still holds them), even going back to an older config."""
    import hashlib
    import json

    cluster = str((inventory.get("cluster") or {}).get("name", ""))
    flat = flatten(redact_obj(inventory, digests=state_digests(cluster)))
    chosen = {k: v for k, v in flat.items() if compiles(k)}
    return hashlib.sha256(json.dumps(chosen, sort_keys=True, default=str).encode()).hexdigest()[:12]
