"""Throughput step: after the engine (re)starts, one short decode measurement, compared with the
last recorded one when the run asks for it (`--min-throughput-ratio`).

A runtime that silently fell back to slower kernels serves "fine" at half speed: seed 002's
recipe loses half its throughput when the MoE backend falls back to Marlin (W4A16). /health and a
smoke completion cannot see that; a decode measurement can. The measurement is one streamed
completion (temperature 0, `ignore_eos`, DECODE_TOKENS tokens; the faster of two tries), its decode
rate (tokens after the first / time after the first) becomes the next run's baseline.

Only a measurement on an otherwise idle engine is a baseline: with other requests running or
waiting (users back through the gateway the moment the engine serves, or a reload under load) the
rate says how busy the engine is, not how fast its kernels are. Then the recorded baseline stands,
the ratio is not judged (it would roll back a healthy engine), and the result says so; the MoE
backend check (doctor's runtime.moe_backend) still reads the kernel from the log. Requests already
at the engine when the step starts: it does not measure at all (its request would queue behind
theirs for nothing).
"""

from __future__ import annotations

from typing import Optional

from sparkctl import httpclient
from sparkctl.errors import HostError
from sparkctl.inventory.models import Inventory
from sparkctl.steps.base import Change, Plan, RunContext, Step
from sparkctl.steps.runtime import restarting

DECODE_TOKENS = 256
PROMPT = "Count from 1 to 200, one number per line."


def others_in_flight(url: str) -> Optional[int]:
    """Requests running + waiting at the engine (its /metrics), None when it does not say."""
    import httpx

    from sparkctl.runtime.metrics import parse_page

    try:
        page = parse_page(httpclient.get(f"{url}/metrics", timeout=5, trust_env=False).text)
    except (httpx.HTTPError, ValueError):
        return None
    running, waiting = page.total("vllm:num_requests_running"), page.total("vllm:num_requests_waiting")
    return None if running is None and waiting is None else int((running or 0) + (waiting or 0))


def measure_decode(url: str, model: str, tries: int = 2) -> Optional[float]:
    """Decode tok/s of one streamed completion (best of `tries`), None if none succeeded."""
    from sparkctl.bench.client import Endpoint

    async def run() -> list:
        ep = Endpoint(url, model, timeout_s=600)
        body = ep.chat_body(PROMPT, DECODE_TOKENS, temperature=0.0, thinking=False, ignore_eos=True)
        async with ep.client() as client:
            return [await ep.chat(client, body) for _ in range(tries)]

    import asyncio  # only when measuring: a no-op run never does

    rates = [m.decode_throughput for m in asyncio.run(run())]
    rates = [r for r in rates if r]
    return max(rates) if rates else None


class ThroughputStep(Step):
    name = "throughput"
    facts = frozenset({"applied"})

    def hosts(self, inv: Inventory) -> list[str]:
        return inv.hosts_with_role("head")

    def plan_host(self, ctx: RunContext, host: str) -> Plan:
        ratio = ctx.options.get("min_throughput_ratio")
        if "engine" not in restarting(ctx)[0]:
            return self.noop(host, "the engine did not restart: its recorded decode rate stands")
        baseline = (ctx.facts[host].applied or {}).get("decode_tokens_per_s")
        if ratio and baseline:
            what = f"measure decode tok/s; at least {ratio:g} x the last recorded {baseline:.1f} tok/s"
        else:
            what = "measure decode tok/s (the next reload's baseline)"
        return self.changes(host, [Change("measure", what, {"ratio": ratio, "baseline": baseline})])

    def apply(self, ctx: RunContext, plan: Plan) -> str:
        from sparkctl.runtime import health

        op = plan.changes[0].data
        url = health.base_url(ctx.inventory)
        ctx.progress(plan.host, self.name, f"measuring decode ({DECODE_TOKENS} tokens)")
        ratio, baseline = op.get("ratio"), op.get("baseline")
        kept = (f"the recorded {baseline:.1f} tok/s stands" if baseline else "no baseline recorded") + (
            ", the throughput ratio not judged" if ratio else ""
        )
        before = others_in_flight(url)
        if before:
            # users already at the engine: the rate could not be a baseline nor judged, and the
            # measurement's request would wait its turn behind theirs (a minute behind 48 long ones)
            return f"decode not measured under load ({before} other request(s) at the engine): not a baseline, {kept}"
        rate = measure_decode(url, ctx.inventory.runtime.served_model_name)
        if rate is None:
            raise HostError(f"{plan.host}: the decode measurement failed (no streamed completion)",
                            fix="run `sparkctl doctor --only runtime` and read the head's log")  # fmt: skip
        busy = others_in_flight(url) or 0
        if busy:  # users came while it ran
            return f"decode {rate:.1f} tok/s under load ({busy} other request(s) at the engine): not a baseline, {kept}"
        ctx.outputs.decode_tokens_per_s = round(rate, 1)
        if ratio and baseline and rate < ratio * baseline:
            logs = ctx.refresh(plan.host, {"containers", "logs"}).logs.values()
            backends = sorted({lf.moe_backend for lf in logs if lf.moe_backend})
            marlin = any(lf.marlin for lf in logs)
            seen = (f"; the log: MoE backend {', '.join(backends)}" if backends else "") + (
                " (vLLM warned: weight-only FP4 on the Marlin kernel)" if marlin else ""
            )
            raise HostError(
                f"{plan.host}: decode {rate:.1f} tok/s is {rate / baseline:.2f} x the last recorded {baseline:.1f} tok/s "
                f"(below --min-throughput-ratio {ratio:g}){seen}",
                fix="a silent kernel fallback (e.g. Marlin instead of the inventory's MoE backend): check "
                "`sparkctl doctor --only runtime`; the previous config is restored",
            )
        vs = f" ({rate / baseline:.2f} x the last recorded {baseline:.1f})" if baseline else ""
        return f"decode {rate:.1f} tok/s{vs}"
