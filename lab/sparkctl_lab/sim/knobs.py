"""The simulator's own settings: every `SIM_*` environment variable, read in one place.

None of them starts with `VLLM_`, so none of them enters the compile-cache hash (vLLM hashes its
own `VLLM_*` variables). docs/simulator.md lists them with their defaults.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from . import VLLM_VERSION_DEFAULT

WORKLOADS = ("counting", "code", "prose")


def _float(env: dict[str, str], name: str, default: float) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError:
        raise SystemExit(f"{name}={raw!r} is not a number") from None


def _int(env: dict[str, str], name: str, default: int) -> int:
    return int(_float(env, name, default))


def parse_pairs(raw: str, name: str) -> dict[str, float]:
    """`a=1,b=2.5` -> {"a": 1.0, "b": 2.5}; a bare word maps to 1.0 (used by fault lists)."""
    out: dict[str, float] = {}
    for part in raw.replace(";", ",").split(","):
        part = part.strip()
        if not part:
            continue
        key, _, value = part.partition("=")
        key = key.strip().lower()
        try:
            out[key] = float(value) if value.strip() else 1.0
        except ValueError:
            raise SystemExit(f"{name}: {part!r} is not key=number") from None
    return out


@dataclass
class Knobs:
    time_scale: float = 1.0  # every simulated duration (start-up phases, waits) x this
    step_time_scale: float = 1.0  # engine step durations (prefill/decode) x this
    profile: str = "auto"  # calibration: auto | splice | dspark
    kv_pool_tokens: int = 0  # 0 = derive from memory; else the pool size in tokens
    gpu_memory_gib: float = 119.7  # GB10 memory seen by one rank
    non_kv_gib: float = 0.0  # 0 = the profile's figure (weights, activations, graphs per rank)
    acceptance: dict[str, float] = field(default_factory=dict)  # workload -> p per draft position
    acceptance_decay: float = -1.0  # <0 = profile default
    acceptance_decay_tokens: float = -1.0
    workload: str = ""  # force one workload for every request
    step_model: dict[str, float] = field(default_factory=dict)  # overrides of the step model
    faults: dict[str, float] = field(default_factory=dict)
    faults_file: str = ""
    crash_context_tokens: int = 65536
    gpu_count: int = 1
    ray_health_timeout: float = 10.0
    ray_join_timeout: float = 60.0
    death_linger: float = 2.0
    vllm_version: str = VLLM_VERSION_DEFAULT
    model_max_len: int = 1048576
    role: str = ""  # "" = auto (a model path containing "draft" is a drafter)
    check_model_path: bool = False
    checkpoint_quant: str = "nvfp4"  # the checkpoint's MoE expert quantization: nvfp4 | mxfp4 (vLLM's kernel path)
    checkpoint_swiglu_limit: float | None = None  # the checkpoint's config.json swiglu_limit (DeepSeek V4 sets one)


def _gpu_count(env: dict[str, str]) -> int:
    if env.get("SIM_GPU_COUNT", "").strip():
        return max(0, _int(env, "SIM_GPU_COUNT", 1))
    for var in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"):
        value = env.get(var, "").strip()
        if value and value not in ("all", "void", "none"):
            return len([v for v in value.split(",") if v.strip()])
    return 1


def load(env: dict[str, str] | None = None) -> Knobs:
    env = dict(os.environ if env is None else env)
    time_scale = _float(env, "SIM_TIME_SCALE", 1.0)
    k = Knobs(
        time_scale=time_scale,
        step_time_scale=_float(env, "SIM_STEP_TIME_SCALE", time_scale),
        profile=env.get("SIM_PROFILE", "auto").strip().lower() or "auto",
        kv_pool_tokens=_int(env, "SIM_KV_POOL_TOKENS", 0),
        gpu_memory_gib=_float(env, "SIM_GPU_MEMORY_GIB", 119.7),
        non_kv_gib=_float(env, "SIM_NON_KV_GIB", 0.0),
        acceptance=parse_pairs(env.get("SIM_ACCEPTANCE", ""), "SIM_ACCEPTANCE"),
        acceptance_decay=_float(env, "SIM_ACCEPTANCE_DECAY", -1.0),
        acceptance_decay_tokens=_float(env, "SIM_ACCEPTANCE_DECAY_TOKENS", -1.0),
        workload=env.get("SIM_WORKLOAD", "").strip().lower(),
        step_model=parse_pairs(env.get("SIM_STEP_MODEL", ""), "SIM_STEP_MODEL"),
        faults=parse_pairs(env.get("SIM_FAULTS", ""), "SIM_FAULTS"),
        faults_file=env.get("SIM_FAULTS_FILE", "").strip(),
        crash_context_tokens=_int(env, "SIM_CRASH_CONTEXT_TOKENS", 65536),
        gpu_count=_gpu_count(env),
        ray_health_timeout=_float(env, "SIM_RAY_HEALTH_TIMEOUT", 10.0),
        ray_join_timeout=_float(env, "SIM_RAY_JOIN_TIMEOUT", 60.0),
        death_linger=_float(env, "SIM_DEATH_LINGER", 2.0),
        vllm_version=env.get("SIM_VLLM_VERSION", "").strip() or VLLM_VERSION_DEFAULT,
        model_max_len=_int(env, "SIM_MODEL_MAX_LEN", 1048576),
        role=env.get("SIM_ROLE", "").strip().lower(),
        check_model_path=env.get("SIM_CHECK_MODEL_PATH", "0").strip() not in ("", "0", "false", "no"),
        checkpoint_quant=env.get("SIM_CHECKPOINT_QUANT", "nvfp4").strip().lower() or "nvfp4",
        checkpoint_swiglu_limit=_float(env, "SIM_CHECKPOINT_SWIGLU_LIMIT", 0.0) or None,
    )
    if k.workload and k.workload not in WORKLOADS:
        raise SystemExit(f"SIM_WORKLOAD={k.workload!r}: choose from {', '.join(WORKLOADS)}")
    for name in k.acceptance:
        if name not in WORKLOADS:
            raise SystemExit(f"SIM_ACCEPTANCE: unknown workload {name!r} (choose from {', '.join(WORKLOADS)})")
    if k.checkpoint_quant not in ("nvfp4", "mxfp4"):
        raise SystemExit(f"SIM_CHECKPOINT_QUANT={k.checkpoint_quant!r}: choose nvfp4 or mxfp4")
    if k.profile not in ("auto", "splice", "dspark"):
        raise SystemExit(f"SIM_PROFILE={k.profile!r}: choose auto, splice or dspark")
    return k


def read_fault_file(path: str) -> dict[str, float]:
    """Faults switched on at run time (`echo crash_now > $SIM_FAULTS_FILE`); {} if absent."""
    if not path:
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            return parse_pairs(f.read().replace("\n", ","), "SIM_FAULTS_FILE")
    except (OSError, SystemExit):
        return {}
