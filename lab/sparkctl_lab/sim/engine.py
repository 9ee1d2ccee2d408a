"""The engine core: a vLLM-V1-shaped scheduler stepping simulated time.

Each step schedules, in order, the running requests (a decoding request verifies 1 + k tokens, a
prefilling one takes a chunk of the remaining prompt) and then waiting requests while fewer than
max_num_seqs run, all within max_num_batched_tokens. So a long cold prompt takes the whole token
budget until its prefill is done and a request arriving behind it waits (head-of-line, seed 000).
KV blocks come from a fixed pool (block_size tokens each); when a running request cannot grow,
the newest one is preempted and recomputed later. Prompts' full blocks are remembered for
prefix caching. The step's duration comes from calibration.StepModel; the engine sleeps it
(times SIM_STEP_TIME_SCALE), then emits the step's tokens; steps shorter than CATCH_UP_S run back
to back and one sleep catches up with them.
"""

from __future__ import annotations

import collections
import math
import queue
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable

from .calibration import StepModel, decayed_acceptance
from .metrics import VllmMetrics
from .workload import TextStream

GOLDEN = 0.6180339887498949
# Steps shorter than this (scaled: ~0.3 ms per decode step at the lab's 100x) run back to back until
# the modelled clock is this far ahead of the real one, then one sleep catches up: the modelled pace
# and the metrics' timestamps are the same, without a sleep and a wake-up of every request's HTTP
# thread per step (a CPU loop at 3,000 steps/s). A token reaches its client at most this early.
CATCH_UP_S = 0.002


@dataclass
class SpecParams:
    k: int
    acceptance: dict[str, float]
    decay: float
    decay_tokens: float


@dataclass
class Request:
    request_id: str
    prompt_ids: list[int]
    max_tokens: int
    workload: str
    stream: TextStream
    stop: list[str] = field(default_factory=list)
    accept_seed: float = 0.0
    arrival: float = field(default_factory=time.monotonic)
    events: "queue.Queue[tuple]" = field(default_factory=queue.Queue)
    # engine state
    num_computed: int = 0
    prefill_len: int = 0
    output: list[str] = field(default_factory=list)
    text: str = ""
    blocks: int = 0
    rounds: int = 0
    finished: str | None = None
    stop_reason: str | None = None
    first_scheduled: float | None = None
    first_token: float | None = None
    last_token: float | None = None
    block_hashes: list[int] | None = None

    def __post_init__(self) -> None:
        self.prefill_len = len(self.prompt_ids)

    @property
    def prompt_len(self) -> int:
        return len(self.prompt_ids)

    @property
    def num_tokens(self) -> int:
        return self.prompt_len + len(self.output)

    @property
    def in_prefill(self) -> bool:
        return self.num_computed < self.prefill_len


class EngineDead(Exception):
    pass


@dataclass(eq=False, kw_only=True)
class Engine:
    max_num_seqs: int
    max_num_batched_tokens: int  # the token budget of one step
    max_model_len: int
    block_size: int
    kv_pool_tokens: int
    enable_prefix_caching: bool
    step_model: StepModel
    spec: SpecParams | None
    marlin: bool
    step_time_scale: float
    metrics: VllmMetrics
    crash_context_tokens: int
    on_fatal: Callable[[str], None]

    def __post_init__(self) -> None:
        self.total_blocks = max(1, self.kv_pool_tokens // self.block_size)
        self.k = self.spec.k if self.spec else 0
        self.lock = threading.Condition()
        self.waiting: collections.deque[Request] = collections.deque()
        self.running: list[Request] = []
        self.used_blocks = 0
        self.cache: collections.OrderedDict[int, None] = collections.OrderedDict()
        self.dead: str | None = None
        self.stopped = False
        self.shutting_down = False  # SIGTERM: v1/engine/core.py EngineShutdownState != RUNNING
        self.hang = False
        self.aborts_held: list[Request] = []  # aborts a hung engine has not reached yet (see abort)
        self.slow_factor = 1.0
        self.crash_next_step: str | None = None
        self.crash_on_work = False  # SIM_FAULTS=crash_on_request: the first step with work crashes
        self.die_on_work: str | None = None  # mp: a lost peer rank fails the next step's collective
        self.steps = 0
        self._wake = threading.Event()
        self._clock = 0.0  # the modelled end of the last step (time.monotonic's scale)
        # a step's outputs, handed to their requests after its stats: vLLM's output handler records the
        # step's scheduler and iteration stats before a client is sent the output (v1/engine/async_llm.py
        # output_handler), so a client that saw its last token never finds itself still running in /metrics
        self._outbox: list[tuple[Request, tuple]] = []
        # interval stats for the periodic log lines
        self.iv = collections.Counter()
        self.iv_pos = [0] * self.k
        self._thread = threading.Thread(target=self._run, name="EngineCore", daemon=True)

    # ---- public API (called from HTTP threads) ----
    def start(self) -> None:
        self._thread.start()

    def add(self, req: Request) -> None:
        with self.lock:
            if self.dead:
                raise EngineDead(self.dead)
            if self.shutting_down:
                # v1/engine/core.py _reject_add_in_shutdown: a request that reaches EngineCore after SIGTERM
                # is finished at once as aborted, with no token (_send_abort_outputs_to_client); the output
                # processor counts it (vllm:request_success_total{finished_reason="abort"}).
                self._finish(req, "abort", self._now())
                return
            self.waiting.append(req)
            self.lock.notify_all()

    def begin_shutdown(self) -> None:
        """SIGTERM reached EngineCore: in-flight requests go on (drain), new ones are rejected as aborted."""
        with self.lock:
            self.shutting_down = True

    def set_hang(self, hang: bool) -> None:
        """The `hang` fault: steps stop (requests stay in flight) until it is off again."""
        with self.lock:
            if self.hang != hang:
                self.hang = hang
                if not hang:  # the core steps again: first the aborts that waited for it
                    for r in self.aborts_held:
                        self._finish(r, "abort", self._now(), counted=False)
                    self.aborts_held.clear()
                self.lock.notify_all()

    def abort(self, req: Request) -> None:
        """The client went away (v1/engine/async_llm.py generate() -> abort()): the request leaves the
        scheduler, its slot and KV blocks are freed (core.py abort_requests). The output processor has
        already dropped its state (output_processor.py abort_requests), so vLLM does not count it in
        vllm:request_success_total nor in the request histograms."""
        with self.lock:
            if req.finished:
                return
            if self.hang:
                # EngineCore takes an abort from its input queue between steps (core.py
                # _process_input_queue): one stuck in its step, as a hung collective is, has not taken
                # it, and its scheduler stats (the /metrics gauges) stay as they were
                self.aborts_held.append(req)
                return
            self._finish(req, "abort", self._now(), counted=False)
            self.lock.notify_all()

    def abort_all(self) -> list[str]:
        """Abort every unfinished request; their request ids."""
        with self.lock:
            reqs = list(self.running) + list(self.waiting)
            now = self._now()
            for r in reqs:
                self._finish(r, "abort", now)
            self.lock.notify_all()
            return [r.request_id for r in reqs]

    def num_unfinished(self) -> int:
        with self.lock:
            return len(self.running) + len(self.waiting)

    def stop(self) -> None:
        with self.lock:
            self.stopped = True
            self.lock.notify_all()
        self._wake.set()

    def crash(self, kind: str) -> None:
        """Make the next step fail like the seeds' CUDA crash (or now, if idle)."""
        with self.lock:
            self.crash_next_step = kind
            self.lock.notify_all()
        self._wake.set()

    def kill(self, message: str) -> None:
        """The engine died from outside (a lost rank): fail every request."""
        with self.lock:
            self._die(message)
        self._wake.set()

    def snapshot(self) -> dict:
        with self.lock:
            return {
                "running": len(self.running),
                "waiting": len(self.waiting),
                "kv_cache_usage": self.used_blocks / self.total_blocks,
                "steps": self.steps,
                "dead": self.dead,
            }

    def _now(self) -> float:
        """Now on the engine's clock: never before the last step's modelled end (CATCH_UP_S)."""
        return max(time.monotonic(), self._clock)

    # ---- the loop ----
    def _run(self) -> None:
        try:
            while True:
                with self.lock:
                    while (
                        not self.stopped
                        and not self.dead
                        and (self.hang or (not self.running and not self.waiting and not self.crash_next_step))
                    ):
                        self.lock.wait()  # idle: every change that ends it notifies (add, stop, crash, kill, set_hang)
                    if self.stopped or self.dead:
                        return
                    if self.crash_next_step:
                        kind, self.crash_next_step = self.crash_next_step, None
                        self._die(kind)
                        return
                    plan = self._schedule()
                    if plan is None:
                        self.lock.wait(timeout=0.05)
                        continue
                    duration = self._duration(plan)
                    crash = self.die_on_work or (self.crash_on_work or self._concurrent_long_context(plan)) and "device_assert"
                if crash:
                    # The kernel asserts (or the collective fails) inside the step.
                    time.sleep(min(duration * self.step_time_scale, 0.05))
                    with self.lock:
                        self._die(crash)
                    return
                wall = duration * self.step_time_scale * self.slow_factor
                now = time.monotonic()
                # a step starts when the last one ended, or now if the engine was idle or fell behind
                self._clock = max(self._clock, now) + wall
                if self._clock - now >= CATCH_UP_S:
                    self._wake.wait(self._clock - now)
                    self._wake.clear()
                with self.lock:
                    if self.stopped or self.dead:
                        return
                    self.steps += 1
                    self._apply(plan, self._clock)
                    self._publish_gauges()
                    for r, event in self._outbox:
                        r.events.put(event)
                    self._outbox.clear()
        except Exception:  # a bug in the simulator must not look like a healthy server
            with self.lock:
                self._die("EngineCore crashed:\n" + traceback.format_exc())

    def _schedule(self):
        budget = self.max_num_batched_tokens
        plan: list[tuple[Request, str, int]] = []
        i = 0
        while i < len(self.running):
            r = self.running[i]
            if budget <= 0:
                break
            if r.in_prefill:
                n = min(r.prefill_len - r.num_computed, budget)
                if not self._grow(r, r.num_computed + n):
                    continue  # r itself was preempted
                plan.append((r, "prefill", n))
                budget -= n
            else:
                n = 1 + self.k
                if n > budget:
                    i += 1
                    continue
                if not self._grow(r, r.num_tokens + n):
                    continue
                plan.append((r, "decode", n))
                budget -= n
            i += 1
        now = self._now()
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            r = self.waiting[0]
            if r.finished:
                self.waiting.popleft()
                continue
            if r.num_computed == 0:
                hits = self._prefix_hits(r)
                r.num_computed = hits
                self.metrics.inc(self.metrics.prefix_queries, r.prefill_len)
                self.metrics.inc(self.metrics.prefix_hits, hits)
                self.metrics.prompt_admitted(r.prefill_len, hits)
                self.iv["queries"] += r.prefill_len
                self.iv["hits"] += hits
            n = min(r.prefill_len - r.num_computed, budget)
            need = self._blocks_for(r.num_computed + n)
            if need - r.blocks > self.total_blocks - self.used_blocks:
                if not self.running:
                    # Cannot ever fit: vLLM would have rejected it at admission (prompt > pool).
                    self.waiting.popleft()
                    self._finish(r, "error", now)
                    continue
                break
            self.waiting.popleft()
            self.used_blocks += need - r.blocks
            r.blocks = need
            self.running.append(r)
            if r.first_scheduled is None:
                r.first_scheduled = now
            plan.append((r, "prefill", n))
            budget -= n
        return plan or None

    def _blocks_for(self, tokens: int) -> int:
        return math.ceil(tokens / self.block_size)

    def _grow(self, r: Request, tokens: int) -> bool:
        """Give r blocks for `tokens`; preempt the newest running requests if needed."""
        need = self._blocks_for(tokens) - r.blocks
        while need > self.total_blocks - self.used_blocks:
            victim = self.running[-1]
            self._preempt(victim)
            if victim is r:
                return False
        self.used_blocks += max(0, need)
        r.blocks += max(0, need)
        return True

    def _preempt(self, r: Request) -> None:
        self.running.remove(r)
        self.used_blocks -= r.blocks
        r.blocks = 0
        r.num_computed = 0
        r.prefill_len = r.num_tokens  # recompute prompt + output on resume
        self.waiting.appendleft(r)
        self.metrics.inc(self.metrics.preemptions)
        self.iv["preemptions"] += 1

    def _prefix_hits(self, r: Request) -> int:
        if not self.enable_prefix_caching:
            return 0
        hashes = self._hashes(r)
        usable = (r.prompt_len - 1) // self.block_size
        hit = 0
        for h in hashes[:usable]:
            if h not in self.cache:
                break
            self.cache.move_to_end(h)
            hit += 1
        return hit * self.block_size

    def _hashes(self, r: Request) -> list[int]:
        if r.block_hashes is None:
            bs, ids, parent, out = self.block_size, r.prompt_ids, 0, []
            for start in range(0, len(ids) - bs + 1, bs):
                parent = hash((parent, tuple(ids[start : start + bs])))
                out.append(parent)
            r.block_hashes = out
        return r.block_hashes

    def _remember_prompt(self, r: Request) -> None:
        if not self.enable_prefix_caching:
            return
        for h in self._hashes(r):
            self.cache[h] = None
            self.cache.move_to_end(h)
        while len(self.cache) > self.total_blocks:
            self.cache.popitem(last=False)

    def _duration(self, plan) -> float:
        decode = sum(1 for _, kind, _ in plan if kind == "decode")
        prefill = [(r, n) for r, kind, n in plan if kind == "prefill"]
        p_tokens = sum(n for _, n in prefill)
        ctx = (sum(n * (r.num_computed + n / 2) for r, n in prefill) / p_tokens) if p_tokens else 0.0
        return self.step_model.step_seconds(decode, self.k, p_tokens, ctx, self.marlin)

    def _concurrent_long_context(self, plan) -> bool:
        if self.crash_context_tokens <= 0:
            return False
        long = [r for r, _, _ in plan if r.num_tokens >= self.crash_context_tokens]
        return len(long) >= 2

    def _accepted(self, r: Request) -> int:
        spec = self.spec
        p0 = spec.acceptance.get(r.workload, 0.0)
        p = decayed_acceptance(p0, r.num_tokens, spec.decay, spec.decay_tokens)
        # A low-discrepancy sequence: measured acceptance tracks the configured rate closely.
        u = (r.accept_seed + r.rounds * GOLDEN) % 1.0
        r.rounds += 1
        n = 0  # position i is accepted with probability p**i: up to the first rejection
        while n < self.k and u < p ** (n + 1):
            n += 1
        return n

    def _apply(self, plan, now: float) -> None:
        prompt_tokens = gen_tokens = 0
        drafts = draft_tokens = accepted_total = 0
        per_pos = [0] * self.k
        for r, kind, n in plan:
            if r.finished:
                continue
            if kind == "prefill":
                r.num_computed += n
                prompt_tokens += n
                if r.in_prefill:
                    continue
                self._remember_prompt(r)
                emit = 1
            else:
                acc = self._accepted(r) if self.k else 0
                drafts += 1
                draft_tokens += self.k
                accepted_total += acc
                for pos in range(acc):
                    per_pos[pos] += 1
                emit = 1 + acc
            r.num_computed = r.num_tokens
            new = self._generate(r, emit, now)
            gen_tokens += new
        m = self.metrics
        m.inc(m.prompt_tokens, prompt_tokens)
        m.inc(m.generation_tokens, gen_tokens)
        if prompt_tokens + gen_tokens:
            m.observe(m.iter_tokens, prompt_tokens + gen_tokens)
        self.iv["prompt"] += prompt_tokens
        self.iv["gen"] += gen_tokens
        if drafts and m.spec_drafts is not None:
            m.inc(m.spec_drafts, drafts)
            m.inc(m.spec_draft_tokens, draft_tokens)
            m.inc(m.spec_accepted, accepted_total)
            for pos, c in enumerate(per_pos):
                m.inc(m.spec_per_pos, c, position=str(pos))
                self.iv_pos[pos] += c
            self.iv["drafts"] += drafts
            self.iv["draft_tokens"] += draft_tokens
            self.iv["accepted"] += accepted_total

    def _generate(self, r: Request, count: int, now: float) -> int:
        produced: list[str] = []
        reason = None
        for _ in range(count):
            tok = r.stream.next_token()
            if tok is None:
                reason = "stop"
                break
            produced.append(tok)
            r.output.append(tok)
            if r.stop:
                joined = r.text + "".join(produced)
                hit = next((s for s in r.stop if s and s in joined[-(len(s) + len(tok) + 1) :]), None)
                if hit:
                    reason, r.stop_reason = "stop", hit
                    cut = joined.rfind(hit)
                    produced = [joined[len(r.text) : cut]] if cut >= len(r.text) else []
                    break
            if len(r.output) >= r.max_tokens or r.num_tokens >= self.max_model_len:
                reason = "length"
                break
        text = "".join(produced)
        r.text += text
        m = self.metrics
        if r.first_token is None:
            r.first_token = now
            m.observe(m.ttft, now - r.arrival)
        elif produced or reason:
            m.observe(m.itl, now - (r.last_token or now))
        r.last_token = now
        self._outbox.append((r, ("delta", text, len(produced), reason)))
        if reason:
            self._finish(r, reason, now, notify=False)
        return len(produced)

    def _finish(self, r: Request, reason: str, now: float, notify: bool = True, counted: bool = True) -> None:
        if r.finished:
            return
        r.finished = reason
        if r in self.running:
            self.running.remove(r)
            self.used_blocks -= r.blocks
            r.blocks = 0
        elif r in self.waiting:
            self.waiting.remove(r)
        if not counted:
            if notify:
                r.events.put(("delta", "", 0, reason))
            self._publish_gauges()
            return
        m = self.metrics
        m.inc(m.success, 1, finished_reason=reason)
        m.observe(m.e2e, now - r.arrival)
        m.observe(m.queue_time, (r.first_scheduled or now) - r.arrival)
        m.observe(m.inference_time, now - (r.first_scheduled or now))
        m.observe(m.prefill_time, (r.first_token or now) - (r.first_scheduled or now))
        m.observe(m.decode_time, now - (r.first_token or now))
        m.req_prompt.child(m.base).observe(r.prompt_len)
        m.req_gen.child(m.base).observe(len(r.output))
        m.req_max_tokens.child(m.base).observe(r.max_tokens)
        if notify:
            r.events.put(("delta", "", 0, reason))
        self._publish_gauges()

    def _publish_gauges(self) -> None:
        m = self.metrics
        m.set_gauge(m.running, len(self.running))
        m.set_gauge(m.waiting, len(self.waiting))
        m.set_gauge(m.waiting_by_reason, len(self.waiting), reason="capacity")  # nothing here defers a request
        m.set_gauge(m.kv_usage, self.used_blocks / self.total_blocks)

    def _die(self, message: str) -> None:
        if self.dead:
            return
        self.dead = message
        for r in list(self.running) + list(self.waiting):
            r.events.put(("error", "EngineCore encountered an issue. See stack trace (above) for the root cause.", 0, None))
        self.running.clear()
        self.waiting.clear()
        self.lock.notify_all()
        threading.Thread(target=self.on_fatal, args=(message,), daemon=True).start()
