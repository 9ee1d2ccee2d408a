"""The gateway's own Prometheus metrics (served at /gateway/metrics and on the admin socket's /metrics).

A registry of its own: the public /metrics passes through to the engine, as before the gateway.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

# Rejection reasons (the `reason` label): what the client was answered, and why.
HOLD_TOO_LONG = "hold_too_long"  # 503 at once: the expected hold is longer than hold_s
HELD_TOO_LONG = "held_too_long"  # 503 after hold_s: the hold (or the upstream outage) outlasted it
HOLD_QUEUE_FULL = "hold_queue_full"  # 503 at once: hold_queue requests are held already
LONG_CONTEXT_QUEUE_FULL = "long_context_queue_full"  # 429 at once
LONG_CONTEXT_WAIT = "long_context_wait"  # 429 after long_context_wait_s
BODY_TOO_LARGE = "body_too_large"  # 413 at once: a body past max_body_bytes (bounds.py)
BUFFER_FULL = "buffer_full"  # 503 at once: the bodies held already reach max_buffered_bytes
GATEWAY_STOPPING = "gateway_stopping"  # 503 on SIGTERM: a request still held when the gateway stops


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        p = "sparkctl_gateway_"
        self.holding = Gauge(
            p + "holding", "1 while the gateway holds new requests (a hold, the upstream down or draining)", ["cause"], registry=r
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
            "(it reached an engine going away, which refused or aborted it empty), dead (it reached "
            "an engine already dead): held and sent again; died (the engine died while it had the "
            "request: answered with an error, never sent again), cut (the response broke off mid-answer), "
            "stalled (the engine sent nothing for upstream_idle_s: answered 504 or cut, never sent again; held after)",
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
        # what doctor and the alerts judge a hold by (the counters above say what it did to requests)
        self.hold_age = Gauge(p + "hold_age_seconds", "Seconds since the current admin hold began (0: no hold)", registry=r)
        self.hold_expires_in = Gauge(
            p + "hold_expires_in_seconds", "Seconds until the current admin hold ends by itself (0: no hold)", registry=r
        )
        self.hold_overrun = Gauge(
            p + "hold_overrun_seconds",
            "Seconds the current admin hold has run past the end sparkctl expected (0: within it, or none expected)",
            registry=r,
        )
        self.hold_expired_ago = Gauge(
            p + "hold_expired_seconds_ago", "Seconds since a hold last ended by itself (-1: none since it started)", registry=r
        )
        self.hold_info = Gauge(p + "hold_info", "1 for the current admin hold, labelled with its reason", ["reason"], registry=r)
        self.upstream_down_for = Gauge(
            p + "upstream_down_seconds", "Seconds since the engine stopped taking connections (0: it takes them)", registry=r
        )
        self.info = Info(p.rstrip("_"), "Where the gateway sends requests (upstream) and its hold bounds", registry=r)
        self.long_running = Gauge(p + "long_context_running", "Long-context requests at the engine now", registry=r)
        self.long_waiting = Gauge(p + "long_context_waiting", "Long-context requests waiting for a slot", registry=r)
        self.buffered_bytes = Gauge(
            p + "buffered_bytes",
            "Bytes of request bodies the gateway holds now (read, held, queued or at the engine)",
            registry=r,
        )
        for cause in ("admin", "upstream_down", "upstream_draining"):
            self.holding.labels(cause).set(0)
        for outcome in ("sent", "rejected", "gone"):
            self.hold_seconds.labels(outcome)
        for reason in (
            HOLD_TOO_LONG,
            HELD_TOO_LONG,
            HOLD_QUEUE_FULL,
            LONG_CONTEXT_QUEUE_FULL,
            LONG_CONTEXT_WAIT,
            BODY_TOO_LARGE,
            BUFFER_FULL,
            GATEWAY_STOPPING,
        ):
            self.rejected.labels(reason)
        for kind in ("connect", "drain", "dead", "died", "cut", "stalled"):
            self.upstream_errors.labels(kind)

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
