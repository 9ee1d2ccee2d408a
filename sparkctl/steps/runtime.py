"""Runtime step: start drafter, worker and head in the order the engine needs, wait until it serves.

A runtime whose containers all run with the inventory's config hash is left running (that is
the no-op). Otherwise the whole runtime restarts, because vLLM has no partial restart: every
old container is stopped first (head first, so it drains), then drafter, worker and head start
in that order; the head is watched through its log phases until /health answers, and a real
completion request is the smoke test.
"""

from __future__ import annotations

import shlex
import threading
import time

from sparkctl.errors import HostError
from sparkctl.inventory.models import Inventory
from sparkctl.runtime import containers, health
from sparkctl.runtime.launch import LABEL_PREFIX, LaunchPlan, render
from sparkctl.steps.base import Change, Plan, RunContext, Step

DEFAULT_TIMEOUT = 1800.0  # a real cold boot takes 10-15 min (seed 002)


def parse_containers(text: str) -> dict[str, tuple[str, str, str]]:
    """`docker inspect --format '{{.Name}}|{{.State.Status}}|<config hash label>|{{.Image}}'` lines
    -> {name: (state, config hash, image ID)}."""
    out = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 4 and parts[0]:
            out[parts[0].lstrip("/")] = (parts[1], parts[2], parts[3])
    return out


def containers_command(cluster: str) -> str:
    """Name, state, config hash and image ID of this cluster's containers (read by parse_containers)."""
    fmt = '{{.Name}}|{{.State.Status}}|{{index .Config.Labels "%s.config-hash"}}|{{.Image}}' % LABEL_PREFIX
    return (
        f"docker ps -aq --filter label={LABEL_PREFIX}.cluster={shlex.quote(cluster)} "
        f"| xargs -r docker inspect --format {shlex.quote(fmt)}"
    )


def health_probe(port: int) -> str:
    """/health from the head itself, in the facts round trip: bash's /dev/tcp needs no curl on the host."""
    return (
        "bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d && printf \"GET /health HTTP/1.0\\r\\n\\r\\n\" >&3 "
        "&& timeout 2 head -1 <&3' 2>/dev/null || echo refused" % port
    )


class RuntimeStep(Step):
    name = "runtime"
    description = "drafter, worker and head running the inventory's config, serving"
    sequential = True

    def __init__(self) -> None:
        self._stopped = False
        self._lock = threading.Lock()

    def launch(self, ctx: RunContext) -> LaunchPlan:
        if "launch" not in ctx.shared:
            ctx.shared["launch"] = render(ctx.inventory)
        return ctx.shared["launch"]

    def hosts(self, inv: Inventory) -> list[str]:
        seen: list[str] = []
        for c in render(inv).containers:
            if c.host not in seen:
                seen.append(c.host)
        return seen

    def probes(self, inv: Inventory, host: str) -> dict[str, str]:
        probes = {"containers": containers_command(inv.cluster.name)}
        if inv.hosts[host].role == "head":
            probes["health"] = health_probe(inv.runtime.port)
        return probes

    def _drift(self, ctx: RunContext) -> list[str]:
        """Why the runtime must (re)start, over all hosts; empty when everything matches."""
        launch = self.launch(ctx)
        node_images = ctx.shared.get("image_ids", {})  # what the images step just verified on each node
        reasons = []
        for spec in launch.containers:
            running = parse_containers(ctx.section(spec.host, "containers").out).get(spec.name)
            current = node_images.get(spec.host, {}).get(spec.image)
            if running is None:
                reasons.append(f"{spec.name} not on {spec.host}")
            elif running[0] != "running":
                reasons.append(f"{spec.name} on {spec.host} is {running[0]}")
            elif running[1] != launch.config_hash:
                reasons.append(f"{spec.name} on {spec.host} runs config {running[1][:12]}")
            elif current and running[2] != current:
                reasons.append(f"{spec.name} on {spec.host} runs image {running[2][7:19]}, the node now has {current[7:19]}")
        head = ctx.inventory.hosts_with_role("head")[0]
        if not reasons:
            status = ctx.section(head, "health").out.strip()
            if " 200" not in status:
                reasons.append(f"head does not answer /health ({status or 'no answer'})")
        return reasons

    def plan(self, ctx: RunContext, host: str) -> Plan:
        launch = self.launch(ctx)
        specs = launch.for_host(host)
        with self._lock:
            if "runtime_drift" not in ctx.shared:
                ctx.shared["runtime_drift"] = self._drift(ctx)
        drift = ctx.shared["runtime_drift"]
        if not drift and not ctx.force:
            names = ", ".join(s.name for s in specs)
            return self.noop(host, f"{names} running config {launch.config_hash}")
        why = "--force" if not drift else "; ".join(drift)
        return self.changes(
            host,
            [Change("start", f"(re)start {s.name} with config {launch.config_hash}", {"name": s.name}) for s in specs],
            reason=f"restart runtime: {why}",
        )

    def _stop_everything(self, ctx: RunContext) -> None:
        """Stop every old runtime container, head first so it drains, before starting any new one."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        inv = ctx.inventory
        order = sorted(self.hosts(inv), key=lambda h: {"head": 0, "worker": 1}.get(inv.hosts[h].role, 2))
        for h in order:
            ctx.progress(h, self.name, "stopping old runtime (drain)")
            containers.stop(ctx.fleet[h].docker(), inv.cluster.name)

    def apply(self, ctx: RunContext, plan: Plan) -> str:
        self._stop_everything(ctx)
        client = ctx.fleet[plan.host].docker()
        started = []
        for spec in self.launch(ctx).for_host(plan.host):
            ctx.progress(plan.host, self.name, f"starting {spec.name}")
            try:
                containers.start(client, spec)
            except Exception as exc:  # docker.errors.APIError/ImageNotFound: the engine's own words
                raise HostError(f"{plan.host}: cannot start {spec.name}: {exc}") from None
            started.append(spec.name)
            if spec.role == "head":
                return f"started {', '.join(started)}; " + self._wait_serving(ctx, plan.host, spec.name)
        return f"started {', '.join(started)}"

    def _wait_serving(self, ctx: RunContext, host: str, name: str) -> str:
        import docker
        import httpx

        inv = ctx.inventory
        url = health.base_url(inv)
        deadline = time.monotonic() + float(ctx.options.get("timeout") or DEFAULT_TIMEOUT)
        client = ctx.fleet[host].docker()
        t0 = time.monotonic()
        phase = "starting"
        with httpx.Client() as http:
            while True:
                try:
                    c = client.containers.get(name)
                    log = c.logs(tail=400).decode(errors="replace")
                except docker.errors.NotFound:
                    raise HostError(f"{host}: {name} disappeared while starting") from None
                phase = health.phase_of(log)
                fatal = health.fatal_line(log)
                if c.status != "running" or fatal:
                    raise HostError(
                        f"{host}: runtime died while {phase}: {fatal or 'container ' + c.status}",
                        fix="read `docker logs sparkctl-head` on the head and run `sparkctl doctor`",
                    )
                if health.health(http, url) == 200:
                    break
                if time.monotonic() > deadline:
                    raise HostError(f"{host}: runtime not serving after {deadline - t0:.0f} s (last phase: {phase})")
                ctx.progress(host, self.name, f"{phase} ({time.monotonic() - t0:.0f} s)")
                time.sleep(0.25)
            took = time.monotonic() - t0
            ctx.progress(host, self.name, "smoke test: one completion")
            try:
                health.smoke(http, url, inv.runtime.served_model_name)
            except (httpx.HTTPError, KeyError, IndexError, ValueError) as exc:
                raise HostError(f"{host}: serving, but the smoke completion failed: {exc}") from None
        cache = "warm (compile cache hit)" if "Directly load the compiled graph" in log else "cold (compiled)"
        ctx.shared["runtime_start"] = {"seconds": round(took, 2), "cache": cache}
        return f"serving at {url} after {took:.1f} s, {cache}; smoke completion ok"
