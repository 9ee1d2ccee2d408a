"""gateway (the front door on the head, docs/gateway.md): it answers on runtime.port, sends to the
engine's port, is not holding with nobody changing the cluster, has an engine behind it, and its
streams carry tokens.

Read from the gateway's own metrics (facts/gateway.py, fetched at runtime.port/gateway/metrics,
which answers even while holding) and the cluster lock (a hold is right only while a sparkctl run
changes the cluster). With `gateway.enabled: false` every check is `skipped`: there is no front door.
"""

from __future__ import annotations

from functools import wraps
from typing import TYPE_CHECKING, Any, Optional

from sparkctl.checks.base import Context, fail, head_host, host_check, ok, skipped, warn
from sparkctl.launch.gateway import CONTAINER, ROLE

if TYPE_CHECKING:
    from sparkctl.facts.docker import ContainerFact
    from sparkctl.facts.host import HostFacts

READS = frozenset({"containers", "lock", "gateway_keys"})

DISABLED = "gateway.enabled: false: no front door, the engine serves runtime.port itself"
NOT_ANSWERING = "the gateway does not answer (see gateway.answers)"
EXPIRED_RECENTLY_S = 3600  # a hold that ended by itself within this warns
RELEASE = f"docker exec {CONTAINER} python3 -m sparkctl.gateway.ctl release"
RELEASE_FIX = (
    f"no change is running: release the hold with `sparkctl gateway release` (on the head: `{RELEASE}`) or "
    "`sparkctl up` (it releases a hold no change owns); or rerun the change (`sparkctl reload --config NEW`), "
    "which releases it once the new engine serves"
)


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def gateway_check(name: str, doc: str):
    """A head check that is `skipped` when the inventory has no gateway or it was not read."""

    def deco(fn):
        @wraps(fn)
        def guarded(ctx: Context, host: str, f: HostFacts):
            if not ctx.inventory.gateway.enabled:
                return skipped(DISABLED)
            if ctx.gateway is None:
                return skipped("not asked")
            return fn(ctx, host, f, ctx.gateway)

        return host_check(name, doc, scope=head_host)(guarded)

    return deco


def _container(f: Optional[HostFacts]) -> Optional[ContainerFact]:
    """The head's gateway container (containers fact), or None."""
    return next((c for c in (f.containers or []) if c.role == ROLE or c.name == CONTAINER), None) if f else None


def _serving(gw):
    return gw.page if gw.answering else None


@gateway_check("gateway.answers", "the front door answers on runtime.port (its /gateway/metrics)")
def answers(ctx: Context, host: str, f: HostFacts, gw):
    page = _serving(gw)
    if page is not None:
        hold = f"holding ({page.hold_reason or 'the engine is down'})" if page.state == "holding" else "passing"
        return ok(f"{gw.url}: {hold}, {page.held:g} held, {page.in_flight:g} in flight", state=page.state)
    c = _container(f)
    if c is None and not any(x.containers for x in ctx.facts.values()):
        return skipped("runtime not running (`sparkctl up` starts it)")
    what = "no container" if c is None else f"{c.name} is {c.status}" + (f" (exit code {c.exit_code})" if not c.running else "")
    return fail(
        f"{gw.url} {gw.error} ({what}): clients on runtime.port {ctx.inventory.runtime.port} get connection refused",
        f"`sparkctl up` starts {CONTAINER} (it restarts nothing else); read why it stopped first: "
        f"`docker logs --tail 100 {CONTAINER}` on {host}",
    )


@gateway_check("gateway.upstream", "the gateway sends to the engine's port (gateway.engine_port)")
def upstream(ctx: Context, host: str, f: HostFacts, gw):
    page = _serving(gw)
    if page is None:
        return skipped(NOT_ANSWERING)
    want = ctx.inventory.gateway.engine_port
    if page.upstream is None:
        return warn(
            "the gateway's metrics do not say where it sends (no sparkctl_gateway_info)",
            f"an older gateway: `sparkctl up` restarts {CONTAINER} with this sparkctl's code",
        )
    if page.upstream_port != want:
        return fail(
            f"the gateway sends to {page.upstream}, the engine listens on port {want} (gateway.engine_port): every "
            "request is held, then 503",
            f"`sparkctl up` restarts {CONTAINER} with the inventory's launch (`sparkctl render` shows its --upstream)",
            upstream=page.upstream,
        )
    return ok(f"sends to {page.upstream}", upstream=page.upstream)


@gateway_check("gateway.holding", "the gateway holds requests only while a sparkctl change runs (no hold left behind)")
def holding(ctx: Context, host: str, f: HostFacts, gw):
    page = _serving(gw)
    if page is None:
        return skipped(NOT_ANSWERING)
    if not page.holding.get("admin"):
        ago = page.hold_expired_ago_s
        if ago is not None and ago < EXPIRED_RECENTLY_S:
            # nobody released it: the change that held died, and may have left the engine half-changed
            return warn(
                f"passing; a hold ended by itself {_duration(ago)} ago, at gateway.hold_max_s: nobody released it "
                "(a sparkctl change died mid-way?)",
                "`sparkctl history` shows the change that died, `sparkctl doctor` what it left; finish it or roll it back",
                holds_expired=page.holds_expired,
            )
        return ok("no hold: passing requests", holds_expired=page.holds_expired)
    data = {
        "reason": page.hold_reason,
        "held_for_s": round(page.hold_age_s, 1),
        "expires_in_s": round(page.hold_expires_in_s, 1),
        "held_requests": page.held,
    }
    what = (
        f"holding requests for {_duration(page.hold_age_s)} (reason {page.hold_reason or '?'}, {page.held:g} held; "
        f"each waits at most hold_s {page.hold_s or ctx.inventory.gateway.hold_s:g} s, then 503)"
    )
    if "lock" not in f.sections:
        return warn(f"{what}; the cluster lock was not read", RELEASE_FIX, **data)
    holder = f.lock
    if page.hold_overrun_s > 0:
        what += f"; {_duration(page.hold_overrun_s)} past the end sparkctl expected"
    if holder is not None and holder.gone() is None:
        return warn(
            f"{what} while {holder.describe()} changes the cluster",
            "wait: the change releases the hold when the new engine serves (`sparkctl history` when it ends)",
            **data,
        )
    who = "no sparkctl run holds the cluster lock" if holder is None else f"the run holding the lock is gone ({holder.gone()})"
    return fail(
        f"{what}, and {who}: a hold left behind (sparkctl died mid-change?); it ends by itself in "
        f"{_duration(page.hold_expires_in_s)}",
        RELEASE_FIX,
        **data,
    )


@gateway_check("gateway.engine", "the engine behind the gateway takes connections (else requests are held, then 503)")
def engine(ctx: Context, host: str, f: HostFacts, gw):
    page = _serving(gw)
    if page is None:
        return skipped(NOT_ANSWERING)
    if page.holding.get("upstream_draining"):
        return fail(
            f"the engine at {page.upstream or '?'} is draining with no sparkctl change running (it answers new requests "
            "with an empty `abort`): the gateway holds requests until it serves again, up to its hold_s, then 503",
            "a stop outside sparkctl (`docker restart`, a reboot): wait for the engine to come back, or `sparkctl up`",
        )
    if not page.holding.get("upstream_down"):
        return ok(f"the engine at {page.upstream or '?'} takes connections")
    hold_s = page.hold_s or ctx.inventory.gateway.hold_s
    stalled = int(page.upstream_errors.get("stalled", 0))
    if stalled:  # it took requests and answered nothing (a hung or stopped engine): its /health does not answer either
        what = (
            f"has stopped answering ({stalled} request(s) got nothing within gateway.upstream_idle_s "
            f"{ctx.inventory.gateway.upstream_idle_s:g} s) and its /health has not answered 200 for"
        )
    else:
        what = "has refused connections for"
    return fail(
        f"the engine at {page.upstream or '?'} {what} {_duration(page.upstream_down_s)} while the "
        f"gateway answers: requests are held up to {hold_s:g} s, then 503 with Retry-After",
        "a crash outside a change: `sparkctl doctor --only runtime` names the cause (runtime.engine, runtime.containers); "
        "then `sparkctl up`"
        # head and worker are one Ray cluster: a hung engine restarts whole (vLLM has no partial restart)
        + (" (a hung engine: `sparkctl restart`, which restarts head and worker together)" if stalled else ""),
        down_for_s=round(page.upstream_down_s, 1),
        **({"stalled_requests": stalled} if stalled else dict[str, Any]()),
    )


@gateway_check("gateway.zero_tokens", 'no stream ends without a content token ("HTTP up, zero tokens")')
def zero_tokens(ctx: Context, host: str, f: HostFacts, gw):
    page = _serving(gw)
    if page is None:
        return skipped(NOT_ANSWERING)
    total = {k: v for k, v in page.zero_token_streams.items() if v}
    since = f"{sum(total.values()):g} since the gateway started" if total else "none since the gateway started"
    recent = gw.zero_token_streams_between()
    if recent is None:
        return ok(f"{since} (one page read: nothing to compare)", since_start=total)
    if not recent:
        return ok(f"none in the last {gw.window_s:.1f} s ({since})", since_start=total)
    by = ", ".join(f"{v:g} {k}" for k, v in sorted(recent.items()))
    why = (
        "`abort`: an engine draining with nobody holding its requests (stopped outside sparkctl?)"
        if set(recent) == {"abort"}
        else "the engine answers 200 and generates nothing"
    )
    return fail(
        f"{sum(recent.values()):g} stream(s) ended without one content token in the last {gw.window_s:.1f} s "
        f"(finish_reason: {by}): {why}",
        "`sparkctl doctor --only runtime` (the engine's log and health), then `sparkctl runbook gateway-zero-tokens`",
        recent=recent,
        since_start=total,
    )


@host_check("gateway.keys", "clients must send a key: the cluster is not open to whoever reaches its port", scope=head_host)
def keys(ctx: Context, host: str, f: HostFacts):
    """From the inventory alone (docs/gateway.md "Security"): with a gateway, the engine listens on the
    head's loopback and the gateway is the only way in; without one, the engine is the door."""
    from sparkctl.launch.endpoints import engine_api_key, front_url

    g, url = ctx.inventory.gateway, front_url(ctx.inventory)
    if g.enabled and g.api_keys_file and f is not None and f.gateway_keys == "missing":
        return fail(
            f"gateway.api_keys_file {g.api_keys_file} is not a readable file on {host}: `sparkctl up` refuses to start "
            "the gateway without it",
            f"write the clients' keys there, one a line, root-only (chmod 0600 {g.api_keys_file}), then `sparkctl up`",
        )
    if g.enabled and g.api_keys_file:
        return ok(f"{url}: clients send one of the keys in {g.api_keys_file} (gateway.api_keys_file)")
    if engine_api_key(ctx.inventory):
        door = "the gateway asks for" if g.enabled else "the engine asks for"
        return ok(f"{url}: {door} the engine's key (runtime.env VLLM_API_KEY)")
    return warn(
        f"{url} asks for no key: whoever reaches port {ctx.inventory.runtime.port} on {host} can use the cluster"
        + ("" if g.enabled else ", the engine's every route included"),
        "put the clients' keys in a root-only file on the head and name it in gateway.api_keys_file, then "
        "`sparkctl up` (it restarts the gateway only); or keep the port closed at your firewall",
    )
