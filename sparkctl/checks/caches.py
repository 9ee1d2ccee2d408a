"""caches: the persistent kernel cache directory on each runtime node, and whether a start will be warm."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparkctl.checks.base import Context, Finding, fail, host_check, ok, skipped, warn
from sparkctl.checks.host import runtime_hosts
from sparkctl.facts.caches import COMPILE_DIR, CUDA_DIR

if TYPE_CHECKING:
    from sparkctl.facts.host import HostFacts

READS = frozenset({"cache", "logs", "applied"})

COLD = "the next start compiles from scratch (cold: ~10-15 min on a Spark, seed 002)"


@host_check("caches.volume", "the persistent cache directory exists on each runtime node", scope=runtime_hosts)
def volume(ctx: Context, host: str, f: HostFacts):
    path = ctx.inventory.caches.host_path
    if f.cache is None:
        return skipped(f"not read: {f.errors.get('cache', 'no answer')}")
    if f.cache.present:
        return ok(f"{path} exists (mounted at {ctx.inventory.caches.container_path})")
    return fail(
        f"cache directory {path} is missing: compiled kernels would not survive a restart",
        f"`sparkctl up` creates it (by hand: `mkdir -p {path}` on {host})",
    )


# what the launch points at the volume besides vLLM's own root: env name -> what is lost without it
JIT_CACHES = {
    "CUDA_CACHE_PATH": "the CUDA driver's JIT cache (kernels shipped as PTX only are compiled again for sm_121)",
    "TORCH_EXTENSIONS_DIR": "torch extensions (built again)",
}


def _off_volume(ctx: Context, host: str) -> list[str]:
    """The kernel caches this host's containers would keep outside the persistent volume."""
    root = ctx.inventory.caches.container_path.rstrip("/")
    out = []
    for spec in ctx.launch_on(host):
        env = spec.env
        for name, what in JIT_CACHES.items():
            path = env.get(name, "")
            if not (path == root or path.startswith(root + "/")):
                out.append(f"{spec.name}: {name}={path or '(unset)'} is not on the volume ({root}): {what} at every start")
        if env.get("CUDA_CACHE_DISABLE", "0") not in ("", "0"):
            out.append(
                f"{spec.name}: CUDA_CACHE_DISABLE={env['CUDA_CACHE_DISABLE']}: {JIT_CACHES['CUDA_CACHE_PATH']} at every start"
            )
    return list(dict.fromkeys(out))


@host_check(
    "caches.compile",
    "the cache holds compiled graphs (and the CUDA JIT cache sits on it), so the next start is warm",
    scope=runtime_hosts,
)
def compile_cache(ctx: Context, host: str, f: HostFacts):
    found = _graphs(ctx, host, f)
    if found.status == "skipped" or f.cache is None:  # _graphs skips when there is no cache
        return found
    jit_kib = (f.cache.kib or {}).get(CUDA_DIR)
    data = {**found.data, **({"cuda_cache_mib": round(jit_kib / 1024, 1)} if jit_kib is not None else {})}
    jit = f"; CUDA JIT cache {jit_kib / 1024:.0f} MiB" if jit_kib else ""
    off = _off_volume(ctx, host)
    if off and found.status != "failed":
        return warn(
            found.message + jit + "; but " + "; ".join(off),
            "remove those overrides from runtime.env: `sparkctl render` shows where each cache lands",
            **data,
        )
    return Finding(found.status, found.message + jit, found.fix, found.target, data)


def _graphs(ctx: Context, host: str, f: HostFacts):
    cache = f.cache
    if cache is None or not cache.present:
        return skipped("no cache directory (see caches.volume)")
    where = f"{ctx.inventory.caches.host_path}/{COMPILE_DIR}"
    partial = f"; {len(cache.partial_hashes)} interrupted compile(s)" if cache.partial_hashes else ""
    plan = ctx.plan
    current = [c for c in f.containers or [] if c.running and plan and c.config_hash == plan.expected_hash(c.name)]
    # The newest compile line of a container running this config says how its last start went.
    started = [(c, f.logs[c.id]) for c in current if f.logs.get(c.id) and f.logs[c.id].compile_start]
    for c, logs in started:
        if logs.compile_start == "warm":
            return ok(f"{c.name} loaded its compiled graphs from {where} (warm start)", last_start="warm")
    if started:
        c, logs = started[-1]
        took = f" ({logs.compile_seconds:g} s)" if logs.compile_seconds is not None else ""
        if not cache.warm_hashes:
            return fail(
                f"{c.name}'s last start compiled from scratch{took}, yet {where} holds no compiled graphs{partial}: "
                "what it compiled is not on the persistent volume, so every start is cold",
                f"the runtime's cache root must be the mounted volume: VLLM_CACHE_ROOT = caches.container_path "
                f"({ctx.inventory.caches.container_path}); `sparkctl up` sets both",
                last_start="cold",
            )
        return ok(
            f"{c.name}'s last start compiled from scratch{took} (cold); the graphs are now in {where} "
            f"({len(cache.warm_hashes)} config(s)): next start of this config warm{partial}",
            last_start="cold",
        )
    if not cache.warm_hashes:
        return warn(f"no compiled graphs in {where}{partial}: {COLD}", "nothing to fix; the first start fills the cache")
    n = len(cache.warm_hashes)
    applied = next((fx.applied for fx in ctx.facts.values() if fx.applied), None)
    if plan and applied and applied.config_hash == plan.config_hash:
        return ok(
            f"compiled graphs for {n} config(s) in {where}, incl. the applied one ({plan.config_hash}): next start warm{partial}"
        )
    if plan and applied:
        return warn(
            f"compiled graphs for {n} config(s) in {where}, but this inventory (config {plan.config_hash}) differs from "
            f"the last applied one ({applied.config_hash}): the next start compiles again if the change touches "
            "model, cache, parallel or scheduler settings or VLLM_* env",
            "expected after a config change; served name and port changes stay warm",
        )
    return ok(f"compiled graphs for {n} config(s) in {where}{partial} (no `sparkctl up` record to match them to)")
