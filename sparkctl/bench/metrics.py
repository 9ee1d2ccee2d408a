"""Speculative-decoding counters from the server's /metrics, and their deltas around a measurement.

vLLM exports (labels model_name, engine): vllm:spec_decode_num_drafts_total,
vllm:spec_decode_num_draft_tokens_total, vllm:spec_decode_num_accepted_tokens_total and
vllm:spec_decode_num_accepted_tokens_per_pos_total{position="i"}. Acceptance rate = accepted /
draft tokens; mean acceptance length = 1 + accepted / drafts. The deltas hold everything the server
did meanwhile, so a busy shared server blurs them (the result file says so in its notes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

PREFIX = "vllm:spec_decode_"
_COUNTERS = {
    "num_drafts": "drafts",
    "num_draft_tokens": "draft_tokens",
    "num_accepted_tokens": "accepted_tokens",
}
_PER_POS = "num_accepted_tokens_per_pos"


@dataclass
class SpecCounters:
    """Cumulative counters at one instant, summed over engines."""

    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted_tokens: float = 0.0
    accepted_per_position: dict[int, float] = field(default_factory=dict)

    def __sub__(self, before: "SpecCounters") -> "SpecCounters":
        # A counter that went down means the server restarted in between: count from zero.
        def d(a: float, b: float) -> float:
            return a - b if a >= b else a

        positions = set(self.accepted_per_position) | set(before.accepted_per_position)
        return SpecCounters(
            d(self.drafts, before.drafts),
            d(self.draft_tokens, before.draft_tokens),
            d(self.accepted_tokens, before.accepted_tokens),
            {
                p: d(self.accepted_per_position.get(p, 0.0), before.accepted_per_position.get(p, 0.0))
                for p in sorted(positions)
            },
        )

    def __add__(self, other: "SpecCounters") -> "SpecCounters":
        positions = set(self.accepted_per_position) | set(other.accepted_per_position)
        return SpecCounters(
            self.drafts + other.drafts,
            self.draft_tokens + other.draft_tokens,
            self.accepted_tokens + other.accepted_tokens,
            {
                p: self.accepted_per_position.get(p, 0.0) + other.accepted_per_position.get(p, 0.0)
                for p in sorted(positions)
            },
        )

    # The quantities, in vllm bench serve's units (rates in percent).
    @property
    def acceptance_rate(self) -> Optional[float]:
        return 100.0 * self.accepted_tokens / self.draft_tokens if self.draft_tokens > 0 else None

    @property
    def acceptance_length(self) -> Optional[float]:
        return 1.0 + self.accepted_tokens / self.drafts if self.drafts > 0 else None

    @property
    def per_position_acceptance_rates(self) -> Optional[list[float]]:
        if self.drafts <= 0 or not self.accepted_per_position:
            return None
        top = max(self.accepted_per_position)
        return [100.0 * self.accepted_per_position.get(p, 0.0) / self.drafts for p in range(top + 1)]


def parse_spec_counters(text: str, model: Optional[str] = None) -> Optional[SpecCounters]:
    """The speculative counters in a Prometheus text exposition; None if the server exports none.

    Samples are summed over engines; when samples carry model_name and some match `model`, only
    those count (a server may host several models).
    """
    from prometheus_client.parser import text_string_to_metric_families

    samples = []
    for family in text_string_to_metric_families(text):
        if not family.name.startswith(PREFIX):
            continue
        for s in family.samples:
            if s.name.endswith("_created"):
                continue
            key = s.name[len(PREFIX):]
            key = key[: -len("_total")] if key.endswith("_total") else key
            samples.append((key, s.labels, s.value))
    if not samples:
        return None
    if model is not None and any(labels.get("model_name") == model for _, labels, _ in samples):
        samples = [s for s in samples if s[1].get("model_name") == model]
    c = SpecCounters()
    for key, labels, value in samples:
        if key in _COUNTERS:
            attr = _COUNTERS[key]
            setattr(c, attr, getattr(c, attr) + value)
        elif key == _PER_POS and "position" in labels:
            try:
                pos = int(labels["position"])
            except ValueError:
                continue
            c.accepted_per_position[pos] = c.accepted_per_position.get(pos, 0.0) + value
    return c


def parse_running(text: str, model: Optional[str] = None) -> Optional[float]:
    """vllm:num_requests_running (summed over engines), or None if the server does not export it."""
    from prometheus_client.parser import text_string_to_metric_families

    samples = [
        s
        for family in text_string_to_metric_families(text)
        if family.name == "vllm:num_requests_running"
        for s in family.samples
    ]
    if not samples:
        return None
    if model is not None and any(s.labels.get("model_name") == model for s in samples):
        samples = [s for s in samples if s.labels.get("model_name") == model]
    return sum(s.value for s in samples)
