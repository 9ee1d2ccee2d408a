"""The throughput step against a real simulated engine: a measurement on an idle engine becomes
the next reload's one-stream baseline; with users already at the engine (a reload under load) it
sends nothing and judges the engine's own timings of their requests against the rate recorded at
the same concurrency, so a Marlin-slow engine under traffic fails the gate."""

from __future__ import annotations

import os
import threading
import time

import httpx
import pytest
from hostfacts import inventory
from test_sim_serving import NAME, Server

from sparkctl.errors import HostError
from sparkctl.facts.metrics import parse_page
from sparkctl.inventory.models import Inventory
from sparkctl.steps.base import Change, Plan, RunContext
from sparkctl.steps.throughput import ThroughputStep
from sparkctl_lab.sim import harness


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
    # sparkctl measures the engine itself: here no gateway in front (behind one it is on loopback)
    data["gateway"]["enabled"], data["runtime"]["port"] = False, engine.port
    data["runtime"]["served_model_name"] = NAME
    return Inventory.model_validate(data)


def measure(engine, baseline=100.0, ratio=0.9):
    ctx = RunContext(inventory=aimed_at(engine), fleet=None)
    plan = Plan("throughput", "head", (Change("measure", "measure", {"ratio": ratio, "baseline": baseline}),))
    return ThroughputStep().apply(ctx, plan), ctx.outputs.decode_tokens_per_s


def test_idle_is_a_baseline(engine, monkeypatch):
    monkeypatch.setenv("SPARKCTL_ONLY_NETWORKS", "127.0.0.0/8")
    said, recorded = measure(engine, baseline=1.0)
    assert recorded and f"decode {recorded:.1f} tok/s" in said and "under load" not in said


class Users:
    """Two users at the engine the whole time, each sending its next request when the last ends."""

    def __init__(self, engine, n: int = 2):
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.loop, args=(engine,), daemon=True) for _ in range(n)]
        for t in self.threads:
            t.start()
        deadline = time.monotonic() + 10
        while parse_page(httpx.get(f"{engine.base}/metrics").text).total("vllm:num_requests_running") != n:
            assert time.monotonic() < deadline, "the users' requests never ran"
            time.sleep(0.05)

    def loop(self, engine) -> None:
        body = {"model": NAME, "prompt": "Write an essay.", "max_tokens": 1000, "ignore_eos": True}
        # one kept-alive connection per user: on a loaded machine a new connection per request left
        # gaps that measured 2 users as ~1.4 streams (ci23, beside `stress --cpu 1`)
        with httpx.Client(base_url=engine.base, timeout=120) as client:
            while not self.stop.is_set():
                client.post("/v1/completions", json=body)

    def leave(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(120)


def measure_under_load(engine, baselines: dict, ratio=0.8):
    ctx = RunContext(inventory=aimed_at(engine), fleet=None)
    op = {"ratio": ratio, "baseline": 1e9, "baselines": baselines}  # the idle one-stream rate is not theirs
    return ThroughputStep().apply(ctx, Plan("throughput", "head", (Change("measure", "measure", op),))), ctx.outputs


@pytest.mark.paced
def test_under_load_the_engines_own_timings_are_judged_and_a_marlin_slow_engine_fails(engine, monkeypatch):
    monkeypatch.setenv("SPARKCTL_ONLY_NETWORKS", "127.0.0.0/8")
    users = Users(engine)
    try:
        # the first reload under load at this concurrency: nothing to judge against, it becomes the baseline
        said, out = measure_under_load(engine, {})
        assert out.decode_tokens_per_s is None  # not the idle one-stream baseline
        assert list(out.decode_by_streams) == ["2"], said
        healthy = out.decode_by_streams["2"]
        assert f"decode {healthy:.1f} tok/s per request under load (the engine's own timings of" in said, said
        assert "none recorded at 2 stream(s) yet, recorded as that baseline, the throughput ratio not judged" in said
        # the seed's silent Marlin fallback: decode at half speed, users still on
        harness.set_faults(engine.base, engine.faults, "slow_decode=2\n")
        with pytest.raises(HostError) as e:
            measure_under_load(engine, {"2": healthy})
        assert "under load" in e.value.message and "recorded at 2 stream(s) (below --min-throughput-ratio 0.8)" in e.value.message
        harness.set_faults(engine.base, engine.faults, "")
        said, out = measure_under_load(engine, {"2": healthy})
        assert f"x the {healthy:.1f} recorded at 2 stream(s)" in said and "2" in out.decode_by_streams, said
    finally:
        if os.path.exists(engine.faults):
            os.unlink(engine.faults)
        users.leave()
