"""Kernel caches step: the persistent cache directory on every node that runs the runtime.

Mounted at the runtime's cache root (VLLM_CACHE_ROOT; Triton and FlashInfer point inside it),
so a restart with an unchanged compile hash loads compiled graphs instead of compiling for
minutes. The path is resolved on each node itself: it must be absolute in the inventory, never
a `~` expanded on the control machine or another node (home directories differ).
"""

from __future__ import annotations

from sparkctl.errors import HostError
from sparkctl.inventory.models import Inventory
from sparkctl.launch.plan import render
from sparkctl.steps.base import Change, Plan, RunContext, Step


class CachesStep(Step):
    name = "caches"
    facts = frozenset({"cache"})

    def hosts(self, inv: Inventory) -> list[str]:
        return sorted({c.host for c in render(inv).containers}, key=list(inv.hosts).index)

    def plan_host(self, ctx: RunContext, host: str) -> Plan:
        path = ctx.inventory.caches.host_path
        if not path.startswith("/"):
            return self.blocked(host, f"caches.host_path {path!r} must be absolute (it is resolved on each node)")
        cache = ctx.facts[host].cache
        if cache is None:
            return self.blocked(host, f"cannot read {path}: {ctx.facts[host].errors.get('cache', 'no answer')}")
        if cache.present:
            n = len(cache.hashes)
            warm = f"holds {n} compile cache(s)" if n else "empty: the next start compiles (cold)"
            return self.noop(host, f"cache dir {path} exists ({warm})")
        if cache.not_a_directory:
            return self.blocked(host, f"{path} exists but is not a directory")
        return self.changes(host, [Change("mkdir", f"create cache dir {path}", {"path": path})])

    def apply(self, ctx: RunContext, plan: Plan) -> str:
        path = plan.changes[0].data["path"]
        r = ctx.session(plan.host).run(["mkdir", "-p", "-m", "0755", path])
        if not r.ok:
            raise HostError(f"{plan.host}: cannot create {path}: {r.stderr.strip()}", fix="check the disk and permissions")
        return f"created cache dir {path}"
