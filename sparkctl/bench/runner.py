"""Runs the protocol against one endpoint and fills a BenchResult as it goes.

The runner discovers the server, warms up, then runs each selected part (parts.py); it holds what
parts share: sending and recording requests, /metrics snapshots, long-prompt calibration, the
fixed-overhead samples, caps and notes.

The result is updated after every repeat and every measurement, so when the run is interrupted
(Ctrl-C cancels the event loop) `runner.result` already holds everything measured until then.
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import datetime, timezone
from typing import Optional

from sparkctl.bench.longprompt import CALIBRATION_LINES, Calibration, Kind, filler, tagged
from sparkctl.bench.parts import SHORT_MAX_TOKENS, Part, parts_of
from sparkctl.bench.protocol import SHORT_PROMPT, BenchOptions
from sparkctl.bench.result import BenchResult, ServerInfo
from sparkctl.errors import HostError, InputError
from sparkctl.facts.metrics import RUNNING, MetricsPage, SpecCounters, parse_page
from sparkctl.runtime.openai_client import Endpoint, Measured


class NullProgress:
    """What the runner tells its progress display (the CLI's shows a bar; this one shows nothing)."""

    def start(self, total: int) -> None:
        pass

    def advance(self) -> None:
        pass

    def describe(self, description: str) -> None:
        pass


class BenchRunner:
    def __init__(self, endpoint: Endpoint, options: BenchOptions, progress: Optional[NullProgress] = None):
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
        self.parts: list[Part] = parts_of(options)

    # ---- the run ----------------------------------------------------------------------------

    async def run(self) -> BenchResult:
        # Scrapes (/metrics, /v1/models, /version) get their own connections, so a measured request
        # never reuses a keep-alive connection right after a GET (seen to add ~40 ms TTFT on some servers).
        async with self.endpoint.client() as client, self.endpoint.client() as probe:
            self._client, self._probe = client, probe
            await self._discover()
            self.progress.start(self.planned_requests())
            await self._warmup()
            for part in self.parts:
                await part.run(self)
        self.finish()
        return self.result

    def finish(self, interrupted: bool = False) -> BenchResult:
        """Stamp the end of the run (also after Ctrl-C) and add the notes the raw data calls for."""
        r = self.result
        r.finished_at = datetime.now(timezone.utc)
        r.duration = time.perf_counter() - self._t_start
        if interrupted:
            r.interrupted = True
            self.note("interrupted (Ctrl-C): the file holds what was measured until then")
        self._note_request_quality()
        return r

    @property
    def failed_requests(self) -> int:
        return sum(1 for _, m in self._all if m.error)

    def planned_requests(self) -> int:
        """Every request the run will send: the warm-up, each part's own, and what parts share
        (one calibration per filler kind, the overhead samples once); known after discovery."""
        o = self.options
        n = o.warmup * self._warmup_width()
        n += sum(part.requests(self) for part in self.parts)
        n += 2 * len(set().union(*(part.fillers for part in self.parts)))
        n += o.overhead_samples if any(part.uses_overhead for part in self.parts) else 0
        return n

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
        text = await self.endpoint.optional_text(self._probe, "/version")
        try:
            version = str(json.loads(text)["version"]) if text else None
        except (TypeError, ValueError, KeyError):  # no /version, or not vLLM's {"version": ...}
            version = None
        page = await self._metrics()
        counters = page.spec if page is not None else None
        self.result.model = self.endpoint.model
        self.result.server = ServerInfo(
            models=ids,
            max_model_len=int(max_len) if isinstance(max_len, (int, float)) else None,
            version=version,
            metrics=page is not None,
            speculative=(counters is not None) if page is not None else None,
        )
        if page is None:
            self.note("the endpoint has no /metrics: speculative acceptance is not measured")
        elif counters is None:
            self.note("the endpoint exports no speculative-decoding counters (speculative decoding off?)")
        else:
            self.note("acceptance comes from /metrics deltas: other traffic on the server during the run blurs it")

    async def _metrics(self) -> Optional[MetricsPage]:
        """The server's /metrics for our model; None when it has none (or not Prometheus text)."""
        text = await self.endpoint.optional_text(self._probe, "/metrics")
        try:
            return None if text is None else parse_page(text, self.endpoint.model)
        except ValueError:
            return None

    async def spec_snapshot(self) -> Optional[SpecCounters]:
        page = await self._metrics()
        return page.spec if page is not None else None

    # ---- requests ---------------------------------------------------------------------------

    async def send(self, prompt: str, max_tokens: int, stream: int = 0) -> Measured:
        o = self.options
        body = self.endpoint.chat_body(prompt, max_tokens, o.temperature, o.thinking, o.ignore_eos)
        m = await self.endpoint.chat(self._client, body, stream)
        self._all.append((max_tokens, m))
        self.progress.advance()
        return m

    def _warmup_width(self) -> int:
        return max(self.options.streams) if "throughput" in self.options.parts else 2

    async def _warmup(self) -> None:
        if not self.options.warmup:
            return
        self.progress.describe("warm-up")
        width = self._warmup_width()
        for _ in range(self.options.warmup):
            # As many at once as the widest cell: its connections are open before anything is timed.
            ms = await asyncio.gather(*(self.send(SHORT_PROMPT, SHORT_MAX_TOKENS, i) for i in range(width)))
            m = next((x for x in ms if x.error), ms[0])
            if m.error:
                fix = "check --endpoint and --model"
                if "HTTP 400" in m.error and self.options.ignore_eos:
                    fix = "if the server rejects ignore_eos/min_tokens/chat_template_kwargs, try --no-ignore-eos"
                raise HostError(f"the warm-up request failed: {m.error}", fix=fix)
        self._all = []  # warm-up requests are not measurements

    # ---- shared by the parts ------------------------------------------------------------------

    def put_cell(self, cell) -> None:
        cells = self.result.throughput
        for i, c in enumerate(cells):
            if c.workload == cell.workload and c.streams == cell.streams:
                cells[i] = cell
                return
        cells.append(cell)

    def cap(self, max_tokens: int) -> Optional[int]:
        """Largest prompt that fits max_model_len with room for the output (2% margin for calibration)."""
        limit = self.result.server.max_model_len
        if limit is None:
            return None
        return max(1, limit - max_tokens - max(64, limit // 50))

    def capped(self, target: int, max_tokens: int, what: str) -> int:
        cap = self.cap(max_tokens)
        if cap is not None and target > cap:
            self.note(f"{what}: {target} prompt tokens capped to {cap} (max_model_len {self.result.server.max_model_len})")
            return cap
        return target

    async def _calibration(self, kind: Kind, question: str) -> Calibration:
        if kind not in self._calibrations:
            self.progress.describe(f"calibrating {kind} filler against the server's token counts")
            base = await self.send(tagged("", question), 1)
            probe = await self.send(tagged(filler(kind, CALIBRATION_LINES, self.options.seed), question), 1)
            if base.prompt_tokens is None or probe.prompt_tokens is None:
                self.note("the server reports no usage.prompt_tokens: long prompts sized at ~12 tokens a line")
                self._calibrations[kind] = Calibration(50, 12.0)
            else:
                self._calibrations[kind] = Calibration.from_probes(base.prompt_tokens, probe.prompt_tokens)
        return self._calibrations[kind]

    async def long_prompt(self, kind: Kind, target: int, question: str) -> str:
        cal = await self._calibration(kind, question)
        return tagged(filler(kind, cal.lines_for(target), self.options.seed), question)

    async def short_alone(self) -> list[Measured]:
        """TTFT of a short prompt on an idle server: the fixed overhead (measured once per run)."""
        if not self._overhead:
            self.progress.describe("fixed overhead: short prompts on an idle server")
            for _ in range(self.options.overhead_samples):
                self._overhead.append(await self.send(SHORT_PROMPT, SHORT_MAX_TOKENS))
        return self._overhead

    async def running(self) -> Optional[float]:
        """Requests the server runs now (/metrics), None without /metrics."""
        page = await self._metrics()
        return page.total(RUNNING) if page is not None else None

    # ---- notes ------------------------------------------------------------------------------

    def note(self, text: str) -> None:
        if text not in self.result.notes:
            self.result.notes.append(text)

    def _note_request_quality(self) -> None:
        done = self._all
        failed = [m for _, m in done if m.error]
        if failed:
            self.note(f"{len(failed)} request(s) failed; first: {failed[0].error}")
        ok = [(n, m) for n, m in done if m.ok]
        if any(m.output_tokens is None for _, m in ok):
            self.note("the server sent no usage in some streams (stream_options.include_usage unsupported?)")
        short = [m for n, m in ok if m.output_tokens is not None and m.output_tokens < n]
        if short:
            self.note(
                f"{len(short)} request(s) generated fewer tokens than asked (the server may ignore "
                "ignore_eos/min_tokens); tok/s still counts what was generated"
            )
