"""The front door (`python -m sparkctl.gateway`), standalone on loopback: the gateway as a real
subprocess in front of the lab's vLLM simulator (test_sim_serving.Server, a real `vllm serve`
subprocess) or of a small recording HTTP server, with real clients (the OpenAI Python client at
max_retries=0, httpx) and its admin interface over its unix socket.

What a client sees is asserted: statuses, bodies, Retry-After, the order things happen in. No
assertion is a timing threshold (benchmarks/gateway.py measures the cost).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import stat
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

import httpx
import pytest
from loopback_http import LoopbackServer, Quiet
from prometheus_client.parser import text_string_to_metric_families
from test_sim_serving import NAME, Server

from sparkctl_lab.sim import harness

COUNT = "Count from 1 to 10."


class Gateway:
    """`python -m sparkctl.gateway` on 127.0.0.1 in front of `upstream`, its admin socket in tmp."""

    def __init__(self, tmp: str, upstream: str, *args: str):
        self.port = harness.free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.socket = os.path.join(tmp, f"gw-{self.port}", "admin.sock")
        argv = [
            sys.executable,
            "-m",
            "sparkctl.gateway",
            "--listen",
            f"127.0.0.1:{self.port}",
            "--upstream",
            upstream,
            "--admin-socket",
            self.socket,
            *args,
        ]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = harness.Proc("gateway", argv, env, os.path.join(tmp, f"gateway-{self.port}.log")).start()
        assert harness.wait_http(self.base + "/gateway/metrics", timeout=30, proc=self.proc), self.proc.log()
        self.client = httpx.Client(base_url=self.base, timeout=60)
        self.admin_client = httpx.Client(transport=httpx.HTTPTransport(uds=self.socket), base_url="http://gateway", timeout=10)

    def admin(self, method: str, path: str, body: dict | None = None) -> dict:
        r = self.admin_client.request(method, path, json=body)
        assert r.status_code == 200, r.text
        return r.json()

    def hold(self, **body) -> dict:
        return self.admin("POST", "/hold", body)

    def release(self) -> dict:
        return self.admin("POST", "/release")

    def status(self) -> dict:
        return self.admin("GET", "/status")

    def metrics(self) -> dict[str, float]:
        """Every sample, keyed `name{label=value,...}` (labels sorted), parsed by prometheus_client."""
        out = {}
        for fam in text_string_to_metric_families(self.client.get("/gateway/metrics").text):
            for s in fam.samples:
                out[s.name + "{" + ",".join(f"{k}={v}" for k, v in sorted(s.labels.items())) + "}"] = s.value
        return out

    def wait_status(self, pred, timeout: float = 30.0) -> dict:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            st = self.status()
            if pred(st):
                return st
            time.sleep(0.02)
        # the gateway's own account of what it did (its log's tail) beside its status
        raise AssertionError(f"gateway status never matched: {st}\n{self.proc.log()[-3000:]}")

    def stop(self) -> None:
        self.client.close()
        self.admin_client.close()
        self.proc.stop()


def restart(server: Server) -> None:
    """Stop the simulator (SIGTERM: it drains) and start the same `vllm serve` again on its port."""
    server.proc.stop(timeout=60)
    p = server.proc
    server.proc = harness.Proc(p.name, p.argv, p.env, p.log_path).start()
    assert harness.wait_http(server.base + "/health", timeout=60, proc=server.proc), server.proc.log()[-3000:]


def strip(doc):
    """A response without what differs between two answers to the same request (ids, times)."""
    if isinstance(doc, dict):
        return {k: strip(v) for k, v in doc.items() if k not in ("id", "created")}
    if isinstance(doc, list):
        return [strip(v) for v in doc]
    return doc


def chat(messages_text: str, **kw) -> dict:
    return {"model": NAME, "messages": [{"role": "user", "content": messages_text}], "temperature": 0, **kw}


def stream_events(client: httpx.Client, path: str, body: dict) -> list[dict]:
    with client.stream("POST", path, json={**body, "stream": True}) as r:
        assert r.status_code == 200, r.read()
        return [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ") and line != "data: [DONE]"]


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    s = Server(str(tmp_path_factory.mktemp("gw-sim")), env={"SIM_CRASH_CONTEXT_TOKENS": "0"})
    yield s
    s.stop()


@pytest.fixture(scope="module")
def gw(sim, tmp_path_factory):
    g = Gateway(str(tmp_path_factory.mktemp("gw")), sim.base, "--hold-s", "30")
    yield g
    g.stop()


# ---- pass-through ----


def test_routes_pass_through_with_the_engines_status_and_body(sim, gw):
    for method, path, body in [
        ("GET", "/v1/models", None),
        ("GET", "/version", None),
        ("GET", "/nope", None),
        ("GET", "/v1/completions", None),  # 405 with Allow
        ("POST", "/v1/completions", {"model": "other", "prompt": "x"}),  # vLLM's 404
        ("POST", "/v1/completions", {"model": NAME, "prompt": "x", "max_tokens": "many"}),  # 400
        ("POST", "/tokenize", {"model": NAME, "prompt": COUNT}),
        ("POST", "/v1/completions", {"model": NAME, "prompt": COUNT, "max_tokens": 50, "temperature": 0}),
    ]:
        direct = sim.client.request(method, path, json=body)
        through = gw.client.request(method, path, json=body)
        assert (through.status_code, through.headers.get("content-type"), through.headers.get("allow")) == (
            direct.status_code,
            direct.headers.get("content-type"),
            direct.headers.get("allow"),
        ), path
        assert strip(through.json()) == strip(direct.json()), path
    body = chat(COUNT, max_tokens=50)  # a stream: the same events
    assert strip(stream_events(gw.client, "/v1/chat/completions", body)) == strip(
        stream_events(sim.client, "/v1/chat/completions", body)
    )


def test_a_stream_arrives_as_it_is_made_and_a_client_that_leaves_is_cancelled_upstream(sim, gw):
    body = {"model": NAME, "prompt": "Tell me about the river.", "max_tokens": 60000, "ignore_eos": True, "stream": True}
    with gw.client.stream("POST", "/v1/completions", json=body) as r:
        lines = r.iter_lines()
        first = next(line for line in lines if line.startswith("data: "))
        assert json.loads(first[6:])["choices"][0]["text"]
        # the first event came through while the engine still generates the rest: not buffered
        assert sim.metrics()["vllm:num_requests_running{}"] == 1
    # the client closed its stream: the gateway closes its upstream request, and the engine aborts it
    end = time.monotonic() + 30
    while sim.metrics()["vllm:num_requests_running{}"] and time.monotonic() < end:
        time.sleep(0.05)
    assert sim.metrics()["vllm:num_requests_running{}"] == 0


# ---- holds ----


def test_no_openai_client_request_fails_while_the_engine_restarts_under_a_hold(tmp_path):
    from openai import OpenAI

    sim = Server(str(tmp_path / "sim"), "--shutdown-timeout", "30", env={"SIM_CRASH_CONTEXT_TOKENS": "0"})
    # the clients' patience (hold_s, their timeout) is not what is tested, the hold across the restart
    # is: at nice 15 beside three labs and stress the simulator's restart took over 60 s (ci36's floors)
    gw = Gateway(str(tmp_path), sim.base, "--hold-s", "300")
    stop = threading.Event()
    done, failed = [], []

    def client_loop(i: int) -> None:
        client = OpenAI(base_url=gw.base + "/v1", api_key="none", max_retries=0, timeout=330)
        while not stop.is_set():
            try:
                text, reason = "", None
                for ev in client.chat.completions.create(
                    model=NAME,
                    stream=True,
                    max_tokens=40,
                    temperature=0,
                    messages=[{"role": "user", "content": f"{COUNT} ({i})"}],
                ):
                    for ch in ev.choices:
                        text += ch.delta.content or ""
                        reason = ch.finish_reason or reason
                (done if text and reason in ("stop", "length") else failed).append((text, reason))
            except Exception as e:  # noqa: BLE001 - every failure a user would see counts
                failed.append(repr(e))

    threads = [threading.Thread(target=client_loop, args=(i,), daemon=True) for i in range(4)]
    try:
        # one stream first, from this thread: the OpenAI client builds its response models on first
        # use, which pydantic before 2.14 does not make thread safe (pydantic #13438): four threads
        # using them first at once raised "BaseModel cannot be instantiated directly" at the floors
        # (pydantic 2.10, ci27); sparkctl's own models are all built at import
        first = OpenAI(base_url=gw.base + "/v1", api_key="none", max_retries=0, timeout=60)
        assert list(
            first.chat.completions.create(model=NAME, stream=True, max_tokens=2, messages=[{"role": "user", "content": COUNT}])
        )
        for t in threads:
            t.start()
        while len(done) < 8 and not failed:
            time.sleep(0.02)
        before = len(done)
        gw.hold(reason="reload", expected_s=5)
        restart(sim)  # SIGTERM (the engine drains what it has), then the same engine again
        held = gw.status()["held_requests"]
        gw.release()
        after_release = len(done)
        while len(done) < after_release + 8 and not failed:
            time.sleep(0.02)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
        m = gw.metrics()
        gw.stop()
        sim.stop()
    assert failed == [], failed[:5]
    assert held >= 1 and len(done) > before  # requests were held across the restart and then served
    assert m["sparkctl_gateway_hold_seconds_count{outcome=sent}"] >= held
    assert m["sparkctl_gateway_rejected_total{reason=held_too_long}"] == 0


def test_an_expected_hold_beyond_hold_s_answers_503_with_retry_after_at_once(gw):
    from openai import InternalServerError, OpenAI

    gw.hold(reason="cold reload", expected_s=120)
    try:
        client = OpenAI(base_url=gw.base + "/v1", api_key="none", max_retries=0)
        t = time.monotonic()
        with pytest.raises(InternalServerError) as e:
            client.completions.create(model=NAME, prompt=COUNT, max_tokens=5)
        answered_in = time.monotonic() - t
        st = gw.status()
    finally:
        gw.release()
    r = e.value.response
    assert r.status_code == 503
    assert 100 <= int(r.headers["retry-after"]) <= 120  # the expected remaining seconds
    err = r.json()["error"]
    assert err["code"] == 503 and err["type"] == "ServiceUnavailableError"
    # the remaining seconds, as the header says them (CI's floors run: 119 s when 0.5 s had gone by)
    said = re.search(r"expected back in (\d+) s, beyond the gateway's hold of 30 s", err["message"])
    assert said and abs(int(said[1]) - int(r.headers["retry-after"])) <= 1, err["message"]
    assert answered_in < 30  # not held: hold_s is 30 (benchmarks/gateway.py measures how soon)
    assert st["held_requests"] == 0 and st["hold"]["reason"] == "cold reload"
    assert gw.metrics()["sparkctl_gateway_rejected_total{reason=hold_too_long}"] >= 1


def test_a_hold_whose_reason_says_why_is_told_to_clients(gw):
    """The keeper that gave up on a crash loop holds with its reason (docs/keeper.md): clients read it."""
    from openai import InternalServerError, OpenAI

    why = "keeper gave up: 3 recoveries within 1800 s (keeper.max_recoveries); last: sparkctl-head on head: OOM"
    gw.hold(reason=why, expected_s=1800)
    try:
        with pytest.raises(InternalServerError) as e:
            OpenAI(base_url=gw.base + "/v1", api_key="none", max_retries=0).completions.create(
                model=NAME, prompt=COUNT, max_tokens=5
            )
    finally:
        gw.release()
    assert e.value.response.status_code == 503
    assert e.value.response.json()["error"]["message"] == f"The server is down: {why}; retry after Retry-After seconds."


def test_a_request_held_past_hold_s_gets_503_and_one_after_the_release_goes_through(sim, tmp_path):
    gw = Gateway(str(tmp_path), sim.base, "--hold-s", "1")
    try:
        gw.hold(reason="reload")  # no expected duration: every request is held up to hold_s
        t = time.monotonic()
        r = gw.client.post("/v1/completions", json={"model": NAME, "prompt": COUNT, "max_tokens": 5})
        held_for = time.monotonic() - t
        assert r.status_code == 503 and r.headers["retry-after"] == "1" and r.json()["error"]["code"] == 503
        # held for its hold_s, then answered: not sooner, and not held on (the bound is the behaviour;
        # the 3 s over it are only room for a loaded machine)
        assert 1.0 <= held_for < 1.0 + 3
        m = gw.metrics()
        assert m["sparkctl_gateway_rejected_total{reason=held_too_long}"] == 1
        assert m["sparkctl_gateway_hold_seconds_count{outcome=rejected}"] == 1
        gw.release()
        assert gw.client.post("/v1/completions", json={"model": NAME, "prompt": COUNT, "max_tokens": 5}).status_code == 200
    finally:
        gw.stop()


def test_a_hold_nobody_releases_ends_by_itself_and_what_it_held_is_served(sim, tmp_path):
    gw = Gateway(str(tmp_path), sim.base, "--hold-s", "30")
    try:
        gw.hold(reason="reload", ttl_s=1)  # sparkctl "died" without a release
        r = gw.client.post("/v1/completions", json={"model": NAME, "prompt": COUNT, "max_tokens": 5})
        assert r.status_code == 200
        st = gw.status()
        assert st["state"] == "passing" and st["last_hold_expired_s_ago"] is not None
        m = gw.metrics()
        assert m["sparkctl_gateway_holds_expired_total{}"] == 1
        assert m["sparkctl_gateway_hold_seconds_count{outcome=sent}"] == 1
    finally:
        gw.stop()


class Recorder:
    """A plain single-threaded HTTP/1.0 server on loopback: it answers requests one at a time, in the
    order their connections arrived, and records each request's body."""

    def __init__(self):
        seen = self.seen = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                seen.append(json.loads(self.rfile.read(int(self.headers["content-length"]))))
                body = b'{"ok": true}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        class Server(HTTPServer):
            request_queue_size = 64  # socketserver's 5: a full accept queue drops a SYN, retried out of order

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_release_sends_the_held_requests_on_in_arrival_order(tmp_path):
    up = Recorder()
    # one connection to the engine, so the engine sees them in the order the gateway sent them on:
    # over several connections at once the kernel may finish their handshakes in another order
    gw = Gateway(str(tmp_path), up.base, "--hold-s", "30", "--upstream-connections", "1")
    answers = {}
    try:
        gw.hold(reason="reload")

        def send(i):
            answers[i] = gw.client.post("/v1/completions", json={"n": i}).status_code

        threads = []
        for i in range(5):
            threads.append(threading.Thread(target=send, args=(i,), daemon=True))
            threads[-1].start()
            gw.wait_status(lambda st, i=i: st["held_requests"] == i + 1)  # the next one arrives after this one
        assert up.seen == []  # nothing reached the engine during the hold
        assert gw.release()["released"] == 5
        for t in threads:
            t.join(timeout=30)
    finally:
        gw.stop()
        up.stop()
    assert answers == {i: 200 for i in range(5)}
    assert up.seen == [{"n": i} for i in range(5)], up.seen


class Scripted(LoopbackServer):
    """An engine on loopback that answers each request with the next scripted answer (status,
    content type, body), after waiting for `go` when the answer says so: an engine caught by a hold.
    BREAK for a status: the connection is closed with no answer. Its /health answers 200 once
    `healthy` is set, 503 before."""

    def __init__(self):
        import queue

        self.answers: queue.Queue = queue.Queue()
        self.arrived = threading.Event()
        self.go = threading.Event()
        self.healthy = threading.Event()
        script = self

        class Handler(Quiet):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                self.send_response(200 if script.healthy.is_set() and self.path == "/health" else 503)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_POST(self):
                self.rfile.read(int(self.headers["content-length"]))
                status, ctype, body, wait = script.answers.get(timeout=30)
                script.arrived.set()
                if wait:
                    script.go.wait(30)
                if status is BREAK:
                    self.close_connection = True  # the process went: no status line, the socket closed
                    return
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        super().__init__(Handler)


BREAK = None
DRAIN_503 = (
    503,
    "application/json",
    json.dumps(
        {
            "error": {
                "message": "The server is shutting down and is not accepting new requests.",
                "type": "ServiceUnavailableError",
                "param": None,
                "code": 503,
            }
        }
    ).encode(),
)
# vLLM 0.33 during its drain (../shared/reference/vllm-drain.md): accepted, then finished `abort`, empty
ABORT_STREAM = (
    200,
    "text/event-stream; charset=utf-8",
    b'data: {"choices": [{"index": 0, "text": "", "finish_reason": "abort"}]}\n\ndata: [DONE]\n\n',
)
ABORT_JSON = (200, "application/json", json.dumps({"choices": [{"index": 0, "text": "", "finish_reason": "abort"}]}).encode())
SERVED = (200, "application/json", json.dumps({"choices": [{"index": 0, "text": "1, 2", "finish_reason": "stop"}]}).encode())


def across_a_hold(up: Scripted, gw: Gateway, old_engines_answer: tuple) -> httpx.Response:
    """A request that reached the engine just as sparkctl's hold began: the old engine gives it
    `old_engines_answer` once the hold is on; the request must be back at the gate (held), and after
    the release the new engine (healthy, SERVED) answers it. The client's answer."""
    up.arrived.clear(), up.go.clear(), up.healthy.clear()
    up.answers.put((*old_engines_answer, True))
    up.answers.put((*SERVED, False))
    answer: dict[str, httpx.Response] = {}
    t = threading.Thread(target=lambda: answer.update(r=gw.client.post("/v1/completions", json={"n": 1})), daemon=True)
    t.start()
    assert up.arrived.wait(30)
    gw.hold(reason="reload")
    up.go.set()  # the old engine answers (refusing, aborting) or goes with the request
    gw.wait_status(lambda st: st["held_requests"] == 1)  # back at the gate, not at the client
    up.healthy.set()  # the new engine
    gw.release()
    t.join(timeout=30)
    return answer["r"]


def test_a_request_an_engine_going_away_refused_or_aborted_empty_is_held_and_sent_again(tmp_path):
    up = Scripted()
    gw = Gateway(str(tmp_path), up.base, "--hold-s", "30")
    try:
        for old_engines_answer in (DRAIN_503, ABORT_STREAM, ABORT_JSON):
            r = across_a_hold(up, gw, old_engines_answer)
            assert (r.status_code, r.content) == (200, SERVED[2]), old_engines_answer
        assert gw.metrics()["sparkctl_gateway_upstream_errors_total{kind=drain}"] == 3
        # outside a hold the engine's 503 is the client's, as the engine sent it
        up.answers.put((*DRAIN_503, False))
        r = gw.client.post("/v1/completions", json={"n": 2})
        assert (r.status_code, r.content) == (503, DRAIN_503[2])
    finally:
        gw.stop()
        up.stop()


# vLLM 0.33's answer once its engine is dead (EngineDeadError.CLIENT_MESSAGE, v1/engine/exceptions.py)
DEAD_500 = (
    500,
    "application/json",
    json.dumps(
        {
            "error": {
                "message": "The server had an error while processing your request.",
                "type": "InternalServerError",
                "param": None,
                "code": 500,
            }
        }
    ).encode(),
)


def test_a_request_the_engine_went_away_with_during_sparkctls_hold_is_held_not_answered_502(tmp_path):
    """A request that passed the gate just before sparkctl's hold, in flight as sparkctl stops the
    engine: the engine closes its connection with no answer, or answers 500, and its /health no longer
    answers 200. Outside a hold that is a death the request may have caused (502, never sent again:
    poison.py); during the hold sparkctl stopped the engine, so the request is held and sent again
    (ci63: one of four OpenAI clients got the 502 across a restart under a hold)."""
    up = Scripted()
    gw = Gateway(str(tmp_path), up.base, "--hold-s", "30")
    try:
        for old_engines_answer in ((BREAK, "", b""), DEAD_500):
            r = across_a_hold(up, gw, old_engines_answer)  # held, not a 502 at the client
            assert (r.status_code, r.content) == (200, SERVED[2]), (old_engines_answer[0], r.text)
        # the same break with no hold on: the engine died with it, and the client is told so
        up.healthy.clear()
        up.answers.put((BREAK, "", b"", False))
        r = gw.client.post("/v1/completions", json={"n": 2})
        assert (r.status_code, r.headers.get("x-should-retry")) == (502, "false"), r.text
        assert gw.metrics()["sparkctl_gateway_upstream_errors_total{kind=died}"] == 1
    finally:
        gw.stop()
        up.stop()


def test_upstream_down_outside_a_hold_is_held_then_503_or_served_when_it_is_back(tmp_path):
    sim = Server(str(tmp_path / "sim"), env={"SIM_CRASH_CONTEXT_TOKENS": "0"})
    sim.proc.stop()  # the engine died: its port refuses connections
    gw = Gateway(str(tmp_path), sim.base, "--hold-s", "1")
    try:
        r = gw.client.post("/v1/completions", json={"model": NAME, "prompt": COUNT, "max_tokens": 5})
        assert r.status_code == 503 and r.headers["retry-after"] == "1" and r.json()["error"]["code"] == 503
        m = gw.metrics()
        assert m["sparkctl_gateway_rejected_total{reason=held_too_long}"] == 1
        assert m["sparkctl_gateway_upstream_errors_total{kind=connect}"] >= 1
        assert gw.status()["upstream_down_for_s"] is not None and m["sparkctl_gateway_holding{cause=upstream_down}"] == 1
    finally:
        gw.stop()
    # with a hold_s the restart fits in, the request is held and then served
    gw = Gateway(str(tmp_path), sim.base, "--hold-s", "60")
    answer = {}
    try:
        t = threading.Thread(
            target=lambda: answer.update(
                r=gw.client.post("/v1/completions", json={"model": NAME, "prompt": COUNT, "max_tokens": 5})
            ),
            daemon=True,
        )
        t.start()
        gw.wait_status(lambda st: st["held_requests"] == 1 and st["upstream_down_for_s"] is not None)
        p = sim.proc
        sim.proc = harness.Proc(p.name, p.argv, p.env, p.log_path).start()  # the engine is back
        t.join(timeout=60)
        assert answer["r"].status_code == 200 and answer["r"].json()["choices"][0]["text"]
        assert gw.status()["state"] == "passing"
    finally:
        gw.stop()
        sim.stop()


# ---- long context ----


def test_long_prompts_run_one_at_a_time_and_the_queue_is_bounded(tmp_path):
    sim = Server(str(tmp_path / "sim"), env={"SIM_CRASH_CONTEXT_TOKENS": "0", "SIM_STEP_TIME_SCALE": "0.05"})
    gw = Gateway(
        str(tmp_path), sim.base, "--long-context-tokens", "200", "--long-context-max-concurrent", "1", "--long-context-queue", "1"
    )
    long_prompt = "Tell me about the river. " + "The river runs to the sea and " * 60  # ~420 tokens, > 200
    events: list[tuple[str, str]] = []  # (request, first|done) in the order the client saw them
    a_done = threading.Event()

    def run(name: str, prompt: str, max_tokens: int) -> None:
        client = httpx.Client(base_url=gw.base, timeout=120)
        first = False
        with client.stream(
            "POST",
            "/v1/completions",
            json={"model": NAME, "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True, "stream": True},
        ) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if line.startswith("data: {") and json.loads(line[6:])["choices"][0]["text"] and not first:
                    first = True
                    if name == "b":
                        # the gateway sent a's last bytes before b's first; a's thread may not have read
                        # them yet on a busy machine (CI's floors run met that). a decodes ~2 s, so b let
                        # in beside it would still be seen first
                        a_done.wait(0.5)
                    events.append((name, "first"))
                if line == "data: [DONE]":
                    events.append((name, "done"))
                    if name == "a":
                        a_done.set()
        client.close()

    try:
        # the engine stops stepping (health stays 200) until the fault file goes: what reaches it stays there
        harness.set_faults(sim.base, sim.faults, "hang\n")
        a = threading.Thread(target=run, args=("a", long_prompt, 3000), daemon=True)
        a.start()
        gw.wait_status(lambda st: st["long_context"]["running"] == 1 and st["in_flight"] == 1)
        b = threading.Thread(target=run, args=("b", long_prompt.replace("river", "valley"), 80), daemon=True)
        b.start()
        gw.wait_status(lambda st: st["long_context"]["waiting"] == 1)
        # a third long prompt: the queue (1) is full -> 429 at once, with Retry-After
        r = gw.client.post("/v1/completions", json={"model": NAME, "prompt": long_prompt, "max_tokens": 5})
        assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
        assert r.json()["error"]["type"] == "RateLimitError"
        # a body over 200 bytes whose prompt is under 200 tokens (the engine's /tokenize counts it) goes past b
        wordy = " ".join(["incomprehensibilities"] * 40)
        assert len(json.dumps({"prompt": wordy})) > 200
        short = {}
        c = threading.Thread(
            target=lambda: short.update(
                r=httpx.post(gw.base + "/v1/completions", json={"model": NAME, "prompt": wordy, "max_tokens": 5}, timeout=120)
            ),
            daemon=True,
        )
        c.start()
        st = gw.wait_status(lambda st: st["in_flight"] == 2)
        assert st["long_context"] == {"tokens": 200, "max_concurrent": 1, "queue": 1, "running": 1, "waiting": 1}
        os.unlink(sim.faults)  # the engine steps again
        for t in (a, b, c):
            t.join(timeout=120)
        assert short["r"].status_code == 200
        m = gw.metrics()
    finally:
        if os.path.exists(sim.faults):
            os.unlink(sim.faults)
        gw.stop()
        sim.stop()
    assert events == [("a", "first"), ("a", "done"), ("b", "first"), ("b", "done")]
    assert m["sparkctl_gateway_rejected_total{reason=long_context_queue_full}"] == 1


# ---- what is counted, what is reachable ----


def test_a_stream_with_no_content_token_is_counted(sim, gw):
    def zero() -> float:
        return gw.metrics().get("sparkctl_gateway_zero_token_streams_total{finish_reason=stop}", 0.0)

    before = zero()
    events = stream_events(
        gw.client, "/v1/completions", {"model": NAME, "prompt": COUNT, "max_tokens": 20, "temperature": 0, "stop": ["1"]}
    )  # stops before its first token
    assert "".join(e["choices"][0]["text"] for e in events) == "" and events[-1]["choices"][0]["finish_reason"] == "stop"
    assert zero() == before + 1
    events = stream_events(gw.client, "/v1/chat/completions", chat(COUNT, max_tokens=20))
    assert "".join(e["choices"][0]["delta"].get("content") or "" for e in events)
    assert zero() == before + 1  # a stream with text is not counted


def test_metrics_parse_and_name_every_figure(gw):
    names = {f.name for f in text_string_to_metric_families(gw.client.get("/gateway/metrics").text)}
    assert {
        "sparkctl_gateway_holding",
        "sparkctl_gateway_held_requests",
        "sparkctl_gateway_hold_seconds",
        "sparkctl_gateway_rejected",
        "sparkctl_gateway_in_flight",
        "sparkctl_gateway_upstream_errors",
        "sparkctl_gateway_zero_token_streams",
        "sparkctl_gateway_holds_expired",
    } <= names
    admin_page = gw.admin_client.get("/metrics").text
    assert {f.name for f in text_string_to_metric_families(admin_page)} == names
    # the public /metrics is still the engine's
    assert "vllm:num_requests_running" in gw.client.get("/metrics").text


def listening_tcp_ports(pid: int) -> set[int]:
    """The TCP ports process `pid` listens on (its socket inodes matched in /proc/net/tcp and tcp6)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for row in f.readlines()[1:]:
                cols = row.split()
                if cols[3] == "0A" and cols[9] in inodes:  # 0A: LISTEN
                    ports.add(int(cols[1].rsplit(":", 1)[1], 16))
    return ports


def test_the_admin_interface_is_only_on_its_unix_socket(gw):
    assert listening_tcp_ports(gw.proc.pid) == {gw.port}  # no admin port on any address
    mode = os.stat(gw.socket).st_mode
    assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600
    # the admin paths over the public port are the engine's (404), and hold nothing
    # (no body: the simulator leaves an unrouted request's body unread on a kept-alive connection, where
    # it spoils the next request; uvicorn discards it)
    for path in ("/hold", "/release", "/status"):
        r = gw.client.post(path)
        assert (r.status_code, r.json()) == (404, {"detail": "Not Found"}), path
    assert gw.status()["state"] == "passing"


def test_the_admin_command_line_holds_releases_and_reports(gw):
    def ctl(*args):
        r = subprocess.run(
            [sys.executable, "-m", "sparkctl.gateway.ctl", "--admin-socket", gw.socket, *args],
            capture_output=True,
            text=True,
            timeout=30,
        )
        return r.returncode, r.stdout, r.stderr

    rc, out, _ = ctl("hold", "--expected-s", "7", "--reason", "reload")
    assert rc == 0 and json.loads(out)["hold"]["reason"] == "reload"
    assert 0 < json.loads(out)["hold"]["expected_remaining_s"] <= 7
    rc, out, _ = ctl("release")
    assert rc == 0 and json.loads(out)["state"] == "passing"
    rc, out, err = ctl("--admin-socket", gw.socket + ".missing", "status")  # the last --admin-socket wins
    assert rc == 1 and out == "" and ".missing" in err and "Traceback" not in err


@pytest.mark.parametrize("args, words", [
    (["--upstream", "ftp://127.0.0.1:1"], "--upstream"),
    (["--upstream", "http://127.0.0.1:1/v1"], "no path"),
    (["--upstream", "http://127.0.0.1:1", "--listen", "8000"], "--listen"),
    (["--upstream", "http://127.0.0.1:1", "--hold-s", "0"], "--hold-s"),
])  # fmt: skip
def test_bad_settings_exit_2_naming_the_option(args, words):
    r = subprocess.run([sys.executable, "-m", "sparkctl.gateway", *args], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and words in r.stderr and "Traceback" not in r.stderr


def test_without_its_server_stack_the_gateway_says_what_to_install(tmp_path):
    (tmp_path / "aiohttp.py").write_text("raise ModuleNotFoundError(\"No module named 'aiohttp'\", name='aiohttp')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])])}
    r = subprocess.run([sys.executable, "-m", "sparkctl.gateway", "--upstream", "http://127.0.0.1:1"],
                       capture_output=True, text=True, timeout=30, env=env)  # fmt: skip
    assert r.returncode == 1 and "aiohttp is not installed" in r.stderr and "sparkctl[gateway]" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_the_gateway_imports_nothing_the_engines_image_lacks():
    # it runs from vLLM's image, which has aiohttp and prometheus_client but not sparkctl's CLI stack
    code = (
        "import sys, sparkctl.gateway.__main__, sparkctl.gateway.ctl;"
        "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('sparkctl', 'pydantic', 'typer', 'httpx', 'rich', 'yaml', 'paramiko', 'docker', 'jinja2', 'tenacity'))))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    # of sparkctl, only what is shipped to the head with it (launch/gateway_code.py)
    from sparkctl.launch import gateway_code

    shipped = {rel.removesuffix(".py").removesuffix("/__init__").replace("/", ".") for rel in gateway_code.files()}
    assert all(m in shipped for m in r.stdout.split()), r.stdout


def test_a_hold_that_overruns_answers_held_too_long_not_beyond_the_hold():
    # the hold expected the engine back in 0.1 s; it is not back when this request's 0.3 s are up
    from sparkctl.gateway.gate import HELD_TOO_LONG, Gate
    from sparkctl.gateway.metrics import Metrics
    from sparkctl.gateway.rejection import Rejected

    async def never() -> bool:
        return False

    async def run():
        gate = Gate(0.3, 60, 8, 0.05, never, Metrics())
        gate.start_hold("reload", expected_s=0.1)
        with pytest.raises(Rejected) as err:
            await gate.wait(gate.clock())
        return err.value

    rejected = asyncio.run(run())
    assert rejected.reason == HELD_TOO_LONG and "did not come back within 0.3 s" in rejected.message
