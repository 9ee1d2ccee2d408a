"""sparkctl's side of vllm-router's worker management: the router's view of each member, taking a
member out (drain) and putting it back (undrain), over HTTP to the fleet's front door, every call
with a deadline. The router's own API (vllm-router 0.1.17, the one the lab runs):

    GET  /workers                 each worker: url, is_healthy, load
    POST /remove_worker?url=URL   new requests go to the others; requests in flight there finish
    POST /add_worker?url=URL      taken once its /health answers (within the launch's
                                  --worker-startup-timeout-secs; else 400 and it stays out)
    GET  :metrics_port/metrics    vllm_router_running_requests{worker} (kept after a removal, so
                                  a drain reads it to 0), vllm_router_processed_requests_total,
                                  vllm_router_cb_state (0 closed, 1 open, 2 half-open)

A member's state there: passing (a worker, healthy, circuit not open), failing (a worker its
health checks or its circuit breaker took out), drained (not a worker: removed, or refused when
added because it did not serve).

    drain(fleet, "lab-2", wait_s=120)  returns once nothing is in flight on lab-2 (the router's
                                       running gauge, then the engine's own); DrainTimeout after wait_s
    undrain(fleet, "lab-2")
    status(fleet) -> {"members": {NAME: {"state", "url", "outstanding", "requests", "errors",
                                         "healthy", "circuit", "reason"}}, "eligible": [...], "outstanding": int}

The router's management routes answer on its public port (vllm-router has no separate admin
listener): docs/fleets.md says who can reach it.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Optional

import httpx

from sparkctl import httpclient
from sparkctl.errors import HostError

if TYPE_CHECKING:
    from sparkctl.fleet.model import Fleet

ADMIN_TIMEOUT = 5.0
FIX_UP = "start it with `sparkctl fleet up`"
CIRCUIT = {0: "closed", 1: "open", 2: "half-open"}
POLL_S = 0.25


class DoorAbsent(HostError):
    """Nothing answers on the fleet's front door."""


class DoorAdminError(HostError):
    """The router answers but refused or garbled a management call."""


class DrainTimeout(HostError):
    """The member is out of the router, but requests were still in flight on it after wait_s."""

    def __init__(self, message: str, in_flight: int, doc: dict, fix: Optional[str] = None):
        super().__init__(message, fix=fix)
        self.in_flight, self.doc = in_flight, doc


def _request(fleet: "Fleet", method: str, url: str, what: str, timeout: float = ADMIN_TIMEOUT) -> httpx.Response:
    from sparkctl.transport.guard import check_url

    check_url(url, "the fleet's front door")
    try:
        return httpclient.request(method, url, timeout=timeout, trust_env=False)
    except httpx.HTTPError as err:
        said = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
        raise DoorAbsent(f"the fleet's front door {fleet.front_door_url} does not answer {what} ({said})", fix=FIX_UP) from None


def workers(fleet: "Fleet") -> dict[str, dict]:
    """The router's workers by URL (GET /workers)."""
    r = _request(fleet, "GET", fleet.front_door_url + "/workers", "its workers")
    try:
        doc = r.json()
        return {w["url"]: w for w in doc["workers"]}
    except (ValueError, KeyError, TypeError):
        raise DoorAdminError(
            f"the fleet's front door {fleet.front_door_url} answered /workers with HTTP {r.status_code}: {r.text[:200]}",
            fix=f"is vllm-router serving on {fleet.front_door_url}? {FIX_UP}",
        ) from None


def router_metrics(fleet: "Fleet") -> dict[str, dict[str, float]]:
    """Per worker URL: running, processed, failures, circuit (the router's Prometheus page)."""
    from prometheus_client.parser import text_string_to_metric_families

    r = _request(fleet, "GET", fleet.router_metrics_url, "its metrics")
    names = {
        "vllm_router_running_requests": "running",
        "vllm_router_processed_requests": "processed",
        "vllm_router_cb_state": "circuit",
    }
    out: dict[str, dict[str, float]] = {}
    try:
        for fam in text_string_to_metric_families(r.text):
            for s in fam.samples:
                worker = s.labels.get("worker")
                if worker is None:
                    continue
                key = names.get(s.name.removesuffix("_total"))
                if key is not None:
                    out.setdefault(worker, {})[key] = s.value
                elif s.name == "vllm_router_cb_outcomes_total" and s.labels.get("outcome") == "failure":
                    out.setdefault(worker, {})["failures"] = s.value
    except ValueError as err:
        raise DoorAdminError(f"the router's metrics page {fleet.router_metrics_url} is not Prometheus text: {err}") from None
    return out


def status(fleet: "Fleet", session=None) -> dict:
    """Each member as the router sees it (`session` is unused: the router answers over HTTP)."""
    from sparkctl.fleet.router_launch import worker_urls

    present = workers(fleet)
    try:
        metrics = router_metrics(fleet)
    except HostError:
        metrics = {}  # the states still read; the counts do not
    members = {}
    for name, url in worker_urls(fleet).items():
        w, m = present.get(url), metrics.get(url, {})
        # a worker the router never sent a request has no circuit gauge yet: it is closed
        circuit = CIRCUIT.get(int(m["circuit"])) if "circuit" in m else ("closed" if w is not None else None)
        if w is None:
            state, reason = "drained", "not one of the router's workers (removed, or not serving when added)"
        elif not w.get("is_healthy", False):
            state, reason = "failing", "the router's health checks took it out"
        elif circuit == "open":
            state, reason = "failing", "its circuit is open (requests failed)"
        else:
            state, reason = "passing", ""
        members[name] = {
            "state": state,
            "url": url,
            "outstanding": int(m.get("running", 0)),
            "requests": int(m.get("processed", 0)),
            "errors": int(m.get("failures", 0)),
            "healthy": None if w is None else bool(w.get("is_healthy")),
            "circuit": circuit,
            "reason": reason,
        }
    return {
        "members": members,
        "eligible": [n for n, m in members.items() if m["state"] == "passing"],
        "outstanding": sum(m["outstanding"] for m in members.values()),
    }


def _manage(fleet: "Fleet", action: str, member: str, timeout: float = ADMIN_TIMEOUT) -> httpx.Response:
    from sparkctl.fleet.router_launch import worker_urls

    url = worker_urls(fleet)[member]
    return _request(fleet, "POST", f"{fleet.front_door_url}/{action}?url={url}", f"/{action}", timeout=timeout)


def drain(fleet: "Fleet", member: str, wait_s: float = 600.0, session=None) -> dict:
    """Take `member` out of the router and wait until nothing is in flight on it: the router's
    running gauge for it at 0, then its engine's own (vllm:num_requests_running + waiting: requests
    that reached it otherwise). DrainTimeout (naming how many) after wait_s: it then stays out
    (undrain puts it back)."""
    fleet.member(member)  # InputError for a name the fleet lacks, before anything is asked
    r = _manage(fleet, "remove_worker", member)
    if r.status_code != 200 and "not found" not in r.text.lower():  # already out: the drain goes on
        raise DoorAdminError(f"the fleet's front door refused to take {member} out: HTTP {r.status_code} {r.text[:200]}")
    t0 = time.monotonic()
    doc = status(fleet)
    while True:
        in_flight = doc["members"][member]["outstanding"]
        if in_flight == 0:
            in_flight = _engine_in_flight(fleet, member)
        if in_flight == 0:
            return {**doc, "drained": member, "waited_s": round(time.monotonic() - t0, 3)}
        if time.monotonic() - t0 > wait_s:
            raise DrainTimeout(
                f"{member} is out of the fleet's front door but {in_flight} request(s) are still in flight on it after {wait_s:g} s",
                in_flight,
                doc,
                fix=f"wait longer (a larger wait), or `undrain` {member} to put it back",
            )
        time.sleep(POLL_S)
        doc = status(fleet)


def _engine_in_flight(fleet: "Fleet", member: str) -> int:
    """The member's engine's running + waiting requests; 0 when its engine does not answer (nothing
    runs there). A member refusing sparkctl's key is an error, never a 0 (fleet/keys.py)."""
    from sparkctl.facts.metrics import RUNNING, WAITING, parse_page
    from sparkctl.runtime.health import base_url

    inv = fleet.member(member).inventory
    url = base_url(inv) + "/metrics"
    try:
        r = httpclient.get(url, timeout=ADMIN_TIMEOUT, trust_env=False)
        if r.status_code in (401, 403):
            raise DoorAdminError(
                f"{member}'s engine refused sparkctl's key ({url}: HTTP {r.status_code}): its in-flight requests "
                "cannot be counted",
                fix=f"the first key in its gateway.api_keys_file must be one its gateway takes: `sparkctl doctor -i "
                f"{fleet.member(member).inventory_path}`",
            )
        page = parse_page(r.text, inv.runtime.served_model_name)
    except (httpx.HTTPError, ValueError):
        return 0
    return int((page.total(RUNNING) or 0) + (page.total(WAITING) or 0))


def undrain(fleet: "Fleet", member: str, session=None) -> dict:
    """Put `member` back: the router takes it once its /health answers (ADD_WAIT_S), else refuses
    and it stays out (DoorAdminError naming why)."""
    from sparkctl.fleet.router_launch import ADD_WAIT_S

    fleet.member(member)
    r = _manage(fleet, "add_worker", member, timeout=ADD_WAIT_S + ADMIN_TIMEOUT)
    if r.status_code != 200 and "already exists" not in r.text:
        raise DoorAdminError(
            f"the fleet's front door did not take {member} back: HTTP {r.status_code} {r.text[:300]}",
            fix=f"it is taken once its /health answers: `sparkctl status -i {fleet.member(member).inventory_path}`",
        )
    return {**status(fleet), "undrained": member}
