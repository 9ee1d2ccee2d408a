"""The reload's downtime probe (sparkctl/reload.py DowntimeProbe) against the lab's vLLM simulator.

The probe must see what a client of the engine sees: vLLM 0.33 drains with `/health` and `/v1/models`
at 200 while every new request comes back empty, finished `abort` (docs/conformance.md h_drain_*),
so that time is downtime although nothing refuses. The simulator is a real `vllm serve` subprocess
on loopback (test_sim_serving.Server).
"""

from __future__ import annotations

import re
import signal
import threading
import time

import pytest
from test_sim_serving import Server, _stream_until_done

from sparkctl.reload import DowntimeProbe

DONE = ('vllm:request_success_total{"finished_reason": "length"}', 'vllm:request_success_total{"finished_reason": "abort"}')


def answered(s: Server) -> float:
    """Requests the engine finished (a probe request is one token long: `length`) or turned away."""
    m = s.metrics()
    return sum(m.get(k, 0.0) for k in DONE)


def until(cond, timeout: float = 15.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return False


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(str(tmp_path_factory.mktemp("probe")), env={"SIM_CRASH_CONTEXT_TOKENS": "0"}, name="probe")
    yield s
    s.stop()


def test_the_drain_is_downtime_although_health_and_models_answer_200(tmp_path):
    # The request in flight decodes ~30 s (4000 tokens), far beyond the drain's 8 s, so it is still in
    # flight at SIGTERM however slow the machine (CI's landing run, three labs beside: a ~3 s request
    # had ended before the probe's first answer), and the drain ends at its timeout, not with it.
    s = Server(str(tmp_path), "--shutdown-timeout", "8", env={"SIM_STEP_TIME_SCALE": "0.5"}, name="drain")
    out: dict = {}
    t = threading.Thread(target=_stream_until_done, args=(s, out, 4000, True))
    t.start()
    assert until(lambda: out.get("started"))
    start = answered(s)
    probe = DowntimeProbe(s.base).start()
    try:
        assert until(lambda: answered(s) > start)  # the probe's completions are served
        assert probe.windows == []
        s.proc.signal(signal.SIGTERM)
        # the long request drains (a probe completion in flight at SIGTERM drains beside it: count=2)
        assert s.proc.wait_log("[shutdown] EngineCore: draining in-flight requests count=", timeout=10)
        assert int(re.search(r"draining in-flight requests count=(\d+)", s.proc.log()).group(1)) in (1, 2)
        assert until(lambda: bool(probe.windows))  # down while the engine drains ...
        # ... though nothing a health check looks at says so
        assert s.client.get("/health").status_code == 200
        assert s.client.get("/v1/models").status_code == 200
        assert out.get("finish_reason") is None  # still draining: the request in flight runs on
    finally:
        t.join(30)
        s.proc.wait(30)
        downtime = probe.stop()
        s.client.close()
    assert out.get("finish_reason") == "abort"  # at the drain's timeout
    assert "Shutdown timeout reached: aborted 1 in-flight request(s)." in s.proc.log()
    assert probe.windows[0][1] is None and downtime > 0  # never served again: the engine is gone


def test_while_the_engine_stops_the_probe_sends_nothing_and_a_stop_that_stopped_nothing_is_no_downtime(server):
    before = answered(server)
    probe = DowntimeProbe(server.base).start()
    try:
        assert until(lambda: answered(server) > before)
        probe.engine_stops()
        assert probe.windows and probe.windows[-1][1] is None  # down from the stop step's start
        paused = answered(server)
        m = server.metrics()
        assert m["vllm:num_requests_running{}"] + m["vllm:num_requests_waiting{}"] == 0  # none left at the engine
        time.sleep(1.0)  # ten of the probe's periods while down
        assert answered(server) == paused  # nothing reached the engine to be counted among the drain's requests
        probe.engine_stopped(stopped=False)  # the stop step stopped nothing (the barrier refused)
        assert until(lambda: answered(server) > paused)
    finally:
        downtime = probe.stop()
    assert downtime == 0.0 and probe.windows == []


def test_a_stop_that_stopped_the_engine_is_downtime_until_a_completion_is_served_again(server):
    probe = DowntimeProbe(server.base).start()
    try:
        probe.engine_stops()
        time.sleep(0.3)
        probe.engine_stopped(stopped=True)
        assert until(lambda: probe.windows and probe.windows[-1][1] is not None)  # closed by a served completion
    finally:
        downtime = probe.stop()
    assert len(probe.windows) == 1 and downtime > 0


def test_a_refused_engine_is_down():
    # nothing listens on the port: every probe request is refused
    from sparkctl_lab.sim import harness

    probe = DowntimeProbe(f"http://127.0.0.1:{harness.free_port()}").start()
    try:
        assert until(lambda: bool(probe.windows))
        time.sleep(0.1)  # the window has been open 0.1 s at least (downtime is rounded to 10 ms)
    finally:
        downtime = probe.stop()
    assert probe.windows[0][1] is None and downtime >= 0.1
