"""Runtime steps: `stop` the old runtime (head first, so it drains) and start the new one
(`runtime`: drafter, worker, head, in the order the engine needs), then wait until it serves.

A runtime whose containers all run the inventory's config hash and the image each node now holds
under the tag is left running (that is the no-op). Otherwise the whole runtime restarts, because
vLLM has no partial restart. Nothing is stopped until everything needed to start again is in
place: `stop` first proves every runtime host answers and holds its image. A runtime that is
still loading (no fatal sign in its log) is waited for, never restarted: a Spark's cold boot
takes 10-15 minutes. The head is watched through its log phases until /health answers, and a
real completion request is the smoke test.
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Optional, TypedDict

from sparkctl import httpclient
from sparkctl.errors import HostError, SparkctlError
from sparkctl.facts import docker
from sparkctl.facts.logs import fatal_line, phase_of
from sparkctl.inventory.models import Inventory
from sparkctl.launch.plan import render, restart_group
from sparkctl.records import RuntimeStart, StopRecord
from sparkctl.runtime import containers, health
from sparkctl.steps.base import Change, Plan, RunContext, Step
from sparkctl.transport.image_identity import short

DEFAULT_TIMEOUT = 1800.0  # a real cold boot takes 10-15 min (seed 002)
BARRIER_TIMEOUT = 10.0  # every runtime host must answer within this before anything is stopped
ROLE_ORDER = {"drafter": 0, "worker": 1, "head": 2}  # start order; stop is the reverse
PEER_LOOK_S = 1.0  # while the head starts, how often its peers' containers are read (a dead worker ends the wait)
HEALTH_POLL_S = 0.1  # ... how often its /health is asked (one local HTTP request: serving is seen within this)
HEAD_LOOK_S = 0.5  # ... and its own container and log read (over SSH: its phase, or the fatal line it died of)
ALL_GROUPS = frozenset({"engine", "drafter"})


@dataclass(frozen=True)
class Drift:
    """Why which restart group must restart (engine: head + workers; drafter), or that the
    runtime is loading and must be waited for."""

    reasons: dict[str, tuple[str, ...]] = field(default_factory=dict)  # restart group -> why
    loading: Optional[str] = None  # "head still loading for 42 s (no fatal sign in its log)"
    blocked: Optional[str] = None  # the containers could not be read on some host

    @property
    def groups(self) -> set[str]:
        return {g for g, why in self.reasons.items() if why}

    @property
    def why(self) -> str:
        return "; ".join(r for rs in self.reasons.values() for r in rs)


def runtime_hosts(inv: Inventory) -> list[str]:
    """Hosts running runtime containers, in start order (drafter, worker, head)."""
    specs = sorted(render(inv).containers, key=lambda c: ROLE_ORDER.get(c.role, 1))
    return list(dict.fromkeys(c.host for c in specs))


def _not_running(ctx: RunContext, host: str, listed) -> Optional[str]:
    """The first of this launch's containers on `host` that is not running, with its state
    (`sparkctl-drafter exited (code 1)`); None while all run or the list could not be read."""
    if listed is None:
        return None
    for spec in ctx.launch.for_host(host):
        c = next((c for c in listed if c.name == spec.name), None)
        if c is None:
            return f"{spec.name} on {host} is gone"
        if not c.running:
            return f"{spec.name} on {host} {c.status} (code {c.exit_code}{', ' + c.error if c.error else ''})"
    return None


def _containers_now(ctx: RunContext, host: str):
    """The cluster's containers on `host` now, for a start-up wait's looks: through the host's
    Docker SDK connection (opened once per run), not an SSH command with two docker CLI runs per
    look (a restart's looks were most of its docker CLI runs)."""
    session = ctx.session(host)
    try:
        return docker.read_containers(session.docker(), ctx.inventory.cluster.name)
    except SparkctlError:
        raise
    except Exception as exc:  # the SSH connection broke under the request: the host named, sparkctl's words
        raise session.explain(exc) from None


def current_image(ctx: RunContext, host: str, image: str) -> Optional[str]:
    """The image (identity, facts/docker.py) `host` holds under `image` once the images step is done
    (its declared output: verified, or predicted in --check), else as gathered."""
    out = ctx.outputs.image_ids.get(host, {}).get(image)
    if out:
        return out
    fact = ctx.facts[host].images.get(image)
    return fact.key if fact else None


def drift(ctx: RunContext) -> Drift:
    """Decided once per run (stop and runtime both plan from it)."""
    if ctx.outputs.restart is None:
        ctx.outputs.restart = _drift(ctx)
    return ctx.outputs.restart


def restarting(ctx: RunContext) -> tuple[set[str], str]:
    """The restart groups this run restarts, and why."""
    d = drift(ctx)
    return (set(ALL_GROUPS), "--force") if ctx.force else (d.groups, d.why)


def start_container(ctx: RunContext, host: str, spec, client=None) -> str:
    """Start one spec of the launch on `host` from the image the node now holds; docker's errors
    (APIError, ImageNotFound) in sparkctl's words, with the fix. Shared by the runtime and gateway steps."""
    try:
        containers.start(client or ctx.session(host).docker(), spec, current_image(ctx, host, spec.image))
    except Exception as exc:
        err = ctx.session(host).explain(exc)
        raise HostError(f"{host}: cannot start {spec.name}: {err.message}", fix=err.fix) from None
    return f"started {spec.name}"


def replace_container(ctx: RunContext, host: str, spec, client) -> str:
    """Replace the running container of `spec` (containers.replace: the new one created first, started
    the moment the old one stops), its stop timed and recorded as the stop step's are."""
    timings: dict[str, dict] = {}
    try:
        containers.replace(client, spec, current_image(ctx, host, spec.image), timeout=ctx.options.drain, timings=timings)
    except Exception as exc:
        err = ctx.session(host).explain(exc)
        raise HostError(f"{host}: cannot replace {spec.name}: {err.message}", fix=err.fix) from None
    ctx.outputs.stops += [StopRecord(host=host, container=n, **t) for n, t in timings.items()]
    return "; ".join([*(containers.stop_line(n, t) for n, t in timings.items()), f"started the new {spec.name}"])


def replaced(ctx: RunContext, host: str, groups: set[str]) -> set[str]:
    """The containers on `host` a restart of `groups` replaces rather than stops then starts: the
    drafter while the engine serves on (its head checks the drafter, and an outage longer than the
    overlay rides out stops it: the shorter the better). Only a running one: there is nothing to keep."""
    if "drafter" not in groups or "engine" in groups:
        return set()
    running = {c.name for c in ctx.facts[host].containers or [] if c.running}
    return {s.name for s in ctx.launch.for_host(host) if s.role == "drafter" and s.name in running}


def drain_words(ctx: RunContext) -> str:
    """How long a stop drains, as a plan says it: the run's --drain, else each container's own."""
    drain = ctx.options.drain
    return f"drain up to {drain} s" if drain is not None else "drain up to each container's stop timeout"


def planned_starts(plans) -> set[str]:
    """The containers the runtime step's plans start (of a run's plans, e.g. a --check run's):
    what a run restarts, read from the one place that decides it."""
    starts = ("start", "replace")
    return {c.data["name"] for p in plans if p.step == RuntimeStep.name for c in p.changes if c.action in starts}


def _drift(ctx: RunContext) -> Drift:
    launch = ctx.launch
    reasons: defaultdict[str, list[str]] = defaultdict(list)
    head_container = None
    for host in dict.fromkeys(c.host for c in launch.containers):
        f = ctx.facts.get(host)
        if f is None:
            continue  # unreachable: the runner fails the host
        if f.containers is None:
            return Drift(blocked=f"cannot list containers on {host}: {f.errors.get('containers', 'no answer')}")
        wanted = {s.name for s in launch.for_host(host)}
        for c in f.containers:
            # a role the inventory no longer has goes with the engine; the gateway step owns the gateway
            if c.name not in wanted and restart_group(c.role) != "gateway":
                reasons["engine"].append(f"{c.name} on {host} is not in the inventory")
        for spec in launch.for_host(host):
            group = restart_group(spec.role)
            running = next((c for c in f.containers if c.name == spec.name), None)
            current = current_image(ctx, host, spec.image)
            if running is None:
                why = f"{spec.name} not on {host}"
            elif not running.running:
                why = f"{spec.name} on {host} is {running.status}"
            elif running.config_hash != launch.expected_hash(spec.name):
                why = f"{spec.name} on {host} runs config {running.config_hash[:12] or '(none)'}"
            elif (
                current
                and running.labels.get(containers.IMAGE_LABEL) != current
                and not docker.runs_image(running, f.images.get(spec.image), current)
            ):
                why = (
                    f"{spec.name} on {host} runs image {short(running.image_id)}, the node now has "
                    f"{short(current)} under {spec.image}"
                )
            else:
                why = None
            if why:
                reasons[group].append(why)
            if spec.role == "head":
                head_container = running
    loading = None
    head = ctx.inventory.hosts_with_role("head")[0]
    hf = ctx.facts.get(head)
    if "engine" not in reasons and hf is not None and " 200" not in (hf.health or ""):
        # not serving: a loading runtime is waited for; a dead one restarts
        if head_container is not None and head_container.id not in hf.logs:  # read only in this rare case
            hf = ctx.refresh(head, {"logs"})
        logs = hf.logs.get(head_container.id) if head_container else None
        fatal = logs.fatal if logs else []
        status = hf.health or "no answer"
        if fatal:
            reasons["engine"].append(f"head does not answer /health ({status}); its log shows: {fatal[0][:160]}")
        elif logs is not None and logs.ready:
            reasons["engine"].append(f"head does not answer /health ({status}) although its log says it started serving")
        else:
            since = head_container.running_for() if head_container else None
            phase = f", {logs.phase}" if logs is not None and logs.phase else ""
            loading = f"head still loading{phase}{f' for {since:.0f} s' if since is not None else ''} (no fatal sign in its log)"
    return Drift({g: tuple(r) for g, r in reasons.items()}, loading)


_DRAINING = re.compile(r"\[shutdown\] EngineCore: (draining|aborting) in-flight requests count=(\d+)")
_DRAINED = "[shutdown] EngineCore: request processing complete"


class DrainWatch:
    """The head's in-flight requests across its drain, from vLLM's /metrics, which the API server
    keeps answering until the engine has drained (entrypoints/launchers/launcher.py): requests
    running + waiting at SIGTERM, and `vllm:request_success_total` by `finished_reason` until the
    last answer. Those not finished as stop/length were cut (aborted at the shutdown timeout)."""

    def __init__(self, url: str, every: float = 0.2):
        import threading

        self.url, self.every = f"{url}/metrics", every
        self.last = None
        self._stop = threading.Event()
        # one client for every scrape (first here, then only the watch's thread): a client per scrape
        # made a TLS context per scrape, ~30 ms of CPU at 5 Hz
        self._http = httpclient.client(timeout=1, trust_env=False)
        self.first = self._scrape()
        self._t = threading.Thread(target=self._run, name="sparkctl-drain-watch", daemon=True)
        self._t.start()

    def _scrape(self):
        import httpx

        from sparkctl.facts.metrics import parse_page

        try:
            return parse_page(self._http.get(self.url).text)
        except (httpx.HTTPError, ValueError):
            return None

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            page = self._scrape()
            if page is not None:
                self.last = page

    def counts(self, log: str) -> DrainCounts:
        self._stop.set()
        self._t.join(5)
        if not self._t.is_alive():
            self._http.close()
        told, logged = drain_from_log(log)
        return told or drain_counts(self.first, self.last, logged)


class DrainCounts(TypedDict):
    """The head's requests at a drain (reload's report and `--json`): in flight at SIGTERM, of them
    finished and cut."""

    in_flight: int
    finished: int
    cut: int


def drain_from_log(log: str) -> tuple[Optional[DrainCounts], Optional[int]]:
    """What vLLM's own shutdown lines say: the counts when they settle it (all aborted with
    --shutdown-timeout 0; all drained when the engine logged `request processing complete`), and
    the in-flight count it logged (None if it logged none: nothing was in flight, or no drain)."""
    found = list(_DRAINING.finditer(log))
    if not found:
        return None, None
    mode, n = found[-1].group(1), int(found[-1].group(2))
    if mode == "aborting":
        return {"in_flight": n, "finished": 0, "cut": n}, n
    if _DRAINED in log[found[-1].end() :]:
        return {"in_flight": n, "finished": n, "cut": 0}, n
    return None, n


def drain_counts(first, last, logged_in_flight: Optional[int]) -> DrainCounts:
    """When vLLM's log cannot say (its process was killed at the timeout): in flight = running +
    waiting at SIGTERM (or vLLM's `draining in-flight requests count=%d`); finished = stop/length
    completions the API server reported until its last answer; cut = the rest."""

    def done(page) -> float:
        if page is None:
            return 0.0
        return sum(page.total("vllm:request_success_total", finished_reason=r) or 0.0 for r in ("stop", "length"))

    in_flight = logged_in_flight
    if in_flight is None and first is not None:
        in_flight = int((first.total("vllm:num_requests_running") or 0) + (first.total("vllm:num_requests_waiting") or 0))
    in_flight = in_flight or 0
    finished = min(int(done(last or first) - done(first)), in_flight)
    return {"in_flight": in_flight, "finished": finished, "cut": in_flight - finished}


class StopStep(Step):
    """Stop the old runtime: every container of this cluster, head first (it drains in-flight
    requests), then worker, then drafter. In `up` only when the runtime must restart; in `down`
    (playbook option `always`) whatever runs."""

    name = "stop"
    # journal: an interrupted reload is reported by every run that touches the runtime; applied,
    # events and cache: the engine's expected start, which the gateway's hold is told
    facts = frozenset({"containers", "health", "image", "journal", "applied", "events", "cache"})

    def hosts(self, inv: Inventory) -> list[str]:
        order = runtime_hosts(inv)[::-1]  # head, worker, drafter
        return order + [h for h in inv.hosts if h not in order]

    def compensate(self, ctx: RunContext) -> Optional[str]:
        """No engine will serve at the end of this command: a hold this step sent is released (once),
        so the gateway treats the engine as crashed (held up to hold_s on connection refused, then
        503; passing again the moment /health answers) instead of holding on to its ttl."""
        from sparkctl.runtime.gateway_admin import release_after_failure

        return release_after_failure(ctx)

    def plan(self, ctx: RunContext) -> dict[str, Plan]:
        inv = ctx.inventory
        always = self.options.always
        hosts = [h for h in self.hosts(inv) if h in ctx.facts]
        groups, why = set(ALL_GROUPS), "sparkctl down"
        if not always:
            d = drift(ctx)
            if d.blocked:
                return {h: self.blocked(h, d.blocked) for h in hosts[:1]}
            groups, why = restarting(ctx)
            changed = _unconfirmed(ctx, groups)
            if changed:
                return {h: self.blocked(h, changed) for h in hosts[:1]}
            if not groups:
                why = d.loading or "the runtime runs the inventory's config"
                return {h: self.noop(h, f"nothing to stop: {why}") for h in hosts}
        plans, first = {}, True
        for h in hosts:
            f = ctx.facts[h]
            if f.containers is None:
                plans[h] = self.blocked(h, f"cannot list containers: {f.errors.get('containers', 'no answer')}")
                continue
            changes = []
            if first and not always:
                changes.append(Change("barrier", "check every runtime host answers and holds its image before stopping anything"))
            first = False
            kept = replaced(ctx, h, groups)  # the runtime step replaces these: they serve until then
            names = [c.name for c in f.containers if restart_group(c.role) in groups and c.name not in kept]
            if names:
                changes += gateway_hold_changes(ctx, h, names, always)
                changes.append(Change("stop", f"stop {', '.join(names)} ({drain_words(ctx)})", {"names": names}))
            what = "restart " + (" and ".join(sorted(groups)) if groups != ALL_GROUPS else "runtime")
            if changes:
                plans[h] = self.changes(h, changes, reason=f"{what}: {why}")
            elif kept:
                plans[h] = self.noop(h, f"{', '.join(sorted(kept))} serves until the runtime step replaces it")
            else:
                plans[h] = self.noop(h, "nothing to stop here")
        return plans

    def apply(self, ctx: RunContext, plan: Plan) -> str:
        done = []
        for c in plan.changes:
            if c.action == "barrier":
                done.append(self._barrier(ctx))
            elif c.action == "hold":
                from sparkctl.runtime import gateway_admin

                done.append(gateway_admin.hold(ctx, plan.host, c.data))
            elif c.action == "stop":
                ctx.progress(plan.host, self.name, f"stopping {', '.join(c.data['names'])} (drain)")
                client = ctx.session(plan.host).docker()
                watch = DrainWatch(health.base_url(ctx.inventory)) if "sparkctl-head" in c.data["names"] else None
                logs: dict[str, str] = {}
                timings: dict[str, dict] = {}
                stopped = containers.stop(
                    client,
                    ctx.inventory.cluster.name,
                    timeout=ctx.options.drain,
                    names=c.data["names"],
                    logs=logs,
                    timings=timings,
                )
                # how long each stop took, and whether docker had to kill it: a stop that hangs is seen
                ctx.outputs.stops += [StopRecord(host=plan.host, container=n, **t) for n, t in timings.items()]
                done.append(
                    "; ".join(containers.stop_line(n, t) for n, t in timings.items())
                    or (f"stopped {', '.join(stopped)}" if stopped else "nothing left to stop")
                )
                if watch is not None:
                    ctx.outputs.drain = watch.counts(logs.get("sparkctl-head", ""))
                    d = ctx.outputs.drain
                    done.append(f"{d['in_flight']} request(s) in flight at the drain: {d['finished']} finished, {d['cut']} cut")
        return "; ".join(done)

    def _barrier(self, ctx: RunContext) -> str:
        """Nothing is stopped unless every runtime host answers now and holds the image it will start."""
        hosts = runtime_hosts(ctx.inventory)
        answers = ctx.sessions.map(
            lambda s: s.run("true", timeout=BARRIER_TIMEOUT).check("liveness"), hosts=hosts, timeout=BARRIER_TIMEOUT + 5
        )
        silent = [h for h, o in answers.items() if not o.ok]
        if silent:
            raise HostError(
                f"not stopping anything: {', '.join(silent)} did not answer within {BARRIER_TIMEOUT:.0f} s "
                f"({answers[silent[0]].error})",
                fix="the old runtime keeps serving; restore the host's link (`sparkctl doctor --only ssh`), then rerun `sparkctl up`",
            )
        missing = [f"{s.image} on {s.host}" for s in ctx.launch.containers if not current_image(ctx, s.host, s.image)]
        if missing:
            raise HostError(
                f"not stopping anything: image missing ({', '.join(missing)})",
                fix="rerun `sparkctl up` (the images step places it)",
            )
        return f"all {len(hosts)} runtime host(s) answer and hold their image"


def gateway_hold_changes(ctx: RunContext, host: str, stopping: list[str], down: bool) -> list[Change]:
    """The gateway's hold, planned with the stop of the engine's head (runtime/gateway_admin.py)."""
    from sparkctl.runtime.gateway_admin import planned_hold

    h = planned_hold(ctx, host, stopping, down, float(ctx.options.timeout or DEFAULT_TIMEOUT))
    return [Change("hold", h.summary(), h.to_data())] if h else []


def _unconfirmed(ctx: RunContext, groups: set[str]) -> Optional[str]:
    """A reload restarts only the containers its plan named (option `confirmed_restart`, from its
    --check pass): if the cluster changed since, so that this run would restart others, it stops
    here, before anything is stopped, and says so."""
    confirmed = ctx.options.confirmed_restart
    if confirmed is None:
        return None
    now = [c.name for c in ctx.launch.containers if restart_group(c.role) in groups]
    if sorted(now) == sorted(confirmed):
        return None
    return (
        f"the cluster changed since the plan was made: the plan restarts {', '.join(confirmed) or 'nothing'}, "
        f"this run would restart {', '.join(now) or 'nothing'}; nothing was stopped: rerun to see the new plan"
    )


class RuntimeStep(Step):
    name = "runtime"
    facts = frozenset({"containers", "health", "image", "gateway_hold", "lock"})

    def hosts(self, inv: Inventory) -> list[str]:
        return runtime_hosts(inv)

    def plan(self, ctx: RunContext) -> dict[str, Plan]:
        launch = ctx.launch
        d = drift(ctx)
        hosts = [h for h in self.hosts(ctx.inventory) if h in ctx.facts]
        if d.blocked:
            return {h: self.blocked(h, d.blocked) for h in hosts[:1]}
        groups, why = restarting(ctx)
        plans = {}
        for h in hosts:
            specs = launch.for_host(h)
            starting = [s for s in specs if restart_group(s.role) in groups]
            kept = replaced(ctx, h, groups)
            ops = [
                Change(
                    "replace",
                    f"replace {s.name} with config {launch.expected_hash(s.name)}: the new container created "
                    f"first, started the moment the old one stops ({drain_words(ctx)})",
                    {"name": s.name},
                )
                if s.name in kept
                else Change("start", f"start {s.name} with config {launch.expected_hash(s.name)}", {"name": s.name})
                for s in starting
            ]
            if any(s.role == "head" for s in starting):
                ops.append(Change("wait-serving", "wait until /health answers, then one smoke completion"))
            elif any(s.role == "drafter" for s in starting):
                ops.append(Change("wait-drafter", "wait until the drafter answers /health"))
            elif d.loading and any(s.role == "head" for s in specs):
                ops.append(Change("wait-serving", f"wait for the loading runtime, not restarting it: {d.loading}"))
            if "drafter" in groups and "engine" not in groups and any(s.role == "head" for s in specs):
                # the engine was left running through the drafter's outage: an overlay that did not
                # ride it out (docs/inventory.md) has stopped it, and a reload must not call that done
                ops.append(Change("check-head", "check the engine still serves once the new drafter answers: one streamed token"))
            left = _hold_left_behind(ctx, h) if not any(c.action == "wait-serving" for c in ops) else None
            if left:  # (a head that starts releases the gateway once it serves)
                ops.append(Change("release", left))
            if ops:
                reason = f"restart {' and '.join(sorted(groups))}: {why}" if starting else (left or "")
                plans[h] = self.changes(h, ops, reason=reason)
            else:
                plans[h] = self.noop(h, ", ".join(f"{s.name} running config {launch.expected_hash(s.name)}" for s in specs))
        return plans

    def apply(self, ctx: RunContext, plan: Plan) -> str:
        client = ctx.session(plan.host).docker()
        done = []
        for c in plan.changes:
            if c.action in ("start", "replace"):
                spec = next(s for s in ctx.launch.for_host(plan.host) if s.name == c.data["name"])
                if c.action == "replace":
                    ctx.progress(plan.host, self.name, f"replacing {spec.name} (the new one starts once the old one stops)")
                    done.append(replace_container(ctx, plan.host, spec, client))
                else:
                    ctx.progress(plan.host, self.name, f"starting {spec.name}")
                    done.append(start_container(ctx, plan.host, spec, client))
            elif c.action == "wait-serving":
                head = next(s for s in ctx.launch.for_host(plan.host) if s.role == "head")
                done.append(self._wait_serving(ctx, plan.host, head.name))
            elif c.action == "wait-drafter":
                done.append(self._wait_drafter(ctx, plan.host))
            elif c.action == "check-head":
                head = next(s for s in ctx.launch.for_host(plan.host) if s.role == "head")
                done.append(self._check_head(ctx, plan.host, head.name))
            elif c.action == "release":
                done.append(release_gateway(ctx, plan.host) or "gateway released (no request was held)")
        return "; ".join(done)

    def _wait_drafter(self, ctx: RunContext, host: str) -> str:
        """The drafter's /health, asked on its own host (it binds its fabric address); at each look
        its container is read too, so a drafter that exits at start-up ends the wait at once."""
        t0 = time.monotonic()
        deadline = t0 + float(ctx.options.timeout or DEFAULT_TIMEOUT)
        while True:
            f = ctx.refresh(host, {"drafter_health"})
            if f.drafter_health == 200:
                return f"drafter answers /health after {time.monotonic() - t0:.1f} s"
            dead = _not_running(ctx, host, _containers_now(ctx, host))
            if dead:
                raise HostError(
                    f"{host}: the drafter died while starting: {dead}",
                    fix="read `docker logs sparkctl-drafter` on the offload host",
                )
            if time.monotonic() > deadline:
                raise HostError(
                    f"{host}: the drafter did not answer /health within {deadline - t0:.0f} s (last: {f.drafter_health})",
                    fix="read `docker logs sparkctl-drafter` on the offload host",
                )
            ctx.progress(host, self.name, f"waiting for the drafter ({time.monotonic() - t0:.0f} s)")
            time.sleep(0.25)

    def _check_head(self, ctx: RunContext, host: str, name: str) -> str:
        """After a drafter-only restart (the drafter answers again): the engine that stayed up still
        serves a streamed token; else the head's own fatal line says why it stopped."""
        import docker
        import httpx

        inv = ctx.inventory
        url = health.base_url(inv)
        with httpclient.client() as http:
            status = health.health(http, url)
            if status == 200:
                try:
                    health.first_token(http, url, inv.runtime.served_model_name)
                    return "the engine still serves with the new drafter (a streamed token)"
                except (httpx.HTTPError, ValueError) as exc:
                    why = f"a streamed completion failed: {exc}"
            else:
                why = f"its /health answers {status}" if status else "its /health does not answer"
        try:
            fatal = fatal_line(ctx.session(host).docker().containers.get(name).logs(tail=400).decode(errors="replace"))
        except docker.errors.NotFound:
            fatal = f"{name} is gone"
        raise HostError(
            f"{host}: the engine stopped serving while the drafter restarted ({why})" + (f": {fatal}" if fatal else ""),
            fix="the engine's overlay must ride out a drafter restart (docs/inventory.md); `sparkctl restart` "
            "starts the engine and the drafter again",
        )

    def _dead_peer(self, ctx: RunContext, head: str) -> Optional[str]:
        """A runtime container on another host (worker, drafter) that stopped running while the head
        starts: the head would wait for a worker that is gone until the deadline."""
        for h in runtime_hosts(ctx.inventory):
            if h != head:
                dead = _not_running(ctx, h, _containers_now(ctx, h))
                if dead:
                    return dead
        return None

    def _wait_serving(self, ctx: RunContext, host: str, name: str) -> str:
        import docker
        import httpx

        inv = ctx.inventory
        url = health.base_url(inv)
        deadline = time.monotonic() + float(ctx.options.timeout or DEFAULT_TIMEOUT)
        client = ctx.session(host).docker()
        t0 = time.monotonic()
        next_peer_look = t0
        with httpclient.client() as http:

            def look() -> tuple[str, str]:
                """The head's phase and log; a HostError when it died (its container stopped, or a fatal line)."""
                try:
                    c = client.containers.get(name)
                    log = c.logs(tail=400).decode(errors="replace")
                except docker.errors.NotFound:
                    raise HostError(f"{host}: {name} disappeared while starting") from None
                fatal = fatal_line(log)
                if c.status != "running" or fatal:
                    raise HostError(
                        f"{host}: runtime died while {phase_of(log)}: {fatal or 'container ' + c.status}",
                        fix=f"read `docker logs {name}` on the head and run `sparkctl doctor`",
                    )
                return phase_of(log), log

            next_head_look = t0
            while True:
                if time.monotonic() >= next_head_look:
                    next_head_look = time.monotonic() + HEAD_LOOK_S
                    phase, log = look()
                if health.health(http, url) == 200:
                    break
                # the peers' containers (through their SDK connections) once a second, not at every
                # look: a worker that died is still named within a second
                dead = None
                if time.monotonic() >= next_peer_look:
                    next_peer_look = time.monotonic() + PEER_LOOK_S
                    dead = self._dead_peer(ctx, host)
                if dead:
                    # the head again first: a head that died (a flag vLLM refuses) takes its Ray head
                    # with it, and then the worker's `ray start --block`; the cause is the head's
                    # (ci27: beside stress the worker's exit was seen first)
                    phase, log = look()
                    raise HostError(
                        f"{host}: runtime cannot start while {phase}: {dead}",
                        fix="read `docker logs` of that container on its host and run `sparkctl doctor`",
                    )
                if time.monotonic() > deadline:
                    raise HostError(f"{host}: runtime not serving after {deadline - t0:.0f} s (last phase: {phase})")
                ctx.progress(host, self.name, f"{phase} ({time.monotonic() - t0:.0f} s)")
                time.sleep(HEALTH_POLL_S)
            took = time.monotonic() - t0
            phase, log = look()  # the whole start's log (the last look may predate its cache lines)
            ctx.progress(host, self.name, "smoke test: one completion, one streamed token")
            # what a held client waits for is a stream that starts: one real streamed token beside the
            # smoke completion (at once: requests held at the gateway wait for both), then release
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max_workers=1, thread_name_prefix="sparkctl-first-token") as pool:
                streamed = pool.submit(health.first_token, http, url, inv.runtime.served_model_name)
                try:
                    health.smoke(http, url, inv.runtime.served_model_name)
                except (httpx.HTTPError, KeyError, IndexError, ValueError) as exc:
                    raise HostError(f"{host}: serving, but the smoke completion failed: {exc}") from None
                from sparkctl import waits

                waits.futures([streamed])
                try:
                    streamed.result()
                except (httpx.HTTPError, ValueError) as exc:
                    raise HostError(f"{host}: serving, but a streamed completion gave no token: {exc}") from None
        cache = "warm (compile cache hit)" if "Directly load the compiled graph" in log else "cold (compiled)"
        ctx.outputs.runtime_start = RuntimeStart(seconds=round(took, 2), cache=cache)
        done = f"serving at {url} after {took:.1f} s, {cache}; smoke completion ok; first streamed token ok"
        released = release_gateway(ctx, host)
        return f"{done}; {released}" if released else done


def _hold_left_behind(ctx: RunContext, host: str) -> Optional[str]:
    """A gateway hold on `host` that no running change owns: a change killed between its hold and
    its engine's stop (the engine still serves, so nothing here restarts it and no start releases
    it). Without a release the gateway would hold every request, then answer 503, until the hold's
    ttl. None when there is none, or when another run holds the cluster lock (the hold is its own)."""
    f = ctx.facts[host]
    if not ctx.inventory.gateway.enabled or not f.gateway_hold:
        return None
    holder = f.lock
    mine = holder is not None and ctx.lock is not None and holder.token == ctx.lock.me.token
    if holder is not None and not mine and holder.gone() is None:
        return None
    h = f.gateway_hold
    return (
        f"release the gateway's {h.reason} hold ({h.held_for_s:g} s old), left by a change that did not "
        "finish: the engine serves, nothing here restarts it"
    )


def release_gateway(ctx: RunContext, host: str) -> Optional[str]:
    """The new engine serves: the gateway's held requests go on (runtime/gateway_admin.py)."""
    if not ctx.inventory.gateway.enabled:
        return None
    from sparkctl.runtime import gateway_admin

    return gateway_admin.release(ctx, host)
