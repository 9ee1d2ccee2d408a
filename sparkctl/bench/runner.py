"""Runs the protocol against one endpoint and fills a BenchResult as it goes.

The result is updated after every repeat and every measurement, so when the run is interrupted
(Ctrl-C cancels the event loop) `runner.result` already holds everything measured until then.
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import datetime, timezone
from typing import Optional, Protocol

from sparkctl.bench import stats
from sparkctl.bench.client import Endpoint, Measured
from sparkctl.bench.longprompt import CALIBRATION_LINES, Calibration, Kind, filler, tagged
from sparkctl.bench.metrics import SpecCounters, parse_running, parse_spec_counters
from sparkctl.bench.protocol import SHORT_PROMPT, WORKLOADS, BenchOptions
from sparkctl.bench.result import (
    BenchResult,
    ContextPoint,
    MixedResult,
    PrefillResult,
    ServerInfo,
    cell_result,
    repeat_result,
    request_record,
    spec_fields,
)
from sparkctl.errors import HostError, InputError

SHORT_MAX_TOKENS = 16  # the short request of the overhead and mixed-traffic tests
PREFILL_QUESTION = "Summarize the text above in one sentence."


class ProgressSink(Protocol):
    def start(self, total: int) -> None: ...
    def advance(self, description: Optional[str] = None) -> None: ...
    def describe(self, description: str) -> None: ...


class NullProgress:
    def start(self, total: int) -> None:
        pass

    def advance(self, description: Optional[str] = None) -> None:
        pass

    def describe(self, description: str) -> None:
        pass


class BenchRunner:
    def __init__(self, endpoint: Endpoint, options: BenchOptions, progress: Optional[ProgressSink] = None):
        from sparkctl import __version__

        self.endpoint = endpoint
        self.options = options
        self.progress = progress or NullProgress()
        self.result = BenchResult(
            sparkctl_version=__version__,
            started_at=datetime.now(timezone.utc),
            endpoint=endpoint.url,
            model=endpoint.model or "",
            options=options,
        )
        self._t_start = time.perf_counter()
        self._client = None
        self._probe = None
        self._calibrations: dict[Kind, Calibration] = {}
        self._overhead: list[Measured] = []
        self._all: list[tuple[int, Measured]] = []  # every measured (max_tokens, request), for the notes
        self._metrics_seen = False

    # ---- the run ----------------------------------------------------------------------------

    async def run(self) -> BenchResult:
        # Scrapes (/metrics, /v1/models, /version) get their own connections, so a measured request
        # never reuses a keep-alive connection right after a GET (seen to add ~40 ms TTFT on some servers).
        async with self.endpoint.client() as client, self.endpoint.client() as probe:
            self._client, self._probe = client, probe
            await self._discover()
            self.progress.start(self.planned_requests())
            await self._warmup()
            parts = self.options.parts
            if "throughput" in parts:
                await self._throughput()
            if "context" in parts:
                await self._context()
            if "prefill" in parts:
                await self._prefill()
            if "mixed" in parts:
                await self._mixed()
        self.finish()
        return self.result

    def finish(self, interrupted: bool = False) -> BenchResult:
        """Stamp the end of the run (also after Ctrl-C) and add the notes the raw data calls for."""
        r = self.result
        r.finished_at = datetime.now(timezone.utc)
        r.duration = time.perf_counter() - self._t_start
        if interrupted:
            r.interrupted = True
            self._note("interrupted (Ctrl-C): the file holds what was measured until then")
        self._note_request_quality()
        return r

    @property
    def failed_requests(self) -> int:
        return sum(1 for _, m in self._all if m.error)

    def planned_requests(self) -> int:
        o = self.options
        n = o.warmup * (max(o.streams) if "throughput" in o.parts else 2)
        if "throughput" in o.parts:
            n += len(o.workloads) * sum(o.streams) * o.repeats
        kinds = set()
        if "context" in o.parts:
            n += len(o.context_sizes) * o.context_repeats
            kinds.add(WORKLOADS[o.context_workload].filler)
        if "prefill" in o.parts:
            n += o.overhead_samples + 1
            kinds.add("prose")
        if "mixed" in o.parts:
            n += 2 + (0 if "prefill" in o.parts else o.overhead_samples)
            kinds.add("prose")
        return n + 2 * len(kinds)

    # ---- discovery --------------------------------------------------------------------------

    async def _discover(self) -> None:
        self.progress.describe("asking the endpoint what it serves")
        models = await self.endpoint.models(self._probe)
        ids = [str(m.get("id")) for m in models if m.get("id")]
        if self.endpoint.model is None:
            if len(ids) != 1:
                raise InputError(
                    f"{self.endpoint.url} serves {len(ids)} models ({', '.join(ids) or 'none'}); which one?",
                    fix="pass --model NAME",
                )
            self.endpoint.model = ids[0]
        if self.endpoint.model not in ids:
            raise InputError(
                f"{self.endpoint.url} does not serve {self.endpoint.model!r} (it serves: {', '.join(ids) or 'nothing'})",
                fix=f"pass --model {ids[0]}" if ids else "check the runtime and --endpoint",
            )
        entry = next(m for m in models if str(m.get("id")) == self.endpoint.model)
        max_len = entry.get("max_model_len")
        version = None
        text = await self.endpoint.optional_text(self._probe, "/version")
        if text:
            try:
                version = str(json.loads(text).get("version"))
            except (ValueError, AttributeError):
                version = None
        counters = await self._spec_snapshot(first=True)
        self.result.model = self.endpoint.model
        self.result.server = ServerInfo(
            models=ids,
            max_model_len=int(max_len) if isinstance(max_len, (int, float)) else None,
            version=version,
            metrics=self._metrics_seen,
            speculative=(counters is not None) if self._metrics_seen else None,
        )
        if not self._metrics_seen:
            self._note("the endpoint has no /metrics: speculative acceptance is not measured")
        elif counters is None:
            self._note("the endpoint exports no speculative-decoding counters (speculative decoding off?)")
        else:
            self._note(
                "acceptance comes from /metrics deltas: other traffic on the server during the run blurs it"
            )

    async def _spec_snapshot(self, first: bool = False) -> Optional[SpecCounters]:
        text = await self.endpoint.optional_text(self._probe, "/metrics")
        if text is None:
            return None
        if first:
            self._metrics_seen = True
        try:
            return parse_spec_counters(text, self.endpoint.model)
        except ValueError:
            return None

    # ---- requests ---------------------------------------------------------------------------

    async def _send(self, prompt: str, max_tokens: int, stream: int = 0) -> Measured:
        o = self.options
        body = self.endpoint.chat_body(prompt, max_tokens, o.temperature, o.thinking, o.ignore_eos)
        m = await self.endpoint.chat(self._client, body, stream)
        self._all.append((max_tokens, m))
        self.progress.advance()
        return m

    async def _warmup(self) -> None:
        if not self.options.warmup:
            return
        self.progress.describe("warm-up")
        width = max(self.options.streams) if "throughput" in self.options.parts else 2
        for _ in range(self.options.warmup):
            # As many at once as the widest cell: its connections are open before anything is timed.
            ms = await asyncio.gather(*(self._send(SHORT_PROMPT, SHORT_MAX_TOKENS, i) for i in range(width)))
            m = next((x for x in ms if x.error), ms[0])
            if m.error:
                fix = "check --endpoint and --model"
                if "HTTP 400" in m.error and self.options.ignore_eos:
                    fix = "if the server rejects ignore_eos/min_tokens/chat_template_kwargs, try --no-ignore-eos"
                raise HostError(f"the warm-up request failed: {m.error}", fix=fix)
        self._all = []  # warm-up requests are not measurements

    # ---- throughput cells -------------------------------------------------------------------

    async def _throughput(self) -> None:
        o = self.options
        for name in o.workloads:
            workload = WORKLOADS[name]
            for streams in o.streams:
                repeats, measured, total = [], [], None
                for rep in range(o.repeats):
                    self.progress.describe(f"{name} x{streams} stream(s), repeat {rep + 1}/{o.repeats}")
                    before = await self._spec_snapshot()
                    t0 = time.perf_counter()
                    ms = await asyncio.gather(
                        *(self._send(workload.prompt(i), o.max_tokens, i) for i in range(streams))
                    )
                    t1 = time.perf_counter()
                    after = await self._spec_snapshot()
                    delta = after - before if (before is not None and after is not None) else None
                    total = delta if total is None else (total + delta if delta is not None else total)
                    repeats.append(repeat_result(rep, streams, list(ms), t0, t1, delta))
                    measured.extend(ms)
                    self._put_cell(cell_result(name, streams, repeats, measured, total))

    def _put_cell(self, cell) -> None:
        cells = self.result.throughput
        for i, c in enumerate(cells):
            if c.workload == cell.workload and c.streams == cell.streams:
                cells[i] = cell
                return
        cells.append(cell)

    # ---- long prompts -----------------------------------------------------------------------

    def _cap(self, max_tokens: int) -> Optional[int]:
        """Largest prompt that fits max_model_len with room for the output (2% margin for calibration)."""
        limit = self.result.server.max_model_len
        if limit is None:
            return None
        return max(1, limit - max_tokens - max(64, limit // 50))

    def _capped(self, target: int, max_tokens: int, what: str) -> int:
        cap = self._cap(max_tokens)
        if cap is not None and target > cap:
            self._note(f"{what}: {target} prompt tokens capped to {cap} (max_model_len {self.result.server.max_model_len})")
            return cap
        return target

    async def _calibration(self, kind: Kind, question: str) -> Calibration:
        if kind not in self._calibrations:
            self.progress.describe(f"calibrating {kind} filler against the server's token counts")
            base = await self._send(tagged("", question), 1)
            probe = await self._send(tagged(filler(kind, CALIBRATION_LINES, self.options.seed), question), 1)
            if base.prompt_tokens is None or probe.prompt_tokens is None:
                self._note("the server reports no usage.prompt_tokens: long prompts sized at ~12 tokens a line")
                self._calibrations[kind] = Calibration(50, 12.0)
            else:
                self._calibrations[kind] = Calibration.from_probes(base.prompt_tokens, probe.prompt_tokens)
        return self._calibrations[kind]

    async def _long_prompt(self, kind: Kind, target: int, question: str) -> str:
        cal = await self._calibration(kind, question)
        return tagged(filler(kind, cal.lines_for(target), self.options.seed), question)

    # ---- context sweep ----------------------------------------------------------------------

    async def _context(self) -> None:
        o = self.options
        workload = WORKLOADS[o.context_workload]
        question = workload.prompt(0)
        sizes = sorted({self._capped(s, o.max_tokens, "context sweep") for s in o.context_sizes})
        for size in sizes:
            self.progress.describe(f"context sweep: {o.context_workload} at {size} prompt tokens")
            prompts = [await self._long_prompt(workload.filler, size, question) for _ in range(o.context_repeats)]
            before = await self._spec_snapshot()
            t0 = time.perf_counter()
            ms = [await self._send(p, o.max_tokens) for p in prompts]
            after = await self._spec_snapshot()
            delta = after - before if (before is not None and after is not None) else None
            ok = [m for m in ms if m.ok]
            self.result.context.append(
                ContextPoint(
                    workload=o.context_workload,
                    target_prompt_tokens=size,
                    prompt_tokens=_int(stats.median(m.prompt_tokens for m in ok)),
                    median_ttft_ms=_ms(stats.median(m.ttft for m in ok)),
                    output_throughput=stats.median(m.output_throughput for m in ok),
                    decode_throughput=stats.median(m.decode_throughput for m in ok),
                    requests=[request_record(m, t0) for m in ms],
                    **spec_fields(delta),
                )
            )

    # ---- prefill ----------------------------------------------------------------------------

    async def _short_alone(self) -> list[Measured]:
        """TTFT of a short prompt on an idle server: the fixed overhead (measured once per run)."""
        if not self._overhead:
            self.progress.describe("fixed overhead: short prompts on an idle server")
            for _ in range(self.options.overhead_samples):
                self._overhead.append(await self._send(SHORT_PROMPT, SHORT_MAX_TOKENS))
        return self._overhead

    async def _prefill(self) -> None:
        o = self.options
        target = self._capped(o.prefill_tokens, 1, "prefill")
        res = PrefillResult(target_prompt_tokens=target)
        self.result.prefill = res
        short = await self._short_alone()
        samples = [m.ttft for m in short if m.ok]
        res.overhead_samples_ms = [s * 1000.0 for s in samples]
        overhead = stats.median(samples)
        res.overhead_ms = _ms(overhead)
        prompt = await self._long_prompt("prose", target, PREFILL_QUESTION)
        self.progress.describe(f"prefill: one cold prompt of ~{target} tokens")
        t0 = time.perf_counter()
        m = await self._send(prompt, 1)
        res.requests = [request_record(x, t0) for x in short] + [request_record(m, t0)]
        res.prompt_tokens = m.prompt_tokens
        if not m.ok:
            self._note(f"prefill request failed: {m.error}")
            return
        res.ttft_ms = _ms(m.ttft)
        if m.prompt_tokens:
            res.prefill_throughput = m.prompt_tokens / m.ttft
        if overhead is not None:
            res.ttft_adjusted_ms = _ms(m.ttft - overhead)
            if m.prompt_tokens and m.ttft > overhead:
                res.prefill_throughput_adjusted = m.prompt_tokens / (m.ttft - overhead)

    # ---- mixed traffic ----------------------------------------------------------------------

    async def _mixed(self) -> None:
        o = self.options
        target = self._capped(o.mixed_tokens or o.prefill_tokens, 1, "mixed traffic")
        res = MixedResult(long_target_prompt_tokens=target)
        self.result.mixed = res
        alone = [m for m in await self._short_alone() if m.ok]
        res.short_ttft_alone_ms = _ms(stats.median(m.ttft for m in alone))
        prompt = await self._long_prompt("prose", target, PREFILL_QUESTION)
        delay = o.mixed_delay_s
        if delay is None:
            prefill = self.result.prefill
            delay = prefill.ttft_ms / 10_000.0 if prefill and prefill.ttft_ms else 0.5
        self.progress.describe(f"mixed traffic: a short request {delay:.2f} s behind ~{target} cold tokens")
        baseline = await self._running()
        t0 = time.perf_counter()
        long_task = asyncio.create_task(self._send(prompt, 1, stream=0))
        # Wait until the server runs the long request (a real server spends a while reading and
        # tokenizing a long prompt; a short request sent before that would simply go first).
        admitted = await self._wait_admitted(baseline, long_task) if baseline is not None else None
        remaining = delay - (time.perf_counter() - t0)
        if remaining > 0:
            await asyncio.sleep(remaining)
        short = await self._send(SHORT_PROMPT, SHORT_MAX_TOKENS, stream=1)
        long = await long_task
        res.requests = [request_record(long, t0), request_record(short, t0)]
        res.long_prompt_tokens = long.prompt_tokens
        res.long_ttft_ms = _ms(long.ttft)
        res.short_prompt_tokens = short.prompt_tokens
        res.short_ttft_ms = _ms(short.ttft)
        res.short_sent_after_ms = (short.sent - long.sent) * 1000.0
        if admitted is not None:
            res.long_admitted_after_ms = (admitted - long.sent) * 1000.0
        if short.ttft is not None and res.short_ttft_alone_ms is not None:
            res.short_wait_ms = res.short_ttft_ms - res.short_ttft_alone_ms
        if long.first_token is not None:
            res.short_sent_during_prefill = short.sent < long.first_token
            if short.first_token is not None:
                res.short_first_token_before_long = short.first_token < long.first_token
            if not res.short_sent_during_prefill:
                self._note(
                    "mixed traffic: the long prompt's prefill ended before the short request left; "
                    "use a larger --mixed-tokens or a smaller --mixed-delay"
                )
        for m in (long, short):
            if m.error:
                self._note(f"mixed traffic: a request failed: {m.error}")

    async def _running(self) -> Optional[float]:
        text = await self.endpoint.optional_text(self._probe, "/metrics")
        if text is None:
            return None
        try:
            return parse_running(text, self.endpoint.model)
        except ValueError:
            return None

    async def _wait_admitted(self, baseline: float, long_task: asyncio.Task) -> Optional[float]:
        """perf_counter() when /metrics first shows one more request running, None if it never does."""
        while not long_task.done():
            running = await self._running()
            if running is None:
                return None
            if running > baseline:
                return time.perf_counter()
            await asyncio.sleep(0.01)
        return None

    # ---- notes ------------------------------------------------------------------------------

    def _note(self, text: str) -> None:
        if text not in self.result.notes:
            self.result.notes.append(text)

    def _note_request_quality(self) -> None:
        done = self._all
        failed = [m for _, m in done if m.error]
        if failed:
            self._note(f"{len(failed)} request(s) failed; first: {failed[0].error}")
        ok = [(n, m) for n, m in done if m.ok]
        if any(m.output_tokens is None for _, m in ok):
            self._note("the server sent no usage in some streams (stream_options.include_usage unsupported?)")
        short = [m for n, m in ok if m.output_tokens is not None and m.output_tokens < n]
        if short:
            self._note(
                f"{len(short)} request(s) generated fewer tokens than asked (the server may ignore "
                "ignore_eos/min_tokens); tok/s still counts what was generated"
            )


def _ms(seconds: Optional[float]) -> Optional[float]:
    return None if seconds is None else seconds * 1000.0


def _int(x: Optional[float]) -> Optional[int]:
    return None if x is None else int(round(x))
