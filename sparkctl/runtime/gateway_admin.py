"""sparkctl's side of the gateway's admin interface (docs/gateway.md "Holds"): hold, release and
status over the cluster session's SSH to the head, as
`docker exec sparkctl-gateway python3 -m sparkctl.gateway.ctl ...` (sparkctl/gateway/ctl.py: one
JSON document on stdout), every call with a deadline. The socket is 0600 root in a 0700
directory on the head: nobody on the network reaches it.

And what a change tells the gateway, decided with the stop step's plan (so `--check` shows it):
- hold just before the head gets SIGTERM, with the engine's expected start (start_forecast:
  warm or cold, this cluster's history) and a ttl that outlives the run (a sparkctl that dies
  mid-change leaves a hold that ends by itself);
- an expected start beyond `gateway.hold_s`: the gateway answers new requests 503 with
  Retry-After at once (the plan says so);
- release when the new engine serves (health 200, a smoke completion, one streamed token);
- a rollback holds again without a release between (the gateway keeps the hold's start);
- a run that fails and leaves no rollback to come releases (`release_after_failure`, the stop
  step's compensating action, which runner.compensate runs for `up`, `down` and reload): the
  gateway then does what it does for a crash outside a change (holds on connection refused up to
  hold_s, then 503, and passes again the moment the engine answers /health), rather than keep
  an admin hold that would outlast a hand-started engine by up to the ttl;
- `down` holds too, with no return to expect: new requests get 503 at once while the engine
  drains (vLLM 0.33 would answer them 200 and empty, `abort`), until the gateway, stopped
  last, goes.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Optional

from sparkctl.errors import HostError
from sparkctl.launch.gateway import CONTAINER

if TYPE_CHECKING:
    from sparkctl.steps.base import RunContext
    from sparkctl.transport.ssh import HostSession

ADMIN_TIMEOUT = 20.0  # docker exec, a python start in the container and one unix-socket request
CTL = ("docker", "exec", CONTAINER, "python3", "-m", "sparkctl.gateway.ctl")
TTL_MARGIN_S = 120.0  # a hold outlives the run's own bounds (drain + start deadline) by this
# docker's answers when there is no running container to exec in (moby daemon/exec.go, errdefs)
_ABSENT = ("No such container", "is not running", "is restarting", "is paused")


class GatewayAbsent(HostError):
    """No gateway container runs on the head: there is nothing to hold or release."""


class GatewayAdminError(HostError):
    """The gateway's container runs but its admin interface did not answer as it should."""


class GatewayAdmin:
    """The admin interface of the gateway on `session`'s host. `command` runs gateway/ctl.py
    there (in the container by default; a test gives the same module run another way)."""

    def __init__(self, session: HostSession, command: tuple[str, ...] = CTL, timeout: float = ADMIN_TIMEOUT):
        self.session, self.command, self.timeout = session, command, timeout

    def hold(self, expected_s: Optional[float], ttl_s: Optional[float], reason: str) -> dict:
        args = ["hold", "--reason", reason]
        if expected_s is not None:
            args += ["--expected-s", f"{expected_s:g}"]
        if ttl_s is not None:
            args += ["--ttl-s", f"{ttl_s:g}"]
        return self._call(*args)

    def release(self) -> dict:
        return self._call("release")

    def status(self) -> dict:
        return self._call("status")

    def _call(self, *args: str) -> dict:
        r = self.session.run([*self.command, *args], timeout=self.timeout)
        said = (r.stderr.strip() or r.stdout.strip())[:400]
        if not r.ok:
            if any(s in r.stderr for s in _ABSENT):
                raise GatewayAbsent(f"{self.session.name}: no {CONTAINER} running ({said})")
            raise GatewayAdminError(
                f"{self.session.name}: the gateway's admin interface failed ({args[0]}, exit {r.exit_code}): {said}",
                fix=f"read `docker logs {CONTAINER}` on the head; `sparkctl doctor` checks the gateway",
            )
        try:
            doc = json.loads(r.stdout)
        except ValueError:
            doc = None
        if not isinstance(doc, dict):
            raise GatewayAdminError(f"{self.session.name}: the gateway's {args[0]} answered no JSON object: {said}")
        return doc


# --- what a change tells the gateway -----------------------------------------------------------


@dataclass(frozen=True)
class Hold:
    """The hold a stop plans (a Change's data, so the plan carries it as it will be sent)."""

    reason: str  # up | reload | restart | rollback | down
    expected_s: Optional[float]  # the engine's expected start; None: no history (held up to hold_s)
    cache: Optional[str]  # warm | cold (None for down)
    hold_s: float
    ttl_s: float

    @property
    def rejects(self) -> bool:
        """The expected start is beyond hold_s: new requests get 503 + Retry-After at once."""
        return self.reason == "down" or (self.expected_s is not None and self.expected_s > self.hold_s)

    def clients(self) -> str:
        """What a client sees while it lasts, in the words the plan shows."""
        if self.reason == "down":
            return (
                "clients get 503 with Retry-After at once while the engine drains (down: no return to expect), "
                "then connection refused once the gateway stops"
            )
        if self.rejects:
            return (
                f"clients get 503 with Retry-After ~{self.expected_s:.0f} s during this restart "
                f"(the {self.cache} start, ~{self.expected_s:.0f} s, is beyond gateway.hold_s {self.hold_s:g} s)"
            )
        exp = (
            f"{self.cache} start expected ~{self.expected_s:.0f} s"
            if self.expected_s is not None
            else "no start time in this cluster's history yet"
        )
        return f"requests are held up to {self.hold_s:g} s (gateway.hold_s; {exp}) and sent on in arrival order when the new engine serves"

    def summary(self) -> str:
        return f"hold the gateway before the engine stops: {self.clients()}"

    def to_data(self) -> dict:
        return asdict(self)


def planned_hold(ctx: RunContext, host: str, stopping: list[str], down: bool, deadline: float) -> Optional[Hold]:
    """The hold the stop step plans on `host` when it stops the engine's head there and a gateway
    runs on it (an inventory with the gateway off, or a cluster whose gateway is not started yet,
    has nothing to hold). The expected start is the one reload's plan shows (start_forecast), from
    the same facts; the ttl covers the drain and the start's `deadline` (the gateway caps it at
    hold_max_s). `down` expects no return: its expected duration is beyond hold_s on purpose."""
    from sparkctl.runtime.start_forecast import of_head

    inv, f = ctx.inventory, ctx.facts[host]
    listed = f.containers or []
    heads = {c.name for c in listed if c.role == "head"}
    if not inv.gateway.enabled or not heads & set(stopping):
        return None
    if not any(c.name == CONTAINER and c.running for c in listed):
        return None
    g = inv.gateway
    drain = float(inv.runtime.shutdown_timeout if ctx.options.drain is None else ctx.options.drain)
    if down:
        ttl = min(drain + TTL_MARGIN_S, g.hold_max_s)
        return Hold("down", g.hold_s + ttl, None, g.hold_s, ttl)
    start = of_head(inv, f)
    ttl = min(drain + deadline + TTL_MARGIN_S, g.hold_max_s)
    return Hold(ctx.options.event, start.seconds, start.cache, g.hold_s, ttl)


@dataclass
class HeldGateway:
    """The hold this run sent (RunContext.outputs): on which host, and whether it was released since."""

    host: str
    released: bool = False


def hold(ctx: RunContext, host: str, data: dict) -> str:
    """Send the planned hold (just before the engine's head gets SIGTERM). A gateway that does not
    take it does not stop the change: it still holds on its own once the engine refuses
    connections; only requests sent during the drain may come back empty (vLLM's `abort`)."""
    h = Hold(**data)
    try:
        doc = GatewayAdmin(ctx.session(host)).hold(h.expected_s, h.ttl_s, h.reason)
    except GatewayAbsent:
        return "no gateway runs to hold: clients are refused until the new engine serves"
    except HostError as exc:
        return (
            f"the gateway did NOT take the hold ({exc.message}); it holds by itself once the engine refuses "
            "connections, but requests sent during the drain may end empty"
        )
    ctx.outputs.gateway_hold = HeldGateway(host)
    state = doc.get("state", "?")
    return f"gateway {state}: {h.clients()}"


def release_after_failure(ctx: RunContext) -> Optional[str]:
    """A run that held the gateway and failed with nothing left to release it (no rollback to come,
    or the rollback failed): release, so the gateway treats the engine as a crash outside a change."""
    held = ctx.outputs.gateway_hold
    if held is None or held.released:
        return None
    return release(ctx, held.host)


def release(ctx: RunContext, host: str) -> Optional[str]:
    """Release the gateway on `host`. Idempotent: a gateway that holds nothing answers `released: 0`;
    a hold left by an earlier run (killed mid-change) goes too. Says nothing when this run held
    nothing and nothing was waiting (every start of the engine asks)."""
    ours = ctx.outputs.gateway_hold
    try:
        doc = GatewayAdmin(ctx.session(host)).release()
    except GatewayAbsent:
        return "no gateway runs to release" if ours else None
    except HostError as exc:  # the engine serves: a hold left behind ends by itself at its ttl
        return f"the gateway was NOT released ({exc.message}); its hold ends by itself at its ttl"
    if ours is not None:
        ours.released = True
    n = doc.get("released", 0)
    return f"gateway released {n} held request(s)" if ours or n else None


def gateway_hold(plans) -> Optional[dict]:
    """The hold a run's plans (e.g. a --check run's) send: the stop step's `hold` operation."""
    for p in plans:
        if p.step == "stop":
            for c in p.changes:
                if c.action == "hold":
                    return dict(c.data)
    return None
