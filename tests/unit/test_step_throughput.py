"""The throughput step against a real simulated engine: a measurement on an idle engine becomes
the next reload's baseline; one taken while other requests run (users back through the gateway
the moment the engine serves) does not, and the ratio is not judged on it; with users already at
the engine it does not measure at all."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from hostfacts import inventory
from test_sim_serving import NAME, Server

from sparkctl.inventory.models import Inventory
from sparkctl.runtime.metrics import parse_page
from sparkctl.steps.base import Change, Plan, RunContext
from sparkctl.steps.throughput import ThroughputStep


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    # decode 10x slower than the simulator tests' default: the other user's 4000 tokens take seconds,
    # not the ~0.4 s a busy machine can spend between seeing their request run and the step's look
    s = Server(str(tmp_path_factory.mktemp("throughput")), env={"SIM_STEP_TIME_SCALE": "0.05"})
    yield s
    s.stop()


def aimed_at(engine) -> Inventory:
    data = inventory().model_dump(mode="json", exclude_none=True)
    data["hosts"]["head"]["ssh"]["address"] = "127.0.0.1"
    data["gateway"]["engine_port"] = engine.port  # sparkctl measures the engine itself
    data["runtime"]["served_model_name"] = NAME
    return Inventory.model_validate(data)


def prompts_seen(engine) -> float:
    """Requests the engine has taken in (vLLM counts every prompt's tokens as it arrives)."""
    seen = parse_page(httpx.get(f"{engine.base}/metrics").text).total("vllm:prompt_tokens_total")
    assert seen, "the engine's /metrics has no vllm:prompt_tokens_total"
    return seen


def measure(engine, baseline=100.0, ratio=0.9):
    ctx = RunContext(inventory=aimed_at(engine), fleet=None)
    plan = Plan("throughput", "head", (Change("measure", "measure", {"ratio": ratio, "baseline": baseline}),))
    return ThroughputStep().apply(ctx, plan), ctx.outputs.decode_tokens_per_s


def test_idle_is_a_baseline_and_under_load_is_not(engine, monkeypatch):
    monkeypatch.setenv("SPARKCTL_ONLY_NETWORKS", "127.0.0.0/8")
    said, recorded = measure(engine, baseline=1.0)
    assert recorded and f"decode {recorded:.1f} tok/s" in said and "under load" not in said

    # another user's long request at the engine the whole time
    def user():
        body = {"model": NAME, "prompt": "Write an essay.", "max_tokens": 4000, "ignore_eos": True}
        httpx.post(f"{engine.base}/v1/completions", json=body, timeout=120)

    t = threading.Thread(target=user, daemon=True)
    t.start()
    deadline = time.monotonic() + 10
    while not parse_page(httpx.get(f"{engine.base}/metrics").text).total("vllm:num_requests_running"):
        assert time.monotonic() < deadline, "the other user's request never ran"
        time.sleep(0.05)
    # a rate far below any ratio of this baseline: judged, it would roll a healthy engine back; and
    # with the user already there it is not even measured (its request would queue behind theirs)
    sent = prompts_seen(engine)
    said, recorded = measure(engine, baseline=1e9)
    assert recorded is None, said
    assert "decode not measured under load (1 other request(s) at the engine): not a baseline, the recorded" in said, said
    assert "the throughput ratio not judged" in said
    assert prompts_seen(engine) == sent, "a measurement request reached the busy engine"
    t.join(120)
