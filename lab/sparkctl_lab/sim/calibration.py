"""The numbers that shape the simulator, calibrated on the seeds, and the formulas that use them.

Two profiles:
- `splice` (seed 000, the lab's shape): remote drafter on the offload host, 5 draft tokens.
  Step model fitted so the sparkdash table (counting 138/322, code 110/192, prose 66/130 tok/s at
  1/4 streams, 400 tokens, temperature 0) comes out within ~10% at time scale 1.
- `dspark` (seed 002): DSpark decoding on the Sparks, 3 draft tokens, ~60 ms decode cycle.

A decode step (one engine iteration) takes
    fixed_ms + per_token_ms * (tokens verified) + k * (draft_fixed_ms + draft_per_seq_ms * seqs)
      + prefill_ms_per_token * P + prefill_attn_us_per_ktok * P * ctx/1000 / 1000
where each decoding sequence verifies k+1 tokens and P prefill tokens run in the same step.
It does not depend on context length (seed 002: flat from 0.5K to 65K).

Speculative acceptance: each draft position is accepted with probability p (per workload),
stopping at the first rejection, so P(accepted >= i) = p**i and the mean acceptance length is
1 + sum(p**i, i=1..k). p decays with the sequence's context:
    p(ctx) = p0 * (1 - decay * (1 - exp(-ctx / decay_tokens)))
(seed 002: code ~4.3 at short context falling to ~2.8 by 80K tokens with k=5).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace

GIB = 1024**3

# Bytes one token occupies in the KV pool of one rank, by --kv-cache-dtype. nvfp4_ds_mla is
# seed 002's figure (~2.83M tokens from ~19 GiB); fp8_ds_mla is "roughly 2.1x" less dense.
KV_BYTES_PER_TOKEN = {
    "auto": 31790,
    "bfloat16": 31790,
    "float16": 31790,
    "fp8": 15895,
    "fp8_e4m3": 15895,
    "fp8_e5m2": 15895,
    "fp8_inc": 15895,
    "fp8_ds_mla": 15139,
    "fp8_per_token_head": 15895,
    "int8_per_token_head": 15895,
    "int4_per_token_head": 8100,
    "turboquant_k8v4": 11900,
    "turboquant_4bit_nc": 8100,
    "turboquant_3bit_nc": 6200,
    "nvfp4": 7950,
    "nvfp4_ds_mla": 7209,
}


@dataclass(frozen=True)
class StepModel:
    fixed_ms: float
    per_token_ms: float
    draft_fixed_ms: float
    draft_per_seq_ms: float
    prefill_ms_per_token: float
    prefill_attn_us_per_ktok: float
    marlin_factor: float = 2.0  # Marlin (W4A16) fallback: target forward x this (seed 002: half speed)

    def step_seconds(
        self, decode_seqs: int, k: int, prefill_tokens: int = 0, prefill_ctx_tokens: float = 0.0, marlin: bool = False
    ) -> float:
        """Simulated seconds of one engine step."""
        target = 1.0 * self.fixed_ms
        target += self.per_token_ms * decode_seqs * (k + 1)
        target += self.prefill_ms_per_token * prefill_tokens
        target += self.prefill_attn_us_per_ktok * prefill_tokens * prefill_ctx_tokens / 1e6
        if marlin:
            target *= self.marlin_factor
        draft = k * (self.draft_fixed_ms + self.draft_per_seq_ms * decode_seqs) if (k and decode_seqs) else 0.0
        return (target + draft) / 1000.0

    def with_overrides(self, overrides: dict[str, float]) -> "StepModel":
        known = {f.name for f in fields(self)}
        bad = [k for k in overrides if k not in known]
        if bad:
            raise SystemExit(f"SIM_STEP_MODEL: unknown key(s) {', '.join(bad)}; known: {', '.join(sorted(known))}")
        return replace(self, **overrides)


@dataclass(frozen=True)
class Phases:
    """Simulated seconds of each start-up phase (time scale 1)."""

    api_init: float = 3.0
    engine_start: float = 2.0
    workers_init: float = 6.0  # Ray actors, NCCL communicators
    weights: float = 40.0
    drafter_local: float = 8.0
    drafter_remote_connect: float = 1.0
    dynamo_cold: float = 12.0
    dynamo_warm: float = 2.5
    compile_cold: float = 420.0  # inductor compile of the one compile range
    compile_warm: float = 1.5  # loading the compiled graphs from the cache
    profile_run: float = 6.0
    flashinfer_jit_cold: float = 150.0
    flashinfer_jit_warm: float = 1.0
    autotune_cold: float = 30.0
    autotune_warm: float = 0.5
    cudagraph_cold: float = 25.0
    cudagraph_warm: float = 12.0
    server_start: float = 2.0

    def scaled_for_drafter(self) -> "Phases":
        """A small drafter model: everything an order of magnitude faster."""
        return Phases(**{k: v * 0.1 for k, v in self.__dict__.items()})


@dataclass(frozen=True)
class Profile:
    name: str
    step: StepModel
    acceptance: dict[str, float]  # workload -> per-position acceptance probability at context 0
    acceptance_decay: float
    acceptance_decay_tokens: float
    non_kv_gib: float  # per rank: weights, activations, CUDA graphs (what gpu_memory_utilization leaves for KV)
    phases: Phases = field(default_factory=Phases)
    weights_gib: float = 70.0


PROFILES: dict[str, Profile] = {
    "splice": Profile(
        name="splice",
        step=StepModel(
            fixed_ms=21.0,
            per_token_ms=1.65,
            draft_fixed_ms=1.2,
            draft_per_seq_ms=0.6,
            prefill_ms_per_token=0.30,
            prefill_attn_us_per_ktok=0.61,
        ),
        acceptance={"counting": 0.975, "code": 0.86, "prose": 0.645},
        acceptance_decay=0.30,
        acceptance_decay_tokens=63400.0,
        # 0.85 x 119.7 GiB - 74.53 GiB = 27.2 GiB of KV at fp8_ds_mla = 1.93M tokens (seed 000).
        non_kv_gib=74.53,
        weights_gib=62.4,
    ),
    "dspark": Profile(
        name="dspark",
        step=StepModel(
            fixed_ms=30.0,
            per_token_ms=4.5,
            draft_fixed_ms=3.0,
            draft_per_seq_ms=1.0,
            prefill_ms_per_token=0.30,
            prefill_attn_us_per_ktok=0.61,
        ),
        acceptance={"counting": 0.98, "code": 0.95, "prose": 0.70},
        acceptance_decay=0.30,
        acceptance_decay_tokens=63400.0,
        # 0.85 x 119.7 GiB - 82.745 GiB = 19 GiB of KV at nvfp4_ds_mla = 2.83M tokens (seed 002).
        non_kv_gib=82.745,
        weights_gib=75.9,
        phases=Phases(weights=60.0),
    ),
}


def pick_profile(name: str, spec_method: str | None, model: str) -> Profile:
    if name in PROFILES:
        return PROFILES[name]
    if spec_method == "dspark" or "dspark" in model.lower():
        return PROFILES["dspark"]
    return PROFILES["splice"]


def decayed_acceptance(p0: float, context_tokens: float, decay: float, decay_tokens: float) -> float:
    if decay_tokens <= 0:
        return p0
    factor = 1.0 - decay * (1.0 - math.exp(-max(0.0, context_tokens) / decay_tokens))
    return max(0.0, min(1.0, p0 * factor))


def expected_acceptance_length(
    p0: float, k: int, context_tokens: float = 0.0, decay: float = 0.0, decay_tokens: float = 0.0
) -> float:
    """Mean acceptance length (vLLM's: 1 + accepted / drafts) at a given context: 1 + sum(p**i, i=1..k)."""
    p = decayed_acceptance(p0, context_tokens, decay, decay_tokens)
    return 1.0 + sum(p**i for i in range(1, k + 1))


def kv_pool_tokens(
    gpu_memory_utilization: float, kv_cache_dtype: str, gpu_memory_gib: float, non_kv_gib: float
) -> tuple[int, float]:
    """(pool tokens, available KV GiB) for one rank."""
    available = gpu_memory_utilization * gpu_memory_gib - non_kv_gib
    per_token = KV_BYTES_PER_TOKEN.get(kv_cache_dtype, KV_BYTES_PER_TOKEN["auto"])
    if available <= 0:
        return 0, available
    return int(available * GIB / per_token), available
