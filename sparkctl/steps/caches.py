"""Kernel caches step: the persistent cache directory on every node that runs the runtime.

Mounted at the runtime's cache root (VLLM_CACHE_ROOT; Triton and FlashInfer point inside it),
so a restart with an unchanged compile hash loads compiled graphs instead of compiling for
minutes. The path is resolved on each node itself: it must be absolute in the inventory, never
a `~` expanded on the control machine or another node (home directories differ).
"""

from __future__ import annotations

import shlex

from sparkctl.errors import HostError
from sparkctl.inventory.models import Inventory
from sparkctl.runtime.launch import render
from sparkctl.steps.base import Change, Plan, RunContext, Step


class CachesStep(Step):
    name = "caches"
    description = "persistent kernel cache directory on every runtime node"

    def hosts(self, inv: Inventory) -> list[str]:
        return sorted({c.host for c in render(inv).containers}, key=list(inv.hosts).index)

    def probes(self, inv: Inventory, host: str) -> dict[str, str]:
        path = shlex.quote(inv.caches.host_path)
        # kind of the path, then how many compile caches it holds (a warm start needs one)
        return {"cache": f"stat -c %F {path} && (ls {path}/torch_compile_cache 2>/dev/null | grep -vc '^torch_aot' || true)"}

    def plan(self, ctx: RunContext, host: str) -> Plan:
        path = ctx.inventory.caches.host_path
        if not path.startswith("/"):
            return Plan(self.name, host, blocked=f"caches.host_path {path!r} must be absolute (it is resolved on each node)")
        sec = ctx.section(host, "cache")
        lines = sec.out.split()
        if sec.ok and sec.out.startswith("directory"):
            n = int(lines[-1]) if lines and lines[-1].isdigit() else 0
            warm = f"holds {n} compile cache(s)" if n else "empty: the next start compiles (cold)"
            return self.noop(host, f"cache dir {path} exists ({warm})")
        if sec.ok:
            return Plan(self.name, host, blocked=f"{path} exists but is not a directory ({sec.out.splitlines()[0]})")
        return self.changes(host, [Change("mkdir", f"create cache dir {path}", {"path": path})])

    def apply(self, ctx: RunContext, plan: Plan) -> str:
        path = plan.changes[0].data["path"]
        r = ctx.fleet[plan.host].run(["mkdir", "-p", "-m", "0755", path])
        if not r.ok:
            raise HostError(f"{plan.host}: cannot create {path}: {r.stderr.strip()}", fix="check the disk and permissions")
        return f"created cache dir {path}"
