"""The simulator's engine, driven directly: the order in which a client and /metrics learn a step's outcome."""

from __future__ import annotations

import queue

from sparkctl.facts.metrics import parse_page
from sparkctl_lab.sim.calibration import PROFILES
from sparkctl_lab.sim.engine import Engine, Request
from sparkctl_lab.sim.metrics import VllmMetrics
from sparkctl_lab.sim.workload import TextStream

NAME = "deepseek-v4.1-flash"


def test_a_client_handed_its_last_token_finds_its_request_gone_from_the_metrics():
    # vLLM's output handler records a step's scheduler stats (num_requests_running) before it hands the
    # step's outputs to the requests (v1/engine/async_llm.py output_handler): a client that has its last
    # token and asks /metrics at once never counts itself (the throughput step's "users came while it ran")
    metrics = VllmMetrics(NAME, 8192, 0, {})
    seen_at_put: list[tuple[str | None, float]] = []

    class Watched(queue.Queue):
        def put(self, item, block=True, timeout=None):
            page = parse_page(metrics.render())
            seen_at_put.append((item[3], page.total("vllm:num_requests_running") or 0.0))
            super().put(item, block, timeout)

    engine = Engine(
        max_num_seqs=4,
        max_num_batched_tokens=8192,
        max_model_len=8192,
        block_size=256,
        kv_pool_tokens=65536,
        enable_prefix_caching=False,
        step_model=PROFILES["splice"].step,
        spec=None,
        marlin=False,
        step_time_scale=0.001,
        metrics=metrics,
        crash_context_tokens=0,
        on_fatal=lambda message: None,
    )
    engine.start()
    try:
        req = Request("r1", [1] * 16, 4, "counting", TextStream("counting", "Count from 1 to 9.", 0, True), events=Watched())
        engine.add(req)
        while True:
            _, _, _, reason = req.events.get(timeout=10)
            if reason:
                break
    finally:
        engine.stop()
    assert seen_at_put[0] == (None, 1.0)  # its first token: it runs
    assert seen_at_put[-1] == ("length", 0.0)  # its last: already finished in the metrics
