"""The result file: every raw repeat and the summary, as pydantic models that publish a JSON Schema.

Where a quantity is the same as in `vllm bench serve --save-result`, the field has its name and unit:
times in ms (`median_ttft_ms`, `mean_itl_ms`, ...), `duration` in s, throughputs in tok/s or req/s,
`spec_decode_acceptance_rate` in percent and `spec_decode_acceptance_length` in tokens per step.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from sparkctl.bench import stats
from sparkctl.bench.protocol import BenchOptions

RESULT_KIND: Final = "sparkctl-bench-result"
SCHEMA_VERSION: Final = 1


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RequestRecord(_Model):
    """One request of a measurement, raw."""

    stream: int = Field(description="Stream index within its cell (0-based).")
    start_ms: float = Field(description="When it was sent, ms after the measurement started.")
    ttft_ms: Optional[float] = Field(description="Time to first generated text.")
    e2el_ms: Optional[float] = Field(description="End-to-end latency.")
    tpot_ms: Optional[float] = Field(description="(e2el - ttft) / (output_tokens - 1).")
    mean_itl_ms: Optional[float] = Field(description="Mean gap between chunks (a chunk may hold several tokens).")
    chunks: int = Field(description="Chunks that carried generated text.")
    prompt_tokens: Optional[int] = Field(description="usage.prompt_tokens as the server counted it.")
    output_tokens: Optional[int] = Field(description="usage.completion_tokens as the server counted it.")
    output_throughput: Optional[float] = Field(description="This stream's output tok/s over its whole request.")
    decode_throughput: Optional[float] = Field(description="Output tok/s after the first token (no prefill).")
    finish_reason: Optional[str] = None
    error: Optional[str] = None


class SpecDecodeFields(_Model):
    """Speculative decoding over a measurement, from /metrics counter deltas (null: not exported)."""

    spec_decode_acceptance_rate: Optional[float] = Field(None, description="accepted / draft tokens, percent.")
    spec_decode_acceptance_length: Optional[float] = Field(None, description="1 + accepted / drafts.")
    spec_decode_num_drafts: Optional[float] = Field(None, description="Draft rounds (delta).")
    spec_decode_draft_tokens: Optional[float] = Field(None, description="Draft tokens proposed (delta).")
    spec_decode_accepted_tokens: Optional[float] = Field(None, description="Draft tokens accepted (delta).")
    spec_decode_per_position_acceptance_rates: Optional[list[float]] = Field(
        None, description="Accepted at position i / drafts, percent, for each draft position."
    )


class LatencyFields(_Model):
    """Latency distribution over the requests of a measurement (vllm bench serve's names, ms)."""

    mean_ttft_ms: Optional[float] = None
    median_ttft_ms: Optional[float] = None
    std_ttft_ms: Optional[float] = None
    p99_ttft_ms: Optional[float] = None
    mean_tpot_ms: Optional[float] = None
    median_tpot_ms: Optional[float] = None
    std_tpot_ms: Optional[float] = None
    p99_tpot_ms: Optional[float] = None
    mean_itl_ms: Optional[float] = None
    median_itl_ms: Optional[float] = None
    std_itl_ms: Optional[float] = None
    p99_itl_ms: Optional[float] = None
    mean_e2el_ms: Optional[float] = None
    median_e2el_ms: Optional[float] = None
    std_e2el_ms: Optional[float] = None
    p99_e2el_ms: Optional[float] = None


class RepeatResult(SpecDecodeFields, LatencyFields):
    """One repeat of a cell: `streams` requests sent together, shaped like a vllm bench serve result."""

    repeat: int = Field(description="Repeat index (0-based).")
    duration: float = Field(description="From the first request sent to the last one done, s.")
    completed: int
    failed: int
    total_input_tokens: int
    total_output_tokens: int
    request_throughput: float = Field(description="completed / duration, req/s.")
    output_throughput: float = Field(description="Aggregate output tok/s: total_output_tokens / duration.")
    max_concurrency: int
    per_stream_output_throughput: Optional[float] = Field(None, description="Median over requests of each stream's output tok/s.")
    requests: list[RequestRecord]


class CellResult(SpecDecodeFields, LatencyFields):
    """One cell of the seed's table (workload x streams): the summary over its repeats."""

    workload: str
    streams: int
    max_concurrency: int
    repeats_done: int
    output_throughput: Optional[float] = Field(
        None, description="Median over repeats of the aggregate output tok/s (the table's figure)."
    )
    per_stream_output_throughput: Optional[float] = Field(
        None, description="Median over all requests of each stream's output tok/s."
    )
    completed: int = 0
    failed: int = 0
    total_input_tokens: int = 0
    total_output_tokens: int = 0
    repeats: list[RepeatResult] = Field(default_factory=list)


class ContextPoint(SpecDecodeFields):
    """The context-sweep workload at one prompt size."""

    workload: str
    target_prompt_tokens: int
    prompt_tokens: Optional[int] = Field(None, description="Median usage.prompt_tokens of its requests.")
    median_ttft_ms: Optional[float] = None
    output_throughput: Optional[float] = Field(None, description="Median per-request output tok/s.")
    decode_throughput: Optional[float] = Field(None, description="Median per-request tok/s after the first token.")
    requests: list[RequestRecord] = Field(default_factory=list)


class PrefillResult(_Model):
    """Time to first token of one long cold prompt, raw and less a measured fixed overhead."""

    target_prompt_tokens: int
    prompt_tokens: Optional[int] = None
    ttft_ms: Optional[float] = Field(None, description="Raw TTFT of the long prompt.")
    overhead_ms: Optional[float] = Field(None, description="Median TTFT of a short prompt: the fixed overhead.")
    overhead_samples_ms: list[float] = Field(default_factory=list)
    ttft_adjusted_ms: Optional[float] = Field(None, description="ttft_ms - overhead_ms.")
    prefill_throughput: Optional[float] = Field(None, description="prompt_tokens / ttft, tok/s (raw).")
    prefill_throughput_adjusted: Optional[float] = Field(
        None, description="prompt_tokens / (ttft - overhead), tok/s (the headline rate)."
    )
    requests: list[RequestRecord] = Field(default_factory=list)


class MixedResult(_Model):
    """A short request sent while a long cold prompt is prefilling: how long it waits."""

    long_target_prompt_tokens: int
    long_prompt_tokens: Optional[int] = None
    long_ttft_ms: Optional[float] = None
    short_prompt_tokens: Optional[int] = None
    short_ttft_alone_ms: Optional[float] = Field(None, description="Median TTFT of the short request on an idle server.")
    short_ttft_ms: Optional[float] = Field(None, description="TTFT of the short request behind the long one.")
    short_wait_ms: Optional[float] = Field(None, description="short_ttft_ms - short_ttft_alone_ms: the extra wait.")
    long_admitted_after_ms: Optional[float] = Field(
        None,
        description="When /metrics first showed the long request running (admitted, prefilling), ms after it was "
        "sent: the server's own preprocessing. Null without /metrics.",
    )
    short_sent_after_ms: Optional[float] = Field(None, description="When the short request left, after the long one.")
    short_sent_during_prefill: Optional[bool] = Field(
        None, description="The short request left before the long one's first token (else the test measured nothing)."
    )
    short_first_token_before_long: Optional[bool] = Field(
        None, description="The short request got its first token before the long one did."
    )
    requests: list[RequestRecord] = Field(default_factory=list)


class ServerInfo(_Model):
    models: list[str] = Field(default_factory=list, description="Model ids /v1/models lists.")
    max_model_len: Optional[int] = Field(None, description="From /v1/models; caps the long prompts.")
    version: Optional[str] = Field(None, description="From /version, when the server has it.")
    metrics: bool = Field(False, description="The server exports Prometheus /metrics.")
    speculative: Optional[bool] = Field(None, description="It exports speculative-decoding counters.")


class BenchResult(_Model):
    """A `sparkctl bench` run."""

    kind: Literal["sparkctl-bench-result"] = RESULT_KIND
    schema_version: Literal[1] = SCHEMA_VERSION
    sparkctl_version: str
    started_at: datetime
    finished_at: Optional[datetime] = None
    duration: Optional[float] = Field(None, description="Wall time of the run, s.")
    endpoint: str = Field(description="The /v1 base URL measured.")
    model: str
    server: ServerInfo = Field(default_factory=ServerInfo)
    options: BenchOptions
    interrupted: bool = Field(False, description="Stopped by Ctrl-C: holds what was measured until then.")
    notes: list[str] = Field(default_factory=list, description="Caps applied, failures, caveats.")
    throughput: list[CellResult] = Field(default_factory=list)
    context: list[ContextPoint] = Field(default_factory=list)
    prefill: Optional[PrefillResult] = None
    mixed: Optional[MixedResult] = None

    def cell(self, workload: str, streams: int) -> Optional[CellResult]:
        return next((c for c in self.throughput if c.workload == workload and c.streams == streams), None)


def json_schema() -> dict:
    """The published schema of the result file (docs/bench-result.schema.json)."""
    schema = BenchResult.model_json_schema(mode="serialization")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://sparkctl.invalid/schemas/bench-result-v1.json"
    return schema


# ---- building the summaries from raw requests -------------------------------------------------


def to_ms(seconds: Optional[float]) -> Optional[float]:
    return None if seconds is None else seconds * 1000.0


def request_record(m, t0: float) -> RequestRecord:
    """A Measured (client.py) as its raw record; t0 is when the measurement started."""
    itls = m.itls
    return RequestRecord(
        stream=m.stream,
        start_ms=(m.sent - t0) * 1000.0,
        ttft_ms=to_ms(m.ttft),
        e2el_ms=to_ms(m.e2el) if m.ok else None,
        tpot_ms=to_ms(m.tpot),
        mean_itl_ms=to_ms(stats.mean(itls)),
        chunks=len(m.chunk_times),
        prompt_tokens=m.prompt_tokens,
        output_tokens=m.output_tokens,
        output_throughput=m.output_throughput,
        decode_throughput=m.decode_throughput,
        finish_reason=m.finish_reason,
        error=m.error,
    )


def latency_fields(measured: list) -> dict:
    ok = [m for m in measured if m.ok]
    series = {
        "ttft": [m.ttft for m in ok],
        "tpot": [m.tpot for m in ok],
        "itl": [gap for m in ok for gap in m.itls],
        "e2el": [m.e2el for m in ok],
    }
    out: dict = {}
    for name, xs in series.items():
        out[f"mean_{name}_ms"] = to_ms(stats.mean(xs))
        out[f"median_{name}_ms"] = to_ms(stats.median(xs))
        out[f"std_{name}_ms"] = to_ms(stats.std(xs))
        out[f"p99_{name}_ms"] = to_ms(stats.percentile(xs, 99))
    return out


def spec_fields(delta) -> dict:
    """SpecDecodeFields from a SpecCounters delta (sparkctl/facts/metrics.py), or all null."""
    if delta is None:
        return {}
    return {
        "spec_decode_acceptance_rate": delta.acceptance_rate,
        "spec_decode_acceptance_length": delta.acceptance_length,
        "spec_decode_num_drafts": delta.drafts,
        "spec_decode_draft_tokens": delta.draft_tokens,
        "spec_decode_accepted_tokens": delta.accepted_tokens,
        "spec_decode_per_position_acceptance_rates": delta.per_position_acceptance_rates,
    }


def repeat_result(index: int, streams: int, measured: list, t0: float, t1: float, delta) -> RepeatResult:
    ok = [m for m in measured if m.ok]
    duration = max(t1 - t0, 1e-9)
    out_tokens = sum(m.output_tokens or 0 for m in ok)
    return RepeatResult(
        repeat=index,
        duration=duration,
        completed=len(ok),
        failed=len(measured) - len(ok),
        total_input_tokens=sum(m.prompt_tokens or 0 for m in ok),
        total_output_tokens=out_tokens,
        request_throughput=len(ok) / duration,
        output_throughput=out_tokens / duration,
        max_concurrency=streams,
        per_stream_output_throughput=stats.median(m.output_throughput for m in ok),
        requests=[request_record(m, t0) for m in measured],
        **latency_fields(measured),
        **spec_fields(delta),
    )


def cell_result(workload: str, streams: int, repeats: list[RepeatResult], measured: list, delta) -> CellResult:
    """The cell's summary: median of repeat throughputs, latencies over all its requests."""
    done = [r for r in repeats if r.completed > 0]
    return CellResult(
        workload=workload,
        streams=streams,
        max_concurrency=streams,
        repeats_done=len(repeats),
        output_throughput=stats.median(r.output_throughput for r in done),
        per_stream_output_throughput=stats.median(m.output_throughput for m in measured if m.ok),
        completed=sum(r.completed for r in repeats),
        failed=sum(r.failed for r in repeats),
        total_input_tokens=sum(r.total_input_tokens for r in repeats),
        total_output_tokens=sum(r.total_output_tokens for r in repeats),
        repeats=repeats,
        **latency_fields(measured),
        **spec_fields(delta),
    )
