"""The runtime's HTTP interface as a client sees it: /health, /v1/models, /metrics (vllm-interface.md).

Fetched by the runner over httpx from the head's address and runtime port, concurrently with
the hosts' probes. Each endpoint's answer (or why there is none) is kept; checks judge them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Optional

from sparkctl import httpclient
from sparkctl.facts.metrics import MetricsPage, parse_page


@dataclass
class EndpointFacts:
    url: str
    health: Optional[int] = None  # HTTP status of GET /health, None when no answer
    health_error: Optional[str] = None  # e.g. "connection refused" (loading, or nothing listening)
    models: Optional[list[dict]] = None
    models_error: Optional[str] = None
    metrics: MetricsPage = field(default_factory=MetricsPage)  # per engine (sparkctl/facts/metrics.py)
    metrics_error: Optional[str] = None
    metrics_at: Optional[float] = None  # time.monotonic() of the /metrics answer
    earlier: Optional[MetricsPage] = None  # an earlier page, for what happened in between (read_again)
    window_s: Optional[float] = None  # seconds between `earlier` and `metrics`

    @property
    def answering(self) -> bool:
        return self.health is not None


def _why(exc: Exception) -> str:
    import httpx

    if isinstance(exc, httpx.ConnectError):
        return "connection refused or unreachable (the runtime is loading, or nothing listens)"
    if isinstance(exc, httpx.TimeoutException):
        return "no answer in time"
    return f"{type(exc).__name__}: {exc}"


def _metrics(client, model: Optional[str]) -> MetricsPage:
    """GET /metrics -> the page by engine (facts/metrics.py); ValueError when not Prometheus text."""
    r = client.get("/metrics")
    r.raise_for_status()
    return parse_page(r.text, model)


def fetch(host: str, port: int, path: str = "", timeout: float = 3.0, model: Optional[str] = None) -> EndpointFacts:
    """The engine at http://host:port{path} (path: the gateway's engine route, launch/endpoints.py engine_endpoint)."""
    import httpx

    base = f"http://{host}:{port}{path}"
    facts = EndpointFacts(url=base)
    # trust_env=False: never route this through a proxy from the environment
    with httpclient.client(base_url=base, timeout=timeout, trust_env=False) as client:
        try:
            r = client.get("/health")
        except httpx.HTTPError as exc:
            facts.health_error = _why(exc)
            return facts  # nothing listens: the other endpoints cannot answer either
        if path and r.status_code == 502:  # the gateway answers for an engine that refused it
            facts.health_error = _why(httpx.ConnectError(r.text))
            return facts
        facts.health = r.status_code
        try:
            r = client.get("/v1/models")
            r.raise_for_status()
            facts.models = list(r.json().get("data") or [])
        except (httpx.HTTPError, ValueError, AttributeError) as exc:
            facts.models_error = _why(exc) if isinstance(exc, httpx.HTTPError) else f"unreadable answer: {exc}"
        try:
            facts.metrics, facts.metrics_at = _metrics(client, model), time.monotonic()
        except httpx.HTTPError as exc:
            facts.metrics_error = _why(exc)
        except ValueError as exc:
            facts.metrics_error = f"unreadable Prometheus text: {exc}"
    return facts


def read_again(
    facts: EndpointFacts, timeout: float = 3.0, model: Optional[str] = None, keep_earlier: bool = False
) -> EndpointFacts:
    """Read /metrics once more: the first page becomes `earlier`, so a check can judge what the
    runtime did in between (a histogram's recent observations, as Prometheus's rate() would)
    instead of everything since it started. With `keep_earlier` the earlier page stays and the
    window grows (a longer look from the same start). Unchanged when the first read failed or this one does."""
    import httpx

    if facts.metrics_at is None:
        return facts
    try:
        with httpclient.client(base_url=facts.url, timeout=timeout, trust_env=False) as client:
            page = _metrics(client, model)
    except (httpx.HTTPError, ValueError):
        return facts
    now = time.monotonic()
    if keep_earlier and facts.earlier is not None and facts.window_s is not None:
        facts.window_s += now - facts.metrics_at
    else:
        facts.earlier, facts.window_s = facts.metrics, now - facts.metrics_at
    facts.metrics, facts.metrics_at = page, now
    return facts
