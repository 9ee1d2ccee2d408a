"""The gateway's own Prometheus metrics (served at /gateway/metrics and on the admin socket's /metrics).

A registry of its own: the public /metrics passes through to the engine, as before the gateway.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

# Rejection reasons (the `reason` label): what the client was answered, and why.
HOLD_TOO_LONG = "hold_too_long"  # 503 at once: the expected hold is longer than hold_s
HELD_TOO_LONG = "held_too_long"  # 503 after hold_s: the hold (or the upstream outage) outlasted it
HOLD_QUEUE_FULL = "hold_queue_full"  # 503 at once: hold_queue requests are held already
LONG_CONTEXT_QUEUE_FULL = "long_context_queue_full"  # 429 at once
LONG_CONTEXT_WAIT = "long_context_wait"  # 429 after long_context_wait_s


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        p = "sparkctl_gateway_"
        self.holding = Gauge(
            p + "holding", "1 while the gateway holds new requests (a hold, or the upstream is down)", ["cause"], registry=r
        )
        self.held = Gauge(p + "held_requests", "Requests held now, waiting for the engine", registry=r)
        self.hold_seconds = Histogram(
            p + "hold_seconds",
            "How long each held request was held, by how it ended",
            ["outcome"],
            registry=r,
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 900),
        )
        self.rejected = Counter(
            p + "rejected", "Requests the gateway answered itself (503/429), by reason", ["reason"], registry=r
        )
        self.in_flight = Gauge(p + "in_flight", "Requests sent to the engine and not finished", registry=r)
        self.requests = Counter(p + "requests", "Requests the gateway received", registry=r)
        self.upstream_errors = Counter(
            p + "upstream_errors",
            "Failures talking to the engine: connect (before the request reached it), drain "
            "(it reached an engine going away, which refused or aborted it empty): both held "
            "and sent again; cut (the response broke off mid-answer)",
            ["kind"],
            registry=r,
        )
        self.zero_token_streams = Counter(
            p + "zero_token_streams",
            "Streams that ended without one content token, by the last finish_reason",
            ["finish_reason"],
            registry=r,
        )
        self.holds_expired = Counter(
            p + "holds_expired", "Holds that ended by themselves at hold_max_s (nobody released them)", registry=r
        )
        self.long_running = Gauge(p + "long_context_running", "Long-context requests at the engine now", registry=r)
        self.long_waiting = Gauge(p + "long_context_waiting", "Long-context requests waiting for a slot", registry=r)
        for cause in ("admin", "upstream_down"):
            self.holding.labels(cause).set(0)
        for outcome in ("sent", "rejected", "gone"):
            self.hold_seconds.labels(outcome)
        for reason in (HOLD_TOO_LONG, HELD_TOO_LONG, HOLD_QUEUE_FULL, LONG_CONTEXT_QUEUE_FULL, LONG_CONTEXT_WAIT):
            self.rejected.labels(reason)
        for kind in ("connect", "drain", "cut"):
            self.upstream_errors.labels(kind)

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
