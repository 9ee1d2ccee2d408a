"""The four parts of the protocol, each an object that runs itself and knows how many requests it sends.

A part's `requests` counts only its own measured requests; what parts share is declared, and
counted once per run by the runner: the long-prompt fillers it needs calibrated (two requests per
filler kind) and whether it uses the fixed-overhead samples (short prompts on an idle server).
So the progress bar's total is derived from the parts that run, never kept by hand.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, ClassVar, Optional

from sparkctl.bench import stats
from sparkctl.bench.longprompt import Kind
from sparkctl.bench.protocol import SHORT_PROMPT, WORKLOADS, BenchOptions
from sparkctl.bench.result import (
    ContextPoint,
    MixedResult,
    PrefillResult,
    cell_result,
    repeat_result,
    request_record,
    spec_fields,
    to_ms,
)

if TYPE_CHECKING:
    from sparkctl.bench.runner import BenchRunner

SHORT_MAX_TOKENS = 16  # the short request of the overhead and mixed-traffic tests
PREFILL_QUESTION = "Summarize the text above in one sentence."


class Part:
    name: ClassVar[str]
    uses_overhead: ClassVar[bool] = False  # needs the fixed-overhead samples (measured once per run)

    def __init__(self, options: BenchOptions):
        self.options = options

    @property
    def fillers(self) -> frozenset[Kind]:
        """The long-prompt filler kinds it needs calibrated (once per run each)."""
        return frozenset()

    def requests(self, bench: "BenchRunner") -> int:
        """Its own measured requests (not the shared calibration and overhead ones), once the
        runner knows the server (long prompts are capped by its max_model_len)."""
        raise NotImplementedError

    async def run(self, bench: "BenchRunner") -> None:
        raise NotImplementedError


class Throughput(Part):
    """Each workload at each stream count, `repeats` times: the seed's table."""

    name = "throughput"

    def requests(self, bench: "BenchRunner") -> int:
        o = self.options
        return len(o.workloads) * sum(o.streams) * o.repeats

    async def run(self, bench: "BenchRunner") -> None:
        o = self.options
        for name in o.workloads:
            workload = WORKLOADS[name]
            for streams in o.streams:
                repeats, measured = [], []
                # Nothing else is sent between repeats: one repeat's "after" is the next one's "before",
                # and the cell's acceptance runs from before its first repeat to after its latest.
                first = before = await bench.spec_snapshot()
                for rep in range(o.repeats):
                    bench.progress.describe(f"{name} x{streams} stream(s), repeat {rep + 1}/{o.repeats}")
                    t0 = time.perf_counter()
                    ms = await asyncio.gather(*(bench.send(workload.prompt(i), o.max_tokens, i) for i in range(streams)))
                    t1 = time.perf_counter()
                    after = await bench.spec_snapshot()
                    repeats.append(repeat_result(rep, streams, list(ms), t0, t1, _delta(before, after)))
                    measured.extend(ms)
                    bench.put_cell(cell_result(name, streams, repeats, measured, _delta(first, after)))
                    before = after


class ContextSweep(Part):
    """The context workload at growing prompt sizes: acceptance against context (seed 002)."""

    name = "context"

    @property
    def fillers(self) -> frozenset[Kind]:
        return frozenset({WORKLOADS[self.options.context_workload].filler})

    def sizes(self, bench: "BenchRunner") -> list[int]:
        """The prompt sizes it sends: capped by max_model_len, so two may become one."""
        o = self.options
        cap = bench.cap(o.max_tokens)
        return sorted({s if cap is None else min(s, cap) for s in o.context_sizes})

    def requests(self, bench: "BenchRunner") -> int:
        return len(self.sizes(bench)) * self.options.context_repeats

    async def run(self, bench: "BenchRunner") -> None:
        o = self.options
        workload = WORKLOADS[o.context_workload]
        question = workload.prompt(0)
        for s in o.context_sizes:
            bench.capped(s, o.max_tokens, "context sweep")  # notes each cap applied
        for size in self.sizes(bench):
            bench.progress.describe(f"context sweep: {o.context_workload} at {size} prompt tokens")
            prompts = [await bench.long_prompt(workload.filler, size, question) for _ in range(o.context_repeats)]
            before = await bench.spec_snapshot()
            t0 = time.perf_counter()
            ms = [await bench.send(p, o.max_tokens) for p in prompts]
            delta = _delta(before, await bench.spec_snapshot())
            ok = [m for m in ms if m.ok]
            bench.result.context.append(
                ContextPoint(
                    workload=o.context_workload,
                    target_prompt_tokens=size,
                    prompt_tokens=_int(stats.median(m.prompt_tokens for m in ok)),
                    median_ttft_ms=to_ms(stats.median(m.ttft for m in ok)),
                    output_throughput=stats.median(m.output_throughput for m in ok),
                    decode_throughput=stats.median(m.decode_throughput for m in ok),
                    requests=[request_record(m, t0) for m in ms],
                    **spec_fields(delta),
                )
            )


class Prefill(Part):
    """One long cold prompt generating one token: TTFT raw and less the fixed overhead."""

    name = "prefill"
    uses_overhead = True
    fillers = frozenset({"prose"})

    def requests(self, bench: "BenchRunner") -> int:
        return 1

    async def run(self, bench: "BenchRunner") -> None:
        target = bench.capped(self.options.prefill_tokens, 1, "prefill")
        res = PrefillResult(target_prompt_tokens=target)
        bench.result.prefill = res
        short = await bench.short_alone()
        samples = [m.ttft for m in short if m.ok and m.ttft is not None]
        res.overhead_samples_ms = [s * 1000.0 for s in samples]
        overhead = stats.median(samples)
        res.overhead_ms = to_ms(overhead)
        prompt = await bench.long_prompt("prose", target, PREFILL_QUESTION)
        bench.progress.describe(f"prefill: one cold prompt of ~{target} tokens")
        t0 = time.perf_counter()
        m = await bench.send(prompt, 1)
        res.requests = [request_record(x, t0) for x in short] + [request_record(m, t0)]
        res.prompt_tokens = m.prompt_tokens
        if not m.ok or m.ttft is None:
            bench.note(f"prefill request failed: {m.error}")
            return
        res.ttft_ms = to_ms(m.ttft)
        if m.prompt_tokens:
            res.prefill_throughput = m.prompt_tokens / m.ttft
        if overhead is not None:
            res.ttft_adjusted_ms = to_ms(m.ttft - overhead)
            if m.prompt_tokens and m.ttft > overhead:
                res.prefill_throughput_adjusted = m.prompt_tokens / (m.ttft - overhead)


class Mixed(Part):
    """A short request sent while a long cold prompt prefills: how long it waits (seed 000)."""

    name = "mixed"
    uses_overhead = True
    fillers = frozenset({"prose"})

    def requests(self, bench: "BenchRunner") -> int:
        return 2  # the long prompt and the short request behind it

    async def run(self, bench: "BenchRunner") -> None:
        o = self.options
        target = bench.capped(o.mixed_tokens or o.prefill_tokens, 1, "mixed traffic")
        res = MixedResult(long_target_prompt_tokens=target)
        bench.result.mixed = res
        alone = [m for m in await bench.short_alone() if m.ok]
        res.short_ttft_alone_ms = to_ms(stats.median(m.ttft for m in alone))
        prompt = await bench.long_prompt("prose", target, PREFILL_QUESTION)
        delay = o.mixed_delay_s
        if delay is None:
            prefill = bench.result.prefill
            delay = prefill.ttft_ms / 10_000.0 if prefill and prefill.ttft_ms else 0.5
        bench.progress.describe(f"mixed traffic: a short request {delay:.2f} s behind ~{target} cold tokens")
        baseline = await bench.running()
        t0 = time.perf_counter()
        long_task = asyncio.create_task(bench.send(prompt, 1, stream=0))
        # Wait until the server runs the long request (a real server spends a while reading and
        # tokenizing a long prompt; a short request sent before that would simply go first).
        admitted = await _wait_admitted(bench, baseline, long_task) if baseline is not None else None
        remaining = delay - (time.perf_counter() - t0)
        if remaining > 0:
            await asyncio.sleep(remaining)
        short = await bench.send(SHORT_PROMPT, SHORT_MAX_TOKENS, stream=1)
        long = await long_task
        res.requests = [request_record(long, t0), request_record(short, t0)]
        res.long_prompt_tokens = long.prompt_tokens
        res.long_ttft_ms = to_ms(long.ttft)
        res.short_prompt_tokens = short.prompt_tokens
        res.short_ttft_ms = to_ms(short.ttft)
        res.short_sent_after_ms = (short.sent - long.sent) * 1000.0
        if admitted is not None:
            res.long_admitted_after_ms = (admitted - long.sent) * 1000.0
        if res.short_ttft_ms is not None and res.short_ttft_alone_ms is not None:
            res.short_wait_ms = res.short_ttft_ms - res.short_ttft_alone_ms
        if long.first_token is not None:
            res.short_sent_during_prefill = short.sent < long.first_token
            if short.first_token is not None:
                res.short_first_token_before_long = short.first_token < long.first_token
            if not res.short_sent_during_prefill:
                bench.note(
                    "mixed traffic: the long prompt's prefill ended before the short request left; "
                    "use a larger --mixed-tokens or a smaller --mixed-delay"
                )
        for m in (long, short):
            if m.error:
                bench.note(f"mixed traffic: a request failed: {m.error}")


async def _wait_admitted(bench: "BenchRunner", baseline: float, long_task: asyncio.Task) -> Optional[float]:
    """perf_counter() when /metrics first shows one more request running, None if it never does."""
    while not long_task.done():
        running = await bench.running()
        if running is None:
            return None
        if running > baseline:
            return time.perf_counter()
        await asyncio.sleep(0.01)
    return None


PARTS: dict[str, type[Part]] = {p.name: p for p in (Throughput, ContextSweep, Prefill, Mixed)}


def parts_of(options: BenchOptions) -> list[Part]:
    """The parts the options select, in protocol order."""
    return [cls(options) for name, cls in PARTS.items() if name in options.parts]


def _delta(before, after):
    return after - before if (before is not None and after is not None) else None


def _int(x: Optional[float]) -> Optional[int]:
    return None if x is None else int(round(x))
