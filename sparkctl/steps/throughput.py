"""Throughput step: after the engine (re)starts, one short decode measurement, compared with the
last recorded one when the run asks for it (`--min-throughput-ratio`).

A runtime that silently fell back to slower kernels serves "fine" at half speed: seed 002's
recipe loses half its throughput when the MoE backend falls back to Marlin (W4A16). /health and a
smoke completion cannot see that; a decode measurement can. The measurement is one streamed
completion (temperature 0, `ignore_eos`, DECODE_TOKENS tokens; the faster of two tries), its decode
rate (tokens after the first / time after the first) becomes the next run's baseline.

Only a measurement on an otherwise idle engine is the one-stream baseline: with other requests
running or waiting the step's own request says how busy the engine is, not how fast its kernels are.
When users are already at the engine (a reload under load: they are back through the gateway the
moment the engine serves) the step sends nothing and judges the engine's own per-request timings
instead: over a window, the requests that finished decoding (vLLM's request_generation_tokens and
request_decode_time_seconds histograms: tokens after each one's first per second of decoding, as
the idle measurement counts them), at the concurrency they ran at (num_requests_running, sampled).
That rate is judged against the rate recorded at the same concurrency (1, 2, 4, 8 ... streams), and
becomes it when it passes; a concurrency with none recorded yet is recorded, not judged. The result
says which measurement it was.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Optional

from sparkctl import httpclient
from sparkctl.errors import HostError, SparkctlError
from sparkctl.inventory.models import Inventory
from sparkctl.steps.base import Change, Plan, RunContext, Step
from sparkctl.steps.runtime import restarting

DECODE_TOKENS = 256
PROMPT = "Count from 1 to 200, one number per line."
LOAD_WINDOW_S = 60.0  # under load: the longest the step watches the engine's timings
LOAD_MIN_S = 5.0  # ... and the shortest: the concurrency is a mean over its samples
LOAD_MIN_REQUESTS = 2  # requests that finished decoding in the window: enough to judge
LOAD_SAMPLE_S = 0.25


@dataclass(frozen=True)
class LoadedDecode:
    """Decode as the engine timed its own requests while users were on."""

    rate: float  # tokens after each request's first, per second of decoding (summed over the requests)
    requests: int  # requests that finished decoding in the window
    streams: float  # requests running at once, the mean of the samples

    @property
    def bucket(self) -> str:
        return streams_bucket(self.streams)


def streams_bucket(streams: float) -> str:
    """The concurrency a rate is recorded and compared at: the nearest power of two (1, 2, 4, ...)."""
    b = 1
    while b * 1.5 < streams:
        b *= 2
    return str(b)


def decode_under_load(url: str, window_s: float = LOAD_WINDOW_S, min_requests: int = LOAD_MIN_REQUESTS) -> Optional[LoadedDecode]:
    """The engine's own per-request decode timings over a window of at least LOAD_MIN_S that ends
    when `min_requests` have finished decoding (or at `window_s`); None when none did or the engine
    does not say."""
    import httpx

    from sparkctl.facts.metrics import parse_page

    def page():
        return parse_page(httpclient.get(f"{url}/metrics", timeout=5, trust_env=False).text)

    def finished(p) -> tuple[float, float, float]:
        return (
            p.total("vllm:request_generation_tokens_count") or 0.0,
            p.total("vllm:request_generation_tokens_sum") or 0.0,
            p.total("vllm:request_decode_time_seconds_sum") or 0.0,
        )

    try:
        first = finished(page())
        running: list[float] = []
        start = time.monotonic()
        end = start + window_s
        while True:
            time.sleep(LOAD_SAMPLE_S)
            p = page()
            running.append(p.total("vllm:num_requests_running") or 0.0)
            last = finished(p)
            now = time.monotonic()
            if (last[0] - first[0] >= min_requests and now - start >= min(LOAD_MIN_S, window_s)) or now >= end:
                break
    except (httpx.HTTPError, ValueError):
        return None
    n, tokens, seconds = (b - a for a, b in zip(first, last))
    if n < 1 or seconds <= 0 or tokens <= n:
        return None
    return LoadedDecode(rate=(tokens - n) / seconds, requests=int(n), streams=sum(running) / len(running))


USERS_LOOK_S = (0.0, 0.25, 0.25)  # pauses before each look: a user between two requests is still a user


def users_at(url: str) -> Optional[int]:
    """The most requests the engine had in flight over three looks a quarter second apart: one look can
    fall in the moment every user is between two of their requests (a loaded CI machine met it)."""
    import time

    seen: Optional[int] = None
    for pause in USERS_LOOK_S:
        time.sleep(pause)
        n = others_in_flight(url)
        seen = n if seen is None else max(seen, n or 0)
    return seen


def others_in_flight(url: str) -> Optional[int]:
    """Requests running + waiting at the engine (its /metrics), None when it does not say."""
    seen = in_flight(url)
    return None if seen is None else sum(seen)


def in_flight(url: str) -> Optional[tuple[int, int]]:
    """(running, waiting) at the engine (its /metrics), None when it does not say."""
    import httpx

    from sparkctl.facts.metrics import parse_page

    try:
        page = parse_page(httpclient.get(f"{url}/metrics", timeout=5, trust_env=False).text)
    except (httpx.HTTPError, ValueError):
        return None
    running, waiting = page.total("vllm:num_requests_running"), page.total("vllm:num_requests_waiting")
    return None if running is None and waiting is None else (int(running or 0), int(waiting or 0))


def measure_decode(url: str, model: str, tries: int = 2) -> Optional[float]:
    """Decode tok/s of one streamed completion (best of `tries`), None if none succeeded."""
    from sparkctl.runtime.openai_client import Endpoint

    async def run() -> list:
        from sparkctl import httpclient

        ep = Endpoint(url, model, api_key=httpclient.key_for(url + "/"), timeout_s=600)
        body = ep.chat_body(PROMPT, DECODE_TOKENS, temperature=0.0, thinking=False, ignore_eos=True)
        async with ep.client() as client:
            return [await ep.chat(client, body) for _ in range(tries)]

    from sparkctl import interrupts

    rates = [m.decode_throughput for m in interrupts.run_async(run())]
    rates = [r for r in rates if r]
    return max(rates) if rates else None


SLOW_FIX = (
    "a silent kernel fallback (e.g. Marlin instead of the inventory's MoE backend): check "
    "`sparkctl doctor --only runtime`; the previous config is restored"
)


class ThroughputStep(Step):
    name = "throughput"
    facts = frozenset({"applied"})

    def hosts(self, inv: Inventory) -> list[str]:
        return inv.hosts_with_role("head")

    def plan_host(self, ctx: RunContext, host: str) -> Plan:
        ratio = ctx.options.min_throughput_ratio
        if "engine" not in restarting(ctx)[0]:
            return self.noop(host, "the engine did not restart: its recorded decode rate stands")
        applied = ctx.facts[host].applied
        baseline = applied.decode_tokens_per_s if applied is not None else None
        baselines = applied.decode_by_streams if applied is not None else {}
        if ratio and baseline:
            what = f"measure decode tok/s; at least {ratio:g} x the last recorded {baseline:.1f} tok/s"
        else:
            what = "measure decode tok/s (the next reload's baseline)"
        return self.changes(host, [Change("measure", what, {"ratio": ratio, "baseline": baseline, "baselines": baselines})])

    def apply(self, ctx: RunContext, plan: Plan) -> str:
        from sparkctl.runtime import health

        op = plan.changes[0].data
        url = health.base_url(ctx.inventory)
        ctx.progress(plan.host, self.name, f"measuring decode ({DECODE_TOKENS} tokens)")
        ratio, baseline = op.get("ratio"), op.get("baseline")
        kept = (f"the recorded {baseline:.1f} tok/s stands" if baseline else "no baseline recorded") + (
            ", the throughput ratio not judged" if ratio else ""
        )
        before = users_at(url)
        if before:
            # users already at the engine: the step's own request would wait its turn behind theirs
            # (a minute behind 48 long ones) and measure their load; the engine's timings of theirs are judged
            return self._under_load(ctx, plan, url, before, ratio, {"1": baseline} if baseline else {}, op.get("baselines"))
        rate = measure_decode(url, ctx.inventory.runtime.served_model_name)
        if rate is None:
            raise HostError(
                f"{plan.host}: the decode measurement failed (no streamed completion)",
                fix="run `sparkctl doctor --only runtime` and read the head's log",
            )
        running, waiting = in_flight(url) or (0, 0)
        if running + waiting:  # users came while it ran
            return (
                f"decode {rate:.1f} tok/s under load ({running + waiting} other request(s) at the engine: {running} running, "
                f"{waiting} waiting): not a baseline, {kept}"
            )
        ctx.outputs.decode_tokens_per_s = round(rate, 1)
        if ratio and baseline and rate < ratio * baseline:
            raise HostError(
                f"{plan.host}: decode {rate:.1f} tok/s is {rate / baseline:.2f} x the last recorded {baseline:.1f} tok/s "
                f"(below --min-throughput-ratio {ratio:g}){self._kernel_said(ctx, plan.host)}",
                fix=SLOW_FIX,
            )
        ctx.outputs.decode_by_streams = {"1": round(rate, 1)}
        vs = f" ({rate / baseline:.2f} x the last recorded {baseline:.1f})" if baseline else ""
        return f"decode {rate:.1f} tok/s{vs}"

    def _under_load(self, ctx: RunContext, plan: Plan, url: str, before: int, ratio, idle: dict, recorded: Optional[dict]) -> str:
        """Judge the engine's own timings of the users' requests against the rate recorded at their concurrency."""
        m = decode_under_load(url)
        if m is None:
            judged = ", the throughput ratio not judged" if ratio else ""
            return (
                f"decode not measured under load ({before} other request(s) at the engine): none finished decoding "
                f"within {LOAD_WINDOW_S:g} s{judged}"
            )
        streams = m.bucket
        base = {**idle, **(recorded or {})}.get(streams)
        said = (
            f"decode {m.rate:.1f} tok/s per request under load (the engine's own timings of {m.requests} user "
            f"request(s) at ~{m.streams:.1f} streams)"
        )
        if ratio and base and m.rate < ratio * base:
            raise HostError(
                f"{plan.host}: {said} is {m.rate / base:.2f} x the {base:.1f} tok/s recorded at {streams} stream(s) "
                f"(below --min-throughput-ratio {ratio:g}){self._kernel_said(ctx, plan.host)}",
                fix=SLOW_FIX,
            )
        ctx.outputs.decode_by_streams = {streams: round(m.rate, 1)}
        if base:
            return f"{said}: {m.rate / base:.2f} x the {base:.1f} recorded at {streams} stream(s)"
        judged = ", the throughput ratio not judged" if ratio else ""
        return f"{said}: none recorded at {streams} stream(s) yet, recorded as that baseline{judged}"

    def _kernel_said(self, ctx: RunContext, host: str) -> str:
        """What the engine's log says about its MoE kernel (the Marlin fallback), for the error."""
        try:
            logs = ctx.refresh(host, {"containers", "logs"}).logs.values()
        except SparkctlError as e:  # the slow decode is the finding; the log only explains it
            return f"; the engine's log could not be read ({e.message})"
        backends = sorted({lf.moe_backend for lf in logs if lf.moe_backend})
        marlin = any(lf.marlin for lf in logs)
        return (f"; the log: MoE backend {', '.join(backends)}" if backends else "") + (
            " (vLLM warned: weight-only FP4 on the Marlin kernel)" if marlin else ""
        )
