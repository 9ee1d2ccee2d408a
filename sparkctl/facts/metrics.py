"""vLLM's /metrics page as sparkctl reads it: per engine, counters summed, gauges never.

vLLM 0.33 (vllm/v1/metrics/loggers.py, vllm/v1/spec_decode/metrics.py) labels every series with
`model_name` and `engine` (one engine per data-parallel rank). Counters and request counts add up
over engines; a usage gauge does not: two engines at 50% are two half-full pools, not one full one,
so KV usage is reported per engine with its max and mean. docs/conformance.md lists each name read
here with its source line. The text is parsed with prometheus_client's parser.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterator, Mapping, Optional

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_USAGE = "vllm:kv_cache_usage_perc"  # gauge, 1.0 = full, one pool per engine
CACHE_INFO = "vllm:cache_config_info"  # gauge set to 1, CacheConfig fields as labels
GENERATION_TOKENS = "vllm:generation_tokens_total"
PROMPT_TOKENS = "vllm:prompt_tokens_total"
PREEMPTIONS = "vllm:num_preemptions_total"
TTFT = "vllm:time_to_first_token_seconds"  # histogram: a request's first token, from its arrival

SPEC_PREFIX = "vllm:spec_decode_"
# Gauges that are levels of one engine's own resources: never summed over engines.
PER_ENGINE_GAUGES = frozenset({KV_USAGE})


@dataclass
class SpecCounters:
    """Speculative-decoding counters at one instant, summed over engines.

    The quantities are in `vllm bench serve`'s units (vllm/benchmarks/serve.py): acceptance rate in
    percent of draft tokens, mean acceptance length in tokens per step (1 + accepted / drafts).
    Doctor, status and bench all read them from here, under those names.
    """

    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted_tokens: float = 0.0
    accepted_per_position: dict[int, float] = field(default_factory=dict)

    def __sub__(self, before: "SpecCounters") -> "SpecCounters":
        # A counter that went down means the server restarted in between: count from zero.
        def d(a: float, b: float) -> float:
            return a - b if a >= b else a

        now, then = self.accepted_per_position, before.accepted_per_position
        return SpecCounters(
            d(self.drafts, before.drafts),
            d(self.draft_tokens, before.draft_tokens),
            d(self.accepted_tokens, before.accepted_tokens),
            {p: d(now.get(p, 0.0), then.get(p, 0.0)) for p in sorted(now.keys() | then.keys())},
        )

    @property
    def acceptance_rate(self) -> Optional[float]:
        """Percent of draft tokens accepted (vllm bench serve's spec_decode_acceptance_rate)."""
        return 100.0 * self.accepted_tokens / self.draft_tokens if self.draft_tokens > 0 else None

    @property
    def acceptance_length(self) -> Optional[float]:
        """Mean tokens per step including the bonus token (spec_decode_acceptance_length)."""
        return 1.0 + self.accepted_tokens / self.drafts if self.drafts > 0 else None

    @property
    def per_position_acceptance_rates(self) -> Optional[list[float]]:
        """Percent of drafts whose token at each position was accepted."""
        if self.drafts <= 0 or not self.accepted_per_position:
            return None
        top = max(self.accepted_per_position)
        return [100.0 * self.accepted_per_position.get(p, 0.0) / self.drafts for p in range(top + 1)]

    def fields(self, digits: int = 2) -> dict[str, Optional[float]]:
        """The two figures under vllm bench serve's result names (rate in percent)."""
        rate, length = self.acceptance_rate, self.acceptance_length
        return {
            "spec_decode_acceptance_rate": None if rate is None else round(rate, digits),
            "spec_decode_acceptance_length": None if length is None else round(length, digits),
        }


@dataclass(frozen=True)
class Sample:
    name: str  # sample name as exposed: counters end in _total
    engine: str
    labels: Mapping[str, str]  # all labels but model_name and engine
    value: float


@dataclass(frozen=True)
class GaugeStats:
    """One gauge across engines: never a sum."""

    per_engine: dict[str, float]

    @property
    def max(self) -> float:
        return max(self.per_engine.values())

    @property
    def mean(self) -> float:
        return sum(self.per_engine.values()) / len(self.per_engine)

    @property
    def fullest_engine(self) -> str:
        return max(self.per_engine, key=self.per_engine.__getitem__)

    def as_dict(self, digits: int = 4) -> dict:
        return {
            "max": round(self.max, digits),
            "mean": round(self.mean, digits),
            "per_engine": {e: round(v, digits) for e, v in self.per_engine.items()},
        }


@dataclass
class MetricsPage(Mapping[str, float]):
    """One scrape, for one model: every vllm: sample by engine (no _created, no buckets).

    As a mapping (`page[name]`) it gives a counter or request count summed over engines and a
    per-engine gauge's max: the figures that may stand alone. Use `gauge()` for the spread.
    """

    samples: list[Sample] = field(default_factory=list)
    # histogram -> upper bound (le) -> cumulative count, summed over engines (buckets are not samples)
    buckets: dict[str, dict[float, float]] = field(default_factory=dict)

    # ---- mapping view ----
    def __getitem__(self, name: str) -> float:
        if name in PER_ENGINE_GAUGES:
            value = g.max if (g := self.gauge(name)) else None
        else:
            value = self.total(name)
        if value is None:
            raise KeyError(name)
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys(s.name for s in self.samples))

    def __len__(self) -> int:
        return len({s.name for s in self.samples})

    # ---- views ----
    @property
    def engines(self) -> list[str]:
        return sorted({s.engine for s in self.samples}, key=lambda e: (len(e), e))

    def total(self, name: str, **labels: str) -> Optional[float]:
        """Sum over engines of a counter or request count (optionally one label value), None if absent."""
        values = [s.value for s in self.samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
        return sum(values) if values else None

    def gauge(self, name: str) -> Optional[GaugeStats]:
        per = {s.engine: s.value for s in self.samples if s.name == name and not s.labels}
        return GaugeStats(per) if per else None

    def cache_config(self) -> dict[str, dict[str, str]]:
        """engine -> vllm:cache_config_info's labels (CacheConfig fields, as text)."""
        return {s.engine: dict(s.labels) for s in self.samples if s.name == CACHE_INFO}

    def kv_cache_size_tokens(self) -> dict[str, int]:
        """engine -> KV pool in tokens from cache_config_info (set once the KV cache is sized)."""
        out = {}
        for engine, labels in self.cache_config().items():
            try:
                out[engine] = int(float(labels.get("kv_cache_size_tokens", "")))
            except ValueError:
                pass  # "None" until the KV cache is sized
        return out

    @property
    def spec(self) -> Optional[SpecCounters]:
        """Speculative counters summed over engines; None when the server exports none."""
        if not any(s.name.startswith(SPEC_PREFIX) for s in self.samples):
            return None
        per_position: dict[int, float] = defaultdict(float)
        for s in self.samples:
            if s.name == f"{SPEC_PREFIX}num_accepted_tokens_per_pos_total" and s.labels.get("position", "").isdigit():
                per_position[int(s.labels["position"])] += s.value
        return SpecCounters(
            self.total(f"{SPEC_PREFIX}num_drafts_total") or 0.0,
            self.total(f"{SPEC_PREFIX}num_draft_tokens_total") or 0.0,
            self.total(f"{SPEC_PREFIX}num_accepted_tokens_total") or 0.0,
            dict(per_position),
        )


def parse_page(text: str, model: Optional[str] = None) -> MetricsPage:
    """Prometheus text -> MetricsPage. Raises ValueError on text that is not the exposition format.

    When samples carry model_name and some match `model`, only those (and series without model_name) count.
    """
    from prometheus_client.parser import text_string_to_metric_families

    found = [s for f in text_string_to_metric_families(text) if f.name.startswith("vllm:") for s in f.samples]
    if model is not None and any(s.labels.get("model_name") == model for s in found):
        # cache_config_info carries no model_name: it stays
        found = [s for s in found if s.labels.get("model_name", model) == model]
    page = MetricsPage()
    for s in found:
        if s.name.endswith("_bucket"):
            per_le, le = page.buckets.setdefault(s.name.removesuffix("_bucket"), {}), float(s.labels["le"])
            per_le[le] = per_le.get(le, 0.0) + s.value
        elif not s.name.endswith("_created"):
            labels = {k: v for k, v in s.labels.items() if k not in ("model_name", "engine")}
            page.samples.append(Sample(s.name, str(s.labels.get("engine", "")), labels, float(s.value)))
    return page


def quantile_between(before: MetricsPage, after: MetricsPage, histogram: str, q: float) -> tuple[Optional[float], int]:
    """(q-quantile, count) of what a histogram observed between two scrapes: Prometheus's
    histogram_quantile over the bucket increases (linear inside the bucket; the highest finite
    bound when it falls in +Inf). (None, 0) when nothing was observed in between."""
    now, then = after.buckets.get(histogram, {}), before.buckets.get(histogram, {})
    bounds = sorted(now)
    delta = [max(0.0, now[le] - then.get(le, 0.0)) for le in bounds]
    if not bounds or not delta[-1]:
        return None, 0
    rank, lower, below = q * delta[-1], 0.0, 0.0
    for le, cum in zip(bounds, delta):
        if cum >= rank:
            if le == float("inf"):
                return lower, int(delta[-1])
            inside = cum - below
            return lower + (le - lower) * ((rank - below) / inside if inside else 1.0), int(delta[-1])
        lower, below = le, cum
    return lower, int(delta[-1])


def held_without_progress(before: MetricsPage, after: MetricsPage) -> float:
    """Requests the engine held running on both pages while it did nothing in between (0: it made
    progress, or held nothing). Progress is a generated token, a finished prefill (vLLM 0.33 counts
    a prompt's tokens with its first token: vllm/v1/metrics/stats.py IterationStats) or a change of
    the KV pool: a long prefill allocates blocks chunk by chunk, so it moves the pool while both
    counters stand still. A collective that hangs (NCCL over the fabric) freezes all three while
    /health still answers 200: the engine core never returns from its step."""
    running = min(before.total(RUNNING) or 0.0, after.total(RUNNING) or 0.0)
    if running <= 0:
        return 0.0
    for counter in (GENERATION_TOKENS, PROMPT_TOKENS):
        if (after.total(counter) or 0.0) != (before.total(counter) or 0.0):
            return 0.0
    pool_then, pool_now = before.gauge(KV_USAGE), after.gauge(KV_USAGE)
    if (pool_then and pool_then.per_engine) != (pool_now and pool_now.per_engine):
        return 0.0
    return running
