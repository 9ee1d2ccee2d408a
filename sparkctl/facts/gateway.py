"""The front door as a client's network sees it: the gateway's own metrics page.

Fetched over httpx from the head's address and `runtime.port` at /gateway/metrics (the public
port: the gateway answers it even while it holds), parsed with prometheus_client's parser.
Doctor, status and the drills read these facts; the gateway's metrics are
sparkctl/gateway/metrics.py (docs/gateway.md lists them).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Optional
from urllib.parse import urlsplit

from sparkctl import httpclient
from sparkctl.launch.gateway import METRICS_PATH

P = "sparkctl_gateway_"


@dataclass
class GatewayPage:
    """One scrape of /gateway/metrics: what the gateway does now and its counters since it started."""

    upstream: Optional[str] = None  # where it sends requests, http://HOST:PORT (sparkctl_gateway_info)
    hold_s: Optional[float] = None
    hold_max_s: Optional[float] = None
    holding: dict[str, bool] = field(default_factory=dict)  # cause (admin, upstream_down, upstream_draining) -> holding for it
    hold_reason: Optional[str] = None  # the admin hold's reason (reload, restart, rollback ...)
    hold_age_s: float = 0.0
    hold_expires_in_s: float = 0.0
    hold_overrun_s: float = 0.0  # past the end sparkctl expected
    hold_expired_ago_s: Optional[float] = None  # since a hold last ended by itself; None: none since it started
    upstream_down_s: float = 0.0
    held: float = 0.0  # requests held now
    in_flight: float = 0.0
    requests: float = 0.0
    rejected: dict[str, float] = field(default_factory=dict)  # reason -> count
    upstream_errors: dict[str, float] = field(default_factory=dict)  # kind (connect, drain, cut) -> count
    zero_token_streams: dict[str, float] = field(default_factory=dict)  # finish_reason -> count
    holds_expired: float = 0.0
    long_context_running: float = 0.0
    long_context_waiting: float = 0.0

    @property
    def state(self) -> str:
        return "holding" if any(self.holding.values()) else "passing"

    @property
    def upstream_port(self) -> Optional[int]:
        try:
            return urlsplit(self.upstream).port if self.upstream else None
        except ValueError:
            return None

    def to_dict(self) -> dict:
        return {
            "state": self.state,
            "holding": {c: h for c, h in self.holding.items() if h},
            "hold": None
            if not self.holding.get("admin")
            else {
                "reason": self.hold_reason,
                "held_for_s": round(self.hold_age_s, 1),
                "expires_in_s": round(self.hold_expires_in_s, 1),
            },
            "upstream": self.upstream,
            "upstream_down_for_s": round(self.upstream_down_s, 1) if self.holding.get("upstream_down") else None,
            "held_requests": int(self.held),
            "in_flight": int(self.in_flight),
            "requests": int(self.requests),
            "rejected": {k: int(v) for k, v in self.rejected.items() if v},
            "upstream_errors": {k: int(v) for k, v in self.upstream_errors.items() if v},
            "empty_streams": {k: int(v) for k, v in self.zero_token_streams.items() if v},
            "holds_expired": int(self.holds_expired),
            "last_hold_expired_s_ago": None if self.hold_expired_ago_s is None else round(self.hold_expired_ago_s),
            "hold_s": self.hold_s,
        }


def parse_page(text: str) -> GatewayPage:
    """Prometheus text -> GatewayPage. ValueError on text that is not the exposition format, or not
    the gateway's (no sparkctl_gateway_ series: something else answers the port)."""
    from prometheus_client.parser import text_string_to_metric_families

    page, seen = GatewayPage(), False
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if not s.name.startswith(P):
                continue
            seen = True
            name, v = s.name.removeprefix(P), float(s.value)
            if name == "info":
                page.upstream = s.labels.get("upstream")
                page.hold_s = _number(s.labels.get("hold_s"))
                page.hold_max_s = _number(s.labels.get("hold_max_s"))
            elif name == "holding":
                page.holding[s.labels.get("cause", "")] = v > 0
            elif name == "hold_info" and v > 0:
                page.hold_reason = s.labels.get("reason")
            elif name == "hold_expired_seconds_ago":
                page.hold_expired_ago_s = v if v >= 0 else None
            elif name == "rejected_total":
                page.rejected[s.labels.get("reason", "")] = v
            elif name == "upstream_errors_total":
                page.upstream_errors[s.labels.get("kind", "")] = v
            elif name == "zero_token_streams_total":
                page.zero_token_streams[s.labels.get("finish_reason", "")] = v
            else:
                attr = {
                    "hold_age_seconds": "hold_age_s",
                    "hold_expires_in_seconds": "hold_expires_in_s",
                    "upstream_down_seconds": "upstream_down_s",
                    "hold_overrun_seconds": "hold_overrun_s",
                    "held_requests": "held",
                    "in_flight": "in_flight",
                    "requests_total": "requests",
                    "holds_expired_total": "holds_expired",
                    "long_context_running": "long_context_running",
                    "long_context_waiting": "long_context_waiting",
                }.get(name)
                if attr:
                    setattr(page, attr, v)
    if not seen:
        raise ValueError(f"no {P}* series: not the gateway's metrics")
    return page


@dataclass(frozen=True)
class AdminHold:
    """The hold a change asked of the gateway (its admin hold), as its metrics show it."""

    reason: str  # the change that holds: up, reload, rollback, down ("admin" when unnamed)
    held_for_s: float


def admin_hold(text: str) -> Optional[AdminHold]:
    """The admin hold the gateway's metrics lines show; None when it holds none for sparkctl (an
    outage hold is not one), or nothing answered (no lines)."""
    if not text.strip():
        return None
    page = parse_page(text)
    if not page.holding.get("admin"):
        return None
    return AdminHold(page.hold_reason or "admin", round(page.hold_age_s, 1))


def _number(text: Optional[str]) -> Optional[float]:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


@dataclass
class GatewayFacts:
    url: str  # http://HOST:PORT/gateway/metrics
    page: Optional[GatewayPage] = None  # None: no answer (error says why)
    error: Optional[str] = None
    at: Optional[float] = None  # time.monotonic() of the page
    earlier: Optional[GatewayPage] = None  # an earlier page (read_again): what happened in between
    window_s: Optional[float] = None

    @property
    def answering(self) -> bool:
        return self.page is not None

    def zero_token_streams_between(self) -> Optional[dict[str, float]]:
        """finish_reason -> streams that ended with no content token between the two pages (a counter
        that went down: the gateway restarted, count from zero); None with one page only."""
        if self.page is None or self.earlier is None:
            return None
        now, then = self.page.zero_token_streams, self.earlier.zero_token_streams
        out = {k: (now[k] - then.get(k, 0.0) if now[k] >= then.get(k, 0.0) else now[k]) for k in now}
        return {k: v for k, v in out.items() if v > 0}


def _why(exc: Exception) -> str:
    import httpx

    if isinstance(exc, httpx.ConnectError):
        return "connection refused or unreachable (no gateway listens)"
    if isinstance(exc, httpx.TimeoutException):
        return "no answer in time"
    if isinstance(exc, httpx.HTTPStatusError):
        return f"answers {exc.response.status_code}"
    return f"{type(exc).__name__}: {exc}"


def _get(url: str, timeout: float) -> GatewayPage:
    # trust_env=False: never through a proxy from the environment
    r = httpclient.get(url, timeout=timeout, trust_env=False)
    r.raise_for_status()
    return parse_page(r.text)


def fetch(host: str, port: int, timeout: float = 3.0) -> GatewayFacts:
    """GET http://host:port/gateway/metrics; never raises for what the network or the page does."""
    import httpx

    facts = GatewayFacts(url=f"http://{host}:{port}{METRICS_PATH}")
    try:
        facts.page, facts.at = _get(facts.url, timeout), time.monotonic()
    except httpx.HTTPError as exc:
        facts.error = _why(exc)
    except ValueError as exc:
        facts.error = f"not the gateway's metrics: {exc}"
    return facts


def read_again(facts: GatewayFacts, timeout: float = 3.0) -> GatewayFacts:
    """Read the page once more: the first becomes `earlier`. Unchanged when either read fails."""
    import httpx

    if facts.page is None:
        return facts
    try:
        page = _get(facts.url, timeout)
    except (httpx.HTTPError, ValueError):
        return facts
    now = time.monotonic()
    facts.earlier, facts.window_s = facts.page, now - (facts.at or now)
    facts.page, facts.at = page, now
    return facts
