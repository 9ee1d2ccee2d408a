"""The gateway step: `sparkctl-gateway` on the head, the front door clients reach on runtime.port
(docs/gateway.md). Its own restart group: it restarts only when its own launch changes (its
section of the inventory, runtime.port, or the gateway code of a new sparkctl), never with the
engine behind it.

In `up` and `reload` it runs after `stop` and before `runtime`: the first time, the old engine held
runtime.port until `stop`; from then on the gateway is up (holding while the engine is away)
before the engine starts. In `down` (option `remove`) it goes last, after the engine it fronts.
Its code is shipped from this sparkctl to a content-addressed directory on the head first.
"""

from __future__ import annotations

from sparkctl.errors import HostError
from sparkctl.inventory.models import Inventory
from sparkctl.launch import gateway as placement
from sparkctl.steps.base import Change, Plan, RunContext, Step

WAIT_S = 60.0  # a gateway answers within a second or two of its start; past this it will not


class GatewayStep(Step):
    name = "gateway"
    facts = frozenset({"containers", "gateway_code", "gateway_keys"})

    def hosts(self, inv: Inventory) -> list[str]:
        return inv.hosts_with_role("head")[:1]

    def plan_host(self, ctx: RunContext, host: str) -> Plan:
        f = ctx.facts[host]
        if f.containers is None:
            return self.blocked(host, f"cannot list containers: {f.errors.get('containers', 'no answer')}")
        running = next((c for c in f.containers if c.name == placement.CONTAINER), None)
        spec = ctx.launch.gateway
        if self.options.remove or spec is None:
            if running is None:
                return self.noop(host, "no gateway here" if spec is None else "the gateway is already gone")
            gone = "sparkctl down: after the engine it fronts" if spec else "gateway.enabled is false"
            return self.changes(host, [Change("remove", f"stop and remove {placement.CONTAINER} ({gone})")])
        keys = ctx.inventory.gateway.api_keys_file
        if keys and f.gateway_keys != "readable":
            return self.blocked(
                host,
                f"gateway.api_keys_file {keys} is not a readable file on the head ({f.gateway_keys or 'not read'}): "
                f"write the clients' keys there, one a line, root-only (chmod 0600 {keys})",
            )
        from sparkctl.launch import gateway_code

        ops = []
        if f.gateway_code is not True:
            n = len(gateway_code.files())
            ops.append(Change("ship-code", f"copy the gateway's code ({n} files) to {gateway_code.directory()}"))
        from sparkctl.steps.placed import start_changes

        want, port = ctx.launch.expected_hash(spec.name), ctx.inventory.runtime.port
        engine_port = ctx.inventory.gateway.engine_port
        starts, why = start_changes(
            spec.name,
            host,
            running,
            want,
            f"start {spec.name} with config {want} on :{port}, engine behind it on :{engine_port}",
            port,
        )
        ops += starts
        if not ops:
            return self.noop(host, f"{spec.name} running config {want} on :{port}")
        return self.changes(host, ops, reason=why or "")

    def apply(self, ctx: RunContext, plan: Plan) -> str:
        from sparkctl.steps.placed import START, WAIT, apply_changes

        return apply_changes(ctx, plan, {"ship-code": self._ship, START: self._start, WAIT: self._wait, "remove": self._remove})

    def _remove(self, ctx: RunContext, host: str) -> str:
        from sparkctl.runtime import containers

        ctx.progress(host, self.name, f"stopping {placement.CONTAINER}")
        gone = containers.stop(ctx.session(host).docker(), ctx.inventory.cluster.name, names=[placement.CONTAINER])
        return f"removed {', '.join(gone)}" if gone else "nothing left to remove"

    def _ship(self, ctx: RunContext, host: str) -> str:
        from sparkctl.launch import gateway_code
        from sparkctl.runtime.code_ship import ship

        files, final = gateway_code.files(), gateway_code.directory()
        ship(ctx.session(host), host, files, final, placement.CODE_ROOT, "the gateway's code")
        return f"gateway code {gateway_code.code_hash()} in {final} ({len(files)} files)"

    def _start(self, ctx: RunContext, host: str) -> str:
        from sparkctl.steps.runtime import start_container

        spec = ctx.launch.gateway
        assert spec is not None  # planned only with gateway.enabled, which renders it
        ctx.progress(host, self.name, f"starting {spec.name}")
        # the admin socket's directory: root only (docker would create a missing bind source 0755)
        r = ctx.session(host).run(f"mkdir -p {placement.ADMIN_DIR} && chmod 0700 {placement.ADMIN_DIR}")
        if not r.ok:
            raise HostError(f"{host}: cannot create {placement.ADMIN_DIR}: {r.stderr.strip()}", fix="check /run on the head")
        return start_container(ctx, host, spec)

    def _wait(self, ctx: RunContext, host: str) -> str:
        """Its own metrics page answers on the public port (it answers even while holding)."""
        from sparkctl.runtime.containers import wait_answering
        from sparkctl.runtime.health import public_url

        url = public_url(ctx.inventory)
        fix = f"read `docker logs {placement.CONTAINER}` on the head; is runtime.port free there?"
        took = wait_answering(ctx.session(host).docker(), host, placement.CONTAINER, url + placement.METRICS_PATH, WAIT_S, fix)
        return f"gateway answers on {url} after {took:.1f} s"
