"""The front door's own Prometheus metrics (at /fleetdoor/metrics, and /metrics on the admin socket)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Info, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

STATES = ("passing", "drained", "holding", "failing")
# errors talking to a member (the `kind` label)
CONNECT = "connect"  # refused or reset before any answer: the request went to another member
REFUSED = "refused"  # it answered 503 (its gateway rejects, its engine is paused): sent to another member
RESCUED = "rescued"  # it turned failing before it answered: the request went to another member
CUT = "cut"  # the answer broke off midway: the client's connection was closed midway too


class Metrics:
    def __init__(self, members: list[str]) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        p = "sparkctl_fleetdoor_"
        self.state = Gauge(p + "member_state", "1 for each member's current state", ["member", "state"], registry=r)
        self.outstanding = Gauge(p + "member_outstanding", "Requests sent to the member and not finished", ["member"], registry=r)
        self.requests = Counter(p + "member_requests", "Requests sent to the member", ["member"], registry=r)
        self.errors = Counter(
            p + "member_errors",
            "Failures talking to the member: connect, refused, rescued (each sent to another member), cut",
            ["member", "kind"],
            registry=r,
        )
        self.routed = Counter(
            p + "routed", "Requests routed, by how: affinity (the key's member) or load (least outstanding)", ["by"], registry=r
        )
        self.received = Counter(p + "requests", "Requests the front door received", registry=r)
        self.rejected = Counter(p + "rejected", "Requests answered 503 by the front door: no member eligible", registry=r)
        self.eligible = Gauge(p + "eligible_members", "Members that take new requests now", registry=r)
        self.info = Info(p.rstrip("_"), "The front door's members and bounds", registry=r)
        for m in members:
            for s in STATES:
                self.state.labels(m, s).set(0)
            self.outstanding.labels(m).set(0)
            self.requests.labels(m)
            for kind in (CONNECT, REFUSED, RESCUED, CUT):
                self.errors.labels(m, kind)
        for by in ("affinity", "load"):
            self.routed.labels(by)

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
