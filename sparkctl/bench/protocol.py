"""The sparkdash protocol (seed 000): its workloads, prompts and defaults, and the options of a run.

Defaults are the seed's: three workloads at 1 and 4 concurrent streams, temperature 0, thinking
disabled, 400 generated tokens per request, three repeats, median aggregate output tok/s per cell.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator


@dataclass(frozen=True)
class Workload:
    name: str
    title: str  # the row label of the seed's table
    prompts: tuple[str, ...]  # stream i of a cell sends prompts[i % len(prompts)]
    filler: Literal["code", "prose"]  # what pads its prompt in the context sweep

    def prompt(self, stream: int) -> str:
        return self.prompts[stream % len(self.prompts)]


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload(
            "counting",
            "Counting numbers, structured test",
            ("Count from 1 to 200. Write the numbers in order, separated by commas, and nothing else.",),
            "prose",
        ),
        Workload(
            "code",
            "Code prompts",
            (
                "Write a Python module that parses ISO 8601 durations such as P3DT4H5M into seconds, "
                "with type hints, docstrings and pytest tests for the edge cases.",
                "Implement a thread-safe LRU cache class in Python with get, put and a max size, "
                "then write unit tests for eviction order and concurrent access.",
                "Write a C function that reverses a singly linked list in place, a function that frees "
                "it, and a small main() that builds a list of ten nodes and prints it before and after.",
                "Write a Go function that serves as an HTTP handler: it accepts a JSON array of integers, "
                "validates it and returns the sorted unique values; add table-driven tests.",
            ),
            "code",
        ),
        Workload(
            "prose",
            "Prose prompts",
            (
                "Write an essay on how lighthouses changed coastal trade in the nineteenth century.",
                "Write a short story about a cartographer who discovers a town missing from every map.",
                "Explain to a curious teenager why the sky is blue at noon and red at sunset, in flowing prose.",
                "Write a reflective letter from a retired train conductor to the city that replaced his line.",
            ),
            "prose",
        ),
    )
}

Part = Literal["throughput", "context", "prefill", "mixed"]
PARTS: tuple[Part, ...] = get_args(Part)

# The seed's long prompt (~262K tokens) and the context sweep up to where seed 002 saw acceptance fall.
DEFAULT_PREFILL_TOKENS = 262_144
DEFAULT_CONTEXT_SIZES = (1_024, 8_192, 32_768, 81_920)
# A short request: its TTFT is the fixed overhead (network, queueing, template, one decode step).
SHORT_PROMPT = "Reply with the single word: ready"


class BenchOptions(BaseModel):
    """What to run; recorded in the result file so a run can be repeated and compared."""

    model_config = ConfigDict(extra="forbid")

    workloads: list[str] = Field(list(WORKLOADS), description="Workloads of the throughput cells, in order.")
    streams: list[int] = Field([1, 4], description="Concurrent streams per cell (one request per stream per repeat).")
    max_tokens: int = Field(400, ge=1, description="Tokens generated per request.")
    repeats: int = Field(3, ge=1, description="Repeats per cell; the summary is the median.")
    temperature: float = Field(0.0, ge=0, description="Sampling temperature.")
    thinking: bool = Field(False, description="chat_template_kwargs.enable_thinking.")
    ignore_eos: bool = Field(
        True, description="Send ignore_eos and min_tokens (vLLM) so every request generates max_tokens tokens."
    )
    parts: list[Part] = Field(list(PARTS), description="Which parts of the protocol run.")
    context_workload: str = Field("code", description="Workload the context sweep repeats at growing prompt sizes.")
    context_sizes: list[int] = Field(
        list(DEFAULT_CONTEXT_SIZES), description="Prompt sizes (tokens) of the context sweep, capped by max_model_len."
    )
    context_repeats: int = Field(1, ge=1, description="Requests per context size.")
    prefill_tokens: int = Field(
        DEFAULT_PREFILL_TOKENS, ge=1, description="Prompt size (tokens) of the prefill test, capped by max_model_len."
    )
    overhead_samples: int = Field(3, ge=1, description="Short requests whose median TTFT is the fixed overhead.")
    mixed_tokens: Optional[int] = Field(
        None, ge=1, description="Long cold prompt (tokens) of the mixed-traffic test (default: prefill_tokens)."
    )
    mixed_delay_s: Optional[float] = Field(
        None,
        ge=0,
        description="Seconds at least after the long prompt is sent that the short one follows; it also waits "
        "until /metrics shows the long one running (default: a tenth of the measured prefill TTFT, or 0.5 s).",
    )
    warmup: int = Field(1, ge=0, description="Short requests sent first and not measured.")
    timeout_s: float = Field(1800.0, gt=0, description="Longest wait for one request, seconds.")
    seed: int = Field(0, description="Seed of the generated long-prompt text.")

    @field_validator("workloads", "context_workload")
    @classmethod
    def _known_workloads(cls, value):
        names = [value] if isinstance(value, str) else value
        for n in names:
            if n not in WORKLOADS:
                raise ValueError(f"unknown workload {n!r} (known: {', '.join(WORKLOADS)})")
        return value

    @field_validator("streams", "context_sizes")
    @classmethod
    def _positive(cls, value: list[int]) -> list[int]:
        if not value or any(v < 1 for v in value):
            raise ValueError("give one or more positive numbers")
        return value
