"""`/metrics`: vLLM's Prometheus metrics, written in the text format prometheus_client produces.

Names, help texts, labels (`model_name`, `engine`, plus `finished_reason` / `position` / `reason` /
`sleep_state` / `source`, in vLLM's label order) and buckets follow vLLM 0.33's
vllm/v1/metrics/loggers.py and vllm/v1/spec_decode/metrics.py (docs/conformance.md lists each).
Counters expose `_total` and `_created` like a default (non-multiprocess) prometheus_client registry.
One engine (engine="0"): the lab runs no data parallelism.
"""

from __future__ import annotations

import bisect
import threading
import time

TTFT_BUCKETS = [
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
]
ITL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0]
REQUEST_LATENCY_BUCKETS = [
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
]
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")  # v1/engine FinishReason
WAITING_REASONS = ("capacity", "deferred")  # loggers.py WAITING_REASON_*
SLEEP_STATES = ("awake", "weights_offloaded", "discard_all")
PROMPT_SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")  # stats.py PromptTokenStats.ALL_SOURCES


def _fmt(v: float) -> str:
    if v == float("inf"):
        return "+Inf"
    return repr(float(v))


def _labels(d: dict[str, str]) -> str:
    # prometheus_client writes labels in labelnames order (model_name, engine, then the metric's own)
    if not d:
        return ""
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in d.items())
    return "{" + inner + "}"


def _escape(v: str) -> str:
    return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def build_1_2_5_buckets(max_value: int) -> list[float]:
    out: list[float] = []
    exponent = 0
    while True:
        for m in (1, 2, 5):
            value = m * 10**exponent
            if value <= max_value:
                out.append(float(value))
            else:
                return out
        exponent += 1


class _Series:
    def __init__(self, labels: dict[str, str]):
        self.labels = labels
        self.created = time.time()
        self.value = 0.0


class _Hist:
    def __init__(self, labels: dict[str, str], buckets: list[float]):
        self.labels = labels
        self.created = time.time()
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, v: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, v)] += 1
        self.sum += v
        self.count += 1


class Metric:
    def __init__(self, name: str, kind: str, doc: str, buckets: list[float] | None = None):
        self.name, self.kind, self.doc, self.buckets = name, kind, doc, buckets
        self.series: dict[tuple, _Series | _Hist] = {}

    def child(self, labels: dict[str, str]):
        key = tuple(sorted(labels.items()))
        s = self.series.get(key)
        if s is None:
            s = _Hist(labels, self.buckets or []) if self.kind == "histogram" else _Series(labels)
            self.series[key] = s
        return s

    def render(self, out: list[str]) -> None:
        name = f"{self.name}_total" if self.kind == "counter" else self.name
        out += [f"# HELP {name} {self.doc}", f"# TYPE {name} {self.kind}"]
        for s in self.series.values():
            if self.kind != "histogram":
                out.append(f"{name}{_labels(s.labels)} {_fmt(s.value)}")
                continue
            acc = 0
            for bound, c in zip(s.buckets + [float("inf")], s.counts):
                acc += c
                out.append(f"{name}_bucket{_labels({**s.labels, 'le': _fmt(bound)})} {_fmt(acc)}")
            out.append(f"{name}_count{_labels(s.labels)} {_fmt(s.count)}")
            out.append(f"{name}_sum{_labels(s.labels)} {_fmt(s.sum)}")
        if self.kind != "gauge":  # counters and histograms also expose when each series was created
            out += [f"# HELP {self.name}_created {self.doc}", f"# TYPE {self.name}_created gauge"]
            out += [f"{self.name}_created{_labels(s.labels)} {_fmt(s.created)}" for s in self.series.values()]


class VllmMetrics:
    """The metric set of one engine (engine="0") serving one model name."""

    def __init__(self, model_name: str, max_model_len: int, num_spec_tokens: int, cache_info: dict[str, str]):
        self.lock = threading.Lock()
        self.base = {"model_name": model_name, "engine": "0"}
        self.metrics: list[Metric] = []

        def m(name, kind, doc, buckets=None, label: str = "", values=None):
            """A metric with its series made up front, as prometheus_client's .labels() calls make them:
            one per value of its own `label`, else the one series of the base labels."""
            metric = Metric(name, kind, doc, buckets)
            self.metrics.append(metric)
            if values is None:
                metric.child(self.base)
            for value in values or ():
                metric.child({**self.base, label: value})
            return metric

        self.running = m("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.")
        self.waiting = m("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.")
        self.waiting_by_reason = m(
            "vllm:num_requests_waiting_by_reason",
            "gauge",
            "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for scheduling "
            "capacity; 'deferred' = deferred by transient constraints (LoRA budget, KV transfer, blocked "
            "status). Sum of all reasons equals vllm:num_requests_waiting.",
            label="reason",
            values=WAITING_REASONS,
        )
        self.sleep_state = m(
            "vllm:engine_sleep_state",
            "gauge",
            "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; "
            "weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.",
            label="sleep_state",
            values=SLEEP_STATES,
        )
        self.set_gauge(self.sleep_state, 1.0, sleep_state="awake")  # record_sleep_state(): awake by default
        self.kv_usage = m("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.")
        self.prefix_queries = m(
            "vllm:prefix_cache_queries", "counter", "Prefix cache queries, in terms of number of queried tokens."
        )
        self.prefix_hits = m("vllm:prefix_cache_hits", "counter", "Prefix cache hits, in terms of number of cached tokens.")
        self.preemptions = m("vllm:num_preemptions", "counter", "Cumulative number of preemption from the engine.")
        self.prompt_tokens = m("vllm:prompt_tokens", "counter", "Number of prefill tokens processed.")
        self.prompt_by_source = m(
            "vllm:prompt_tokens_by_source", "counter", "Number of prompt tokens by source.", label="source", values=PROMPT_SOURCES
        )
        self.prompt_cached = m("vllm:prompt_tokens_cached", "counter", "Number of cached prompt tokens (local + external).")
        self.generation_tokens = m("vllm:generation_tokens", "counter", "Number of generation tokens processed.")
        self.success = m(
            "vllm:request_success",
            "counter",
            "Count of successfully processed requests.",
            label="finished_reason",
            values=FINISH_REASONS,
        )
        token_buckets = build_1_2_5_buckets(max_model_len)
        self.req_prompt = m("vllm:request_prompt_tokens", "histogram", "Number of prefill tokens processed.", token_buckets)
        self.req_gen = m("vllm:request_generation_tokens", "histogram", "Number of generation tokens processed.", token_buckets)
        self.iter_tokens = m(
            "vllm:iteration_tokens_total",
            "histogram",
            "Histogram of number of tokens per engine_step.",
            [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384],
        )
        self.req_max_tokens = m(
            "vllm:request_params_max_tokens", "histogram", "Histogram of the max_tokens request parameter.", token_buckets
        )
        self.ttft = m(
            "vllm:time_to_first_token_seconds", "histogram", "Histogram of time to first token in seconds.", TTFT_BUCKETS
        )
        self.itl = m("vllm:inter_token_latency_seconds", "histogram", "Histogram of inter-token latency in seconds.", ITL_BUCKETS)
        self.e2e = m(
            "vllm:e2e_request_latency_seconds",
            "histogram",
            "Histogram of e2e request latency in seconds.",
            REQUEST_LATENCY_BUCKETS,
        )
        self.queue_time = m(
            "vllm:request_queue_time_seconds",
            "histogram",
            "Histogram of time spent in WAITING phase for request.",
            REQUEST_LATENCY_BUCKETS,
        )
        self.inference_time = m(
            "vllm:request_inference_time_seconds",
            "histogram",
            "Histogram of time spent in RUNNING phase for request.",
            REQUEST_LATENCY_BUCKETS,
        )
        self.prefill_time = m(
            "vllm:request_prefill_time_seconds",
            "histogram",
            "Histogram of time spent in PREFILL phase for request.",
            REQUEST_LATENCY_BUCKETS,
        )
        self.decode_time = m(
            "vllm:request_decode_time_seconds",
            "histogram",
            "Histogram of time spent in DECODE phase for request.",
            REQUEST_LATENCY_BUCKETS,
        )
        self.prefill_kv_computed = m(
            "vllm:request_prefill_kv_computed_tokens",
            "histogram",
            "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
            token_buckets,
        )
        self.cache_info = m("vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig", values=())
        # its one series: log_metrics_info()'s CacheConfig.metrics_info() with engine set last
        self.cache_info.child({**cache_info, "engine": "0"}).value = 1.0
        self.spec_drafts = self.spec_draft_tokens = self.spec_accepted = self.spec_per_pos = None
        if num_spec_tokens:
            self.spec_drafts = m("vllm:spec_decode_num_drafts", "counter", "Number of spec decoding drafts.")
            self.spec_draft_tokens = m("vllm:spec_decode_num_draft_tokens", "counter", "Number of draft tokens.")
            self.spec_accepted = m("vllm:spec_decode_num_accepted_tokens", "counter", "Number of accepted tokens.")
            self.spec_per_pos = m(
                "vllm:spec_decode_num_accepted_tokens_per_pos",
                "counter",
                "Accepted tokens per draft position.",
                label="position",
                values=[str(pos) for pos in range(num_spec_tokens)],
            )

    def set_gauge(self, metric: Metric, value: float, **extra: str) -> None:
        metric.child({**self.base, **extra}).value = float(value)

    def inc(self, metric: Metric, value: float = 1.0, **extra: str) -> None:
        if value:
            metric.child({**self.base, **extra}).value += value

    def observe(self, metric: Metric, value: float) -> None:
        metric.child(self.base).observe(value)

    def prompt_admitted(self, prompt_tokens: int, cached: int) -> None:
        """A prompt's tokens by where their KV comes from, counted at admission (loggers.py)."""
        self.inc(self.prompt_cached, cached)
        self.inc(self.prompt_by_source, cached, source="local_cache_hit")
        self.inc(self.prompt_by_source, prompt_tokens - cached, source="local_compute")
        self.observe(self.prefill_kv_computed, prompt_tokens - cached)

    def render(self) -> str:
        out: list[str] = []
        with self.lock:
            for metric in self.metrics:
                metric.render(out)
        return "\n".join(out) + "\n"
