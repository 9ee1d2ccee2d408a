"""runtime (when it runs): containers where render() puts them with the inventory's config hash,
/health, /v1/models, metrics now, the log's known bad signs and the KV pool it reports.

When no sparkctl container exists on any host and the API does not answer, every runtime check
is `skipped` ("not running"): doctor is also run before the first `sparkctl up`.
"""

from __future__ import annotations

from functools import wraps
from typing import TYPE_CHECKING, Any

from sparkctl.checks.base import Context, fail, head_host, host_check, ok, skipped, warn
from sparkctl.checks.host import runtime_hosts
from sparkctl.facts.logs import MARLIN_BACKENDS, MOE_BACKEND_NAMES, QUANT_WORD, expected_moe_names
from sparkctl.facts.metrics import KV_USAGE, RUNNING, TTFT, WAITING, held_without_progress, quantile_between

if TYPE_CHECKING:
    from sparkctl.facts.host import HostFacts

READS = frozenset({"containers", "logs", "drafter_health", "master_port", "applied"})

NOT_RUNNING = "runtime not running (`sparkctl up` starts it)"
NOT_SERVING = "the API is not serving (see runtime.health)"
KV_USAGE_WARN = 0.95
# how long doctor watches an engine that holds running requests and moves nothing before it names a
# hang: a decode step is tens of ms, a prefill chunk a few seconds at most (the alert waits alerts.hold_for)
STALL_SECONDS = 10.0
POOL_TOLERANCE = 0.10  # a pool within 10% of the inventory's kv_pool_tokens is as expected


def running_anywhere(ctx: Context) -> bool:
    if any(f.containers for f in ctx.facts.values()):
        return True
    return bool(ctx.endpoint is not None and ctx.endpoint.answering)


def runtime_check(name: str, doc: str, scope):
    """A host check that says `skipped` (NOT_RUNNING) while the runtime runs nowhere."""

    def deco(fn):
        @wraps(fn)
        def guarded(ctx: Context, host: str, f: HostFacts):
            return fn(ctx, host, f) if running_anywhere(ctx) else skipped(NOT_RUNNING)

        return host_check(name, doc, scope=scope)(guarded)

    return deco


def _serving(ctx: Context):
    """The endpoint when its API answers /health 200, else None (the checks reading it skip)."""
    ep = ctx.endpoint
    return ep if ep is not None and ep.health == 200 else None


def _scraped(ctx: Context):
    """The endpoint when it serves and its /metrics page was read, else None (runtime.health and
    runtime.metrics report why): what the checks of its metrics read."""
    ep = _serving(ctx)
    return None if ep is None or ep.metrics_error else ep


def _head_container(ctx: Context):
    """(the head's container, its log facts), or (None, None) when it has none."""
    for h in head_host(ctx):
        f = ctx.facts.get(h)
        for c in (f.containers if f else None) or []:
            if c.role == "head" and f is not None:
                return c, f.logs.get(c.id)
    return None, None


@runtime_check("runtime.containers", "each node runs its sparkctl container (drafter, worker, head)", scope=runtime_hosts)
def containers(ctx: Context, host: str, f: HostFacts):
    if f.containers is None:
        yield fail(f"cannot list containers: {f.errors.get('containers', 'no answer')}", f"check the Docker engine on {host}")
        return
    by_name = {c.name: c for c in f.containers}
    gateway = ctx.plan.gateway if ctx.plan and ctx.plan.gateway and ctx.plan.gateway.host == host else None
    for spec in ([gateway] if gateway else []) + ctx.launch_on(host):
        c = by_name.pop(spec.name, None)
        if c is None:
            yield fail(
                f"{spec.name} is not running on {host}",
                "`sparkctl up` starts it"
                if spec is gateway
                else "`sparkctl up` starts the runtime in order (drafter, worker, head)",
                spec.name,
            )
        elif not c.running:
            why = f" ({c.error})" if c.error else ""
            yield fail(
                f"{c.name} is {c.status} (exit code {c.exit_code}){why}",
                f"read why: `docker logs --tail 100 {c.name}` on {host} (runtime.engine names known causes); then `sparkctl up`",
                spec.name,
                exit_code=c.exit_code,
            )
        else:
            yield ok(f"{c.name} running since {c.started_at[:19].replace('T', ' ')}", spec.name)
    for c in by_name.values():
        yield warn(
            f"{c.name} ({c.status}) belongs to no host's launch in this inventory",
            f"remove it: `docker rm -f {c.name}` on {host}",
            c.name,
        )


@runtime_check(
    "runtime.config", "running containers carry the inventory's config hash and the node's current image", scope=runtime_hosts
)
def config(ctx: Context, host: str, f: HostFacts):
    running = [c for c in (f.containers or []) if c.running]
    if not running:
        yield skipped("no running container here (see runtime.containers)")
    for c in running:
        want = (ctx.plan.expected_hash(c.name) if ctx.plan else None) or "?"
        img = f.images.get(c.image_ref)
        if c.config_hash != want:
            yield fail(
                f"{c.name} runs config {c.config_hash or '(no label)'}, the inventory renders {want}: "
                "the inventory changed since it started",
                "`sparkctl up` restarts the runtime with the inventory's config (or revert the inventory)",
                c.name,
            )
        elif img and img.id and img.id != c.image_id:
            yield warn(
                f"{c.name} runs image {c.image_id[7:19]}, but {c.image_ref} is now {img.id[7:19]} on {host}",
                "`sparkctl up` restarts on the new image (after images.same agrees on every node)",
                c.name,
            )
        else:
            yield ok(f"{c.name}: config {c.config_hash}", c.name)


@runtime_check("runtime.health", "GET /health on the head answers 200", scope=head_host)
def health(ctx: Context, host: str, f: HostFacts):
    ep = ctx.endpoint
    if ep is None:
        return skipped("not asked")
    if ep.health == 200:
        return ok(f"{ep.url}/health 200")
    c, logs = _head_container(ctx)
    if ep.health is None and c is not None and c.running and not (logs and (logs.ready or logs.fatal)):
        since = c.running_for()
        phase = (logs.phase if logs else None) or "starting"
        what = f"loading ({phase}, {since:.0f} s since start)" if since is not None else f"loading ({phase})"
        message = f"{ep.url} refuses connections: not serving yet, {what}"
        fix = "wait: `sparkctl up` waits for a loading runtime (it never restarts one); a cold start takes 10-15 min on a Spark"
        # a loading runtime serves nothing: it fails doctor unless the operator says loading is expected
        return warn(message, fix) if ctx.allow_loading else fail(message, fix + " (or `sparkctl doctor --allow-loading`)")
    what = f"answers {ep.health}" if ep.health is not None else (ep.health_error or "no answer")
    return fail(
        f"{ep.url}/health {what}" + (" (503: the engine is dead)" if ep.health == 503 else ""),
        f"see runtime.engine and `docker logs --tail 100 sparkctl-head` on {host}; restart with `sparkctl up`",
    )


@runtime_check("runtime.models", "/v1/models serves the inventory's model name and max_model_len", scope=head_host)
def models(ctx: Context, host: str, f: HostFacts):
    ep, r = _serving(ctx), ctx.inventory.runtime
    if ep is None:
        return skipped(NOT_SERVING)
    if ep.models is None:
        return fail(f"/v1/models: {ep.models_error}", f"`curl {ep.url}/v1/models` by hand; `docker logs sparkctl-head`")
    names = [m.get("id") for m in ep.models]
    m = next((m for m in ep.models if m.get("id") == r.served_model_name), None)
    fix = "the runtime runs another config: `sparkctl up` restarts it with the inventory's (see runtime.config)"
    if m is None:
        return fail(f"serves {', '.join(map(str, names)) or 'no model'}, not {r.served_model_name}", fix)
    if m.get("max_model_len") != r.max_model_len:
        return fail(
            f"{r.served_model_name} has max_model_len {m.get('max_model_len')}, the inventory says {r.max_model_len}", fix
        )
    return ok(f"{r.served_model_name}, max_model_len {r.max_model_len}")


@runtime_check(
    "runtime.metrics", "/metrics now: requests running/waiting, KV cache usage, speculative acceptance", scope=head_host
)
def metrics(ctx: Context, host: str, f: HostFacts):
    ep = _serving(ctx)
    if ep is None:
        return skipped(NOT_SERVING)
    if ep.metrics_error:
        return fail(f"/metrics: {ep.metrics_error}", f"`curl {ep.url}/metrics` by hand")
    m = ep.metrics
    running, waiting = m.total(RUNNING) or 0.0, m.total(WAITING) or 0.0  # request counts add up over engines
    kv = m.gauge(KV_USAGE)  # one pool per engine: never summed
    parts = [f"{running:g} running, {waiting:g} waiting"]
    data: dict = {"running": running, "waiting": waiting}
    if kv is not None:
        if len(kv.per_engine) == 1:
            parts.append(f"KV cache {kv.max:.0%} used")
        else:
            parts.append(
                f"KV cache {kv.max:.0%} used on the fullest of {len(kv.per_engine)} engines (engine {kv.fullest_engine}), "
                f"{kv.mean:.0%} on average"
            )
        data["kv_cache_usage"] = kv.as_dict()
    spec = m.spec
    if spec is not None and spec.drafts > 0 and spec.draft_tokens > 0:
        parts.append(
            f"speculative: mean acceptance length {spec.acceptance_length:.2f}, "
            f"acceptance rate {spec.acceptance_rate:.0f}% since start"
        )
        data.update(spec.fields())
    elif ctx.inventory.runtime.speculative:
        parts.append("speculative: no drafts yet")
    msg = "; ".join(parts)
    if kv is not None and kv.max >= KV_USAGE_WARN:
        where = "the pool is" if len(kv.per_engine) == 1 else f"engine {kv.fullest_engine}'s pool is"
        return warn(
            f"{msg}: {where} nearly full (requests get preempted)",
            "the pool is shared by all live requests: lower max_num_seqs or the context in use, or add memory",
            **data,
        )
    return ok(msg, **data)


@runtime_check("runtime.kv_pool", "the KV pool the runtime logs fits max_model_len and matches kv_pool_tokens", scope=head_host)
def kv_pool(ctx: Context, host: str, f: HostFacts):
    _, logs = _head_container(ctx)
    r = ctx.inventory.runtime
    ep = ctx.endpoint
    # vllm:cache_config_info carries kv_cache_size_tokens once the pool is sized: no log needed.
    from_metrics = ep.metrics.kv_cache_size_tokens() if ep is not None and ep.metrics is not None else {}
    if logs is not None and logs.kv_pool_tokens is not None:
        pool, source = logs.kv_pool_tokens, "log"
    elif from_metrics:
        pool, source = min(from_metrics.values()), "metrics"
    else:
        return skipped("no 'GPU KV cache size' line in the head's log and no kv_cache_size_tokens in /metrics yet")
    data = {"kv_pool_tokens": pool, "source": source}
    if pool < r.max_model_len:
        return fail(
            f"KV pool {pool:,} tokens is smaller than max_model_len {r.max_model_len:,}: a full-length request cannot fit",
            "lower max_model_len, raise gpu_memory_utilization, or free GPU memory (gpu.processes)",
            **data,
        )
    if r.kv_pool_tokens and abs(pool - r.kv_pool_tokens) > POOL_TOLERANCE * r.kv_pool_tokens:
        return warn(
            f"KV pool {pool:,} tokens, the inventory expects ~{r.kv_pool_tokens:,}",
            "a smaller pool means less memory for KV (another process, a different gpu_memory_utilization or "
            "kv_cache_dtype); if the new figure is right, update runtime.kv_pool_tokens",
            **data,
        )
    return ok(f"KV pool {pool:,} tokens (max_model_len {r.max_model_len:,})", **data)


def target_hosts(ctx: Context) -> list[str]:
    """Hosts running a rank of the main model (head, workers): where MoE kernels are chosen."""
    plan = ctx.plan
    hosts = {c.host for c in plan.containers if c.role in ("head", "worker")} if plan else set()
    return [h for h in ctx.hosts if h in hosts]


@runtime_check(
    "runtime.moe_backend", "no silent Marlin fallback: the MoE backend the log names is the configured one", scope=target_hosts
)
def moe_backend(ctx: Context, host: str, f: HostFacts):
    r = ctx.inventory.runtime
    want, quant = r.moe_backend, r.moe_quantization
    # vLLM 0.33 logs the enum name of the selected backend (fused_moe/oracle/nvfp4.py, mxfp4.py);
    # which names the inventory's value stands for depends on the checkpoint's path.
    paths = [quant] if quant else list(MOE_BACKEND_NAMES)
    names = {n for p in paths for n in (expected_moe_names(p, want) or ())}
    logged_by = [(c, f.logs[c.id]) for c in f.containers or [] if c.role in ("head", "worker") and f.logs.get(c.id) is not None]
    if not logged_by:
        yield skipped("no runtime container here")
    for c, logs in logged_by:
        logged = logs.moe_backend
        marlin = (logged in MARLIN_BACKENDS) or bool(logs.marlin)
        if marlin and want != "marlin":
            said = logs.marlin[0] if logs.marlin else f"MoE backend {logged}"
            yield fail(
                f"{c.name} fell back to Marlin (W4A16, about half the throughput): {said[-160:]}",
                f"run an image whose MoE kernels include {want or 'flashinfer_b12x'} and set runtime.moe_backend to it, "
                "then `sparkctl up`",
                c.name,
                moe_backend=logged,
            )
        elif logged and quant and logs.moe_path and logs.moe_path != QUANT_WORD[quant]:
            yield fail(
                f"{c.name} runs the {logs.moe_path} MoE path ({logged}), the inventory says moe_quantization {quant}",
                "set runtime.moe_quantization to the checkpoint's (nvfp4 or mxfp4), or mount the checkpoint you meant",
                c.name,
                moe_backend=logged,
            )
        elif logged and names and logged not in names:
            yield fail(
                f"{c.name} uses MoE backend {logged}, the inventory asks for {want} (vLLM logs it as {', '.join(sorted(names))})",
                f"the image lacks {want}: use one that has it (or set runtime.moe_backend to what it has)",
                c.name,
                moe_backend=logged,
            )
        elif logged and want and want != "auto" and not names:
            # e.g. flashinfer_b12x on an MXFP4 checkpoint: vLLM 0.33 refuses it; an image that runs it has its own.
            yield ok(
                f"{c.name}: MoE backend {logged} (vLLM 0.33 has no {quant or 'NvFp4/Mxfp4'} backend named {want}: "
                "the image's own build)",
                c.name,
                moe_backend=logged,
            )
        elif logged:
            yield ok(f"{c.name}: MoE backend {logged}", c.name, moe_backend=logged)
        else:
            yield ok(f"{c.name}: no Marlin fallback in its log", c.name)


_FATAL_FIX = {
    "device_assert": "a CUDA device-side assert, known under concurrent long-context requests: `sparkctl up` to "
    "serve again, then admit long prompts one at a time (gateway.long_context) or lower max_num_seqs",
    "engine_fatal": "the engine core died: read the traceback above the line (`docker logs --tail 200 {name}`), then `sparkctl up`",
    "worker_died": "a worker rank died (Ray's RayWorkerProc, or under mp the node's VllmWorker-<rank> process): check the "
    "worker (its container log, `sparkctl doctor --only fabric,gpu`), then `sparkctl up`",
    "peer_lost": "mp: the head's collective with the worker's rank failed (the rank is gone or the fabric dropped it): "
    "see runtime.peer on the worker and `sparkctl doctor --only fabric`, then `sparkctl up`",
}


@runtime_check(
    "runtime.engine",
    "the logs show none of the known fatal signs (EngineCore fatal, device-side assert, lost Ray or mp worker)",
    scope=runtime_hosts,
)
def engine(ctx: Context, host: str, f: HostFacts):
    logged_by = [(c, f.logs[c.id]) for c in f.containers or [] if c.role != "gateway" and f.logs.get(c.id) is not None]
    if not logged_by:
        yield skipped("no runtime container here")
    for c, logs in logged_by:
        # every sign, the most causal first (a CUDA assert kills a worker kills the engine)
        for kind, line in logs.signs:
            yield fail(f"{c.name}: {line[-200:]}", _FATAL_FIX[kind].format(name=c.name), c.name, sign=kind)
        if not logs.signs:
            yield ok(f"{c.name}: no fatal sign in its log", c.name)


def worker_hosts(ctx: Context) -> list[str]:
    return [h for h in ctx.inventory.hosts_with_role("worker") if h in ctx.hosts]


@runtime_check(
    "runtime.peer",
    "mp: each headless worker runs, joined this head's rendezvous and reaches its master port over the fabric",
    scope=worker_hosts,
)
def peer(ctx: Context, host: str, f: HostFacts):
    """What replaces Ray's own view of its nodes under mp: vLLM 0.33's head watches only its own worker
    processes (multiproc_executor.py start_worker_monitor), so an idle head answers /health 200 with
    its peer gone, and dies only at the next request."""
    from sparkctl.launch.endpoints import mp_master

    if ctx.inventory.runtime.distributed_executor_backend != "mp":
        return skipped("ray: the Ray executor watches its workers itself (runtime.engine names a lost one)")
    ip, port = mp_master(ctx.inventory)
    master = f"{ip}:{port}"
    c = next((c for c in f.containers or [] if c.role == "worker"), None)
    logs = f.logs.get(c.id) if c else None
    fix = "`sparkctl up` restarts head and worker together (vLLM has no partial restart; a headless rank never rejoins)"
    if c is None:
        return fail(f"no sparkctl-worker on {host}: the head's engine has no peer for its rank(s) on this node", fix)
    if not c.running:
        died = logs.worker_died[:1] if logs else []
        why = f"; its log: {died[0][-160:]}" if died else ""
        return fail(
            f"{c.name} is {c.status} (exit code {c.exit_code}){why}. Under mp the head is not told: it dies at its "
            "next request (500, then /health 503)",
            f"read `docker logs --tail 100 {c.name}` on {host}; {fix}",
            c.name,
        )
    if logs is None or logs.headless_master is None:
        return fail(
            f"{c.name} runs but its log has no `headless multiproc executor` launch line: it is no headless mp node",
            f"`sparkctl render` shows the worker's line; {fix}",
            c.name,
        )
    if logs.headless_master != master:
        return fail(f"{c.name} joined the head at {logs.headless_master}, not this inventory's {master}", fix, c.name)
    if f.master_port == "closed":
        return fail(
            f"the head's rendezvous {master} refuses connections from {host} over the fabric",
            "is sparkctl-head running? then `sparkctl doctor --only fabric` (the rail to the head)",
            c.name,
        )
    reach = ", reachable over the fabric" if f.master_port == "open" else ""
    return ok(f"{c.name}: headless rank(s) joined tcp://{master}{reach}", c.name)


def drafter_host(ctx: Context) -> list[str]:
    s = ctx.inventory.runtime.speculative
    return [s.drafter_host] if s and s.drafter_host in ctx.hosts else []


@runtime_check("runtime.drafter", "the drafter on the offload host answers /health", scope=drafter_host)
def drafter(ctx: Context, host: str, f: HostFacts):
    spec = ctx.inventory.runtime.speculative
    port = spec.drafter_port if spec else None  # drafter_host scopes this to an inventory with a drafter
    if f.drafter_health == 200:
        return ok(f"drafter /health 200 on port {port}")
    c = next((c for c in f.containers or [] if c.role == "drafter"), None)
    state = "no drafter container" if c is None else f"{c.name} is {c.status}"
    return fail(
        f"drafter on port {port} does not answer /health ({f.drafter_health or 'no answer'}; {state})",
        f"`docker logs --tail 100 sparkctl-drafter` on {host}; `sparkctl up` starts it before the head",
    )


@runtime_check(
    "runtime.spec_acceptance",
    "speculative acceptance over vLLM's last logged interval meets alerts.acceptance_length_min",
    scope=head_host,
)
def spec_acceptance(ctx: Context, host: str, f: HostFacts):
    if not ctx.inventory.runtime.speculative:
        return skipped("no speculative decoding in the inventory")
    _, logs = _head_container(ctx)
    want = ctx.inventory.alerts.acceptance_length_min
    # vLLM logs `SpecDecoding metrics: Mean acceptance length: X` every stats interval (VLLM_LOG_STATS_INTERVAL, 10 s by default) with
    # traffic: acceptance now, not since start (the counters on /metrics dilute a recent collapse).
    got = logs.spec_mean_acceptance if logs is not None else None
    if got is None:
        return ok("no speculative interval logged since the head started (no traffic yet)")
    if got < want:
        return warn(
            f"mean acceptance length {got:.2f} over the last logged interval, below the expected {want:g} "
            "(alerts.acceptance_length_min): drafting costs more than it saves",
            "long contexts lower acceptance (on code about a third lower by 80K tokens than at short context): if the traffic now "
            "has long contexts, that is the known decay; at short context, check the drafter (runtime.drafter) "
            "and its version",
            acceptance_length=got,
            expected=want,
        )
    return ok(
        f"mean acceptance length {got:.2f} over the last logged interval (expected >= {want:g})",
        acceptance_length=got,
        expected=want,
    )


@runtime_check(
    "runtime.queue",
    "no queue (more than alerts.waiting_requests) while a slot is free: a long prefill holding the token budget",
    scope=head_host,
)
def queue(ctx: Context, host: str, f: HostFacts):
    ep = _scraped(ctx)
    if ep is None:
        return skipped(NOT_SERVING)
    m, slots = ep.metrics, ctx.inventory.runtime.max_num_seqs
    running, waiting = m.total(RUNNING) or 0.0, m.total(WAITING) or 0.0
    engines = max(1, len(m.engines))  # data parallel: max_num_seqs per engine
    data: dict[str, Any] = {"running": running, "waiting": waiting, "max_num_seqs": slots}
    kv = m.gauge(KV_USAGE)
    if waiting > 0 and kv is not None and kv.max >= KV_USAGE_WARN:
        return ok(f"{waiting:g} request(s) wait for KV space, not behind a prefill (see runtime.metrics)", **data)
    # vLLM admits a waiting request only while the step's token budget lasts: requests waiting with
    # slots free mean a prefill takes the whole budget (seed 000's head-of-line blocking). One or two
    # waiting is a request that arrived mid-step; more than alerts.waiting_requests is a queue.
    if waiting > ctx.inventory.alerts.waiting_requests and running < slots * engines:
        return warn(
            f"{waiting:g} request(s) wait with {running:g} of {slots * engines} slots busy: a long prompt's prefill "
            "holds the step's token budget, and short requests wait for their first token until it ends",
            "find the long cold prompts (`sparkctl status --watch`: waiting while few run); move long-context jobs to "
            "their own window or cluster, or keep their prefix warm",
            **data,
        )
    return ok(f"{running:g} running, {waiting:g} waiting (max_num_seqs {slots})", **data)


@runtime_check(
    "runtime.progress",
    "the engine makes progress while it holds running requests (no hang behind a 200 /health)",
    scope=head_host,
)
def progress(ctx: Context, host: str, f: HostFacts):
    ep = _scraped(ctx)
    if ep is None:
        return skipped(NOT_SERVING)
    if ep.earlier is None or not ep.window_s:
        return ok("one /metrics page only: nothing to compare")
    held = held_without_progress(ep.earlier, ep.metrics)
    data = {"window_s": round(ep.window_s, 2), "running": ep.metrics.total(RUNNING) or 0.0}
    if not held:
        return ok(f"{data['running']:g} running, progress in the {ep.window_s:.1f} s doctor looked", **data)
    if ep.window_s < STALL_SECONDS:  # the longer look failed (a /metrics read): too short to judge
        return ok(f"{held:g} running and nothing moved in {ep.window_s:.1f} s: too short to judge a hang", **data)
    return warn(
        f"the engine holds {held:g} running request(s) and generated no token, finished no prefill and moved no "
        f"KV block in {ep.window_s:.1f} s while /health answers 200: a hang in the collective (NCCL over the "
        "fabric), not load",
        "`sparkctl restart` (head and worker together: vLLM has no partial restart), then "
        "`sparkctl doctor --only fabric,env` for the fabric or NCCL setting behind it",
        **data,
    )


@runtime_check(
    "runtime.ttft", "p99 time to first token over the seconds doctor looked is within alerts.ttft_p99_seconds", scope=head_host
)
def ttft(ctx: Context, host: str, f: HostFacts):
    ep = _scraped(ctx)
    if ep is None:
        return skipped(NOT_SERVING)
    if ep.earlier is None or not ep.window_s:
        return ok("one /metrics page only: nothing to compare (see runtime.queue)")
    # vLLM's histogram counts since the start; the difference between doctor's two pages is now
    # (as Prometheus's rate() over the alert's window), so an hour-old burst does not warn today
    p99, n = quantile_between(ep.earlier, ep.metrics, TTFT, 0.99)
    want = ctx.inventory.alerts.ttft_p99_seconds
    data = {"window_s": round(ep.window_s, 2), "first_tokens": n, "ttft_p99_s": None if p99 is None else round(p99, 3)}
    if p99 is None:
        return ok(f"no request got its first token in the {ep.window_s:.1f} s doctor looked", **data)
    if p99 > want:
        return warn(
            f"p99 time to first token {p99:.2f} s over {n} request(s) in the last {ep.window_s:.1f} s, above "
            f"alerts.ttft_p99_seconds ({want:g} s): requests wait for their first token",
            "a long cold prompt ahead of short ones holds the step's token budget (seed 000's head-of-line): "
            "find and move the job that sends it (`sparkctl status --watch`: waiting while few run); with every "
            "slot busy it is load or a full KV pool (runtime.metrics)",
            **data,
        )
    return ok(f"p99 time to first token {p99:.3f} s over {n} request(s) in the last {ep.window_s:.1f} s", **data)
