"""The simulator's HTTP API, metrics, speculative decoding model and failure modes.

Each server is a real `vllm serve` subprocess on 127.0.0.1 with small time scales; the checks use
httpx and prometheus_client's text parser, as sparkctl will against a real cluster.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sparkctl_lab.sim import calibration, harness

MODEL = "/models/DeepSeek-V4.1-Flash-1017"
NAME = "deepseek-v4.1-flash"
K = 5


class Server:
    def __init__(self, tmp, *extra: str, env: dict | None = None, name: str = "vllm"):
        self.port = harness.free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.faults = os.path.join(tmp, f"faults-{self.port}")
        e = {
            "SIM_TIME_SCALE": "0.001",
            "SIM_STEP_TIME_SCALE": "0.005",
            "SIM_FAULTS_FILE": self.faults,
            "VLLM_LOG_STATS_INTERVAL": "0.5",
            "VLLM_CACHE_ROOT": os.path.join(tmp, "cache"),
            **(env or {}),
        }
        argv = harness.module_argv(
            "vllm_cli",
            "serve",
            MODEL,
            "--served-model-name",
            NAME,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--max-model-len",
            "65536",
            "--max-num-seqs",
            "2",
            "--max-num-batched-tokens",
            "8192",
            "--block-size",
            "256",
            "--kv-cache-dtype",
            "fp8_ds_mla",
            "--gpu-memory-utilization",
            "0.85",
            "--moe-backend",
            "flashinfer_b12x",
            "--speculative-config",
            json.dumps({"method": "mtp", "num_speculative_tokens": K}),
            *extra,
        )
        self.proc = harness.Proc(name, argv, harness.sim_env(tmp, **e), os.path.join(tmp, f"{name}-{self.port}.log")).start()
        assert harness.wait_http(self.base + "/health", timeout=60, proc=self.proc), self.proc.log()[-3000:]
        self.client = httpx.Client(base_url=self.base, timeout=60)

    def metrics(self) -> dict:
        out: dict = {}
        for fam in text_string_to_metric_families(self.client.get("/metrics").text):
            for s in fam.samples:
                key = s.name + json.dumps({k: v for k, v in sorted(s.labels.items()) if k not in ("engine", "model_name")})
                out[key] = s.value
        return out

    def spec(self) -> dict:
        m = self.metrics()
        return {
            "drafts": m["vllm:spec_decode_num_drafts_total{}"],
            "draft_tokens": m["vllm:spec_decode_num_draft_tokens_total{}"],
            "accepted": m["vllm:spec_decode_num_accepted_tokens_total{}"],
        }

    def complete(self, prompt: str, **kw) -> dict:
        r = self.client.post("/v1/completions", json={"model": NAME, "prompt": prompt, "temperature": 0, **kw})
        assert r.status_code == 200, r.text
        return r.json()

    def stop(self) -> int | None:
        self.client.close()
        return self.proc.stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(str(tmp_path_factory.mktemp("serving")), env={"SIM_CRASH_CONTEXT_TOKENS": "0"})
    yield s
    s.stop()


def mean_acceptance(before: dict, after: dict) -> float:
    drafts = after["drafts"] - before["drafts"]
    return 1 + (after["accepted"] - before["accepted"]) / drafts


# ---- API shapes ----


def test_models_version_and_health(server):
    assert server.client.get("/health").status_code == 200
    assert server.client.get("/ping").status_code == 200
    assert server.client.get("/version").json() == {"version": "0.33.0"}
    models = server.client.get("/v1/models").json()
    assert models["object"] == "list"
    (m,) = models["data"]
    assert (m["id"], m["root"], m["max_model_len"], m["owned_by"]) == (NAME, MODEL, 65536, "vllm")


def test_completion_counts_and_is_deterministic_at_temperature_0(server):
    a = server.complete("Count from 1 to 10.", max_tokens=100)
    b = server.complete("Count from 1 to 10.", max_tokens=100)
    assert a["choices"][0]["text"] == b["choices"][0]["text"] == "1, 2, 3, 4, 5, 6, 7, 8, 9, 10"
    assert a["choices"][0]["finish_reason"] == "stop"
    # 7 prompt tokens (Count, from, 1, to, 10, .) -> words and punctuation, 19 output tokens
    assert a["usage"] == {"prompt_tokens": 6, "total_tokens": 25, "completion_tokens": 19, "prompt_tokens_details": None}
    c = server.complete("Tell me about the river.", max_tokens=40)
    assert c["choices"][0]["finish_reason"] == "length" and c["usage"]["completion_tokens"] == 40


def test_chat_completion_with_thinking_disabled(server):
    r = server.client.post(
        "/v1/chat/completions",
        json={
            "model": NAME,
            "messages": [{"role": "user", "content": "Write a Python function that sorts a list."}],
            "max_tokens": 32,
            "temperature": 0,
            "chat_template_kwargs": {"enable_thinking": False},
        },
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"]["role"] == "assistant"
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 32


def test_streaming_with_include_usage(server):
    events = []
    with server.client.stream(
        "POST",
        "/v1/chat/completions",
        json={
            "model": NAME,
            "messages": [{"role": "user", "content": "Tell me a story."}],
            "max_tokens": 50,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    ) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("data: "):
                events.append(line[6:])
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 50
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[:-1])
    assert text.strip()


def test_stream_options_without_stream_is_a_400(server):
    # a model_validator in completion/protocol.py: FastAPI's validation error through vLLM's handler
    r = server.client.post("/v1/completions", json={"model": NAME, "prompt": "hi", "stream_options": {"include_usage": True}})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["type"] == "Bad Request" and err["code"] == 400 and err["param"] == "stream_options"
    assert err["message"].startswith("1 validation error:\n  {'type': 'value_error', 'loc': 'body', ")
    assert "Stream options can only be defined when `stream=True`." in err["message"]


def test_prompt_longer_than_max_model_len_is_a_400(server):
    r = server.client.post("/v1/completions", json={"model": NAME, "prompt": "a " * 70000, "max_tokens": 1})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err == {
        "message": "This model's maximum context length is 65536 tokens. However, your prompt contains 70000 input "
        "tokens, which exceeds this limit even without any output tokens. Please reduce the length of "
        "the input prompt. (parameter=input_tokens, value=70000)",
        "type": "BadRequestError",
        "param": "input_tokens",
        "code": 400,
    }


def test_max_tokens_beyond_the_context_is_clamped_not_refused(server):
    # item 4: api_utils.get_max_tokens() takes min(max_model_len - prompt, max_tokens): no 400
    r = server.client.post(
        "/v1/completions", json={"model": NAME, "prompt": "a " * 65530, "max_tokens": 100, "ignore_eos": True, "temperature": 0}
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["usage"]["prompt_tokens"] == 65530 and body["usage"]["completion_tokens"] == 6
    assert body["choices"][0]["finish_reason"] == "length"
    # a prompt that fills the context leaves max_tokens 0: SamplingParams refuses it
    r = server.client.post("/v1/completions", json={"model": NAME, "prompt": "a " * 65536, "max_tokens": 5})
    assert (
        r.status_code == 400
        and r.json()["error"]["message"] == "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)"
    )


def test_negative_or_too_high_temperature_is_a_400(server):
    # item 5: sampling_params.py _verify_args()
    r = server.client.post("/v1/completions", json={"model": NAME, "prompt": "hi", "temperature": -1})
    assert r.status_code == 400
    assert r.json()["error"] == {
        "message": "temperature must be non-negative, got -1.0. (parameter=temperature, value=-1.0)",
        "type": "BadRequestError",
        "param": "temperature",
        "code": 400,
    }
    r = server.client.post(
        "/v1/chat/completions", json={"model": NAME, "messages": [{"role": "user", "content": "hi"}], "temperature": 2.5}
    )
    assert r.status_code == 400 and r.json()["error"]["message"].startswith("temperature must be in [0, 2], got 2.5.")
    assert (
        server.client.post("/v1/completions", json={"model": NAME, "prompt": "hi", "max_tokens": 2, "temperature": 0}).status_code
        == 200
    )


def test_invalid_json_and_wrong_method_answer_like_fastapi(server):
    # item 6: fastapi/routing.py's json_invalid through vLLM's validation handler
    r = server.client.post("/v1/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["type"] == "Bad Request" and err["code"] == 400 and err["param"] == "body.1"
    assert err["message"] == (
        "1 validation error:\n  {'type': 'json_invalid', 'loc': 'body.1', 'msg': 'JSON decode error', "
        "'input': '<dict of 0 items>', 'ctx': {'error': 'Expecting property name enclosed in double quotes'}}"
    )
    r = server.client.post("/v1/chat/completions", json={"model": NAME})
    assert r.status_code == 400 and r.json()["error"]["param"] == "body.messages"
    assert "'type': 'missing', 'loc': 'body.messages', 'msg': 'Field required'" in r.json()["error"]["message"]
    # a known route with another method is Starlette's 405 (with Allow), an unknown one its 404
    r = server.client.get("/v1/completions")
    assert r.status_code == 405 and r.json() == {"detail": "Method Not Allowed"} and r.headers["allow"] == "POST"
    assert server.client.post("/health").status_code == 405
    assert server.client.get("/v2/nothing").json() == {"detail": "Not Found"}


def test_a_body_no_route_read_does_not_corrupt_the_next_request_on_the_connection(server):
    # uvicorn reads an unrouted request's body off a keep-alive connection; a proxy's pooled
    # connection (the gateway's) would otherwise have its next request parsed from those bytes
    with httpx.Client(base_url=server.base, timeout=30) as c:  # one connection, kept alive
        assert c.post("/v2/nothing", json={"expected_s": 1}).status_code == 404
        assert c.post("/health", json={"x": 1}).status_code == 405
        r = c.post("/v1/completions", json={"model": NAME, "prompt": "hi", "max_tokens": 2})
        assert r.status_code == 200, r.text


def test_unknown_model_is_a_404(server):
    r = server.client.post("/v1/completions", json={"model": "other", "prompt": "hi"})
    assert r.status_code == 404
    assert r.json()["error"] == {
        "message": f"The model `other` does not exist. Valid aliases: {NAME}.",
        "type": "NotFoundError",
        "param": "model",
        "code": 404,
    }


# ---- metrics ----


def test_metrics_have_vllms_names_and_labels(server):
    server.complete("Tell me about the sea.", max_tokens=20)
    families = {f.name: f for f in text_string_to_metric_families(server.client.get("/metrics").text)}
    for name, kind in [
        ("vllm:num_requests_running", "gauge"),
        ("vllm:num_requests_waiting", "gauge"),
        ("vllm:kv_cache_usage_perc", "gauge"),
        ("vllm:prompt_tokens", "counter"),
        ("vllm:generation_tokens", "counter"),
        ("vllm:num_preemptions", "counter"),
        ("vllm:request_success", "counter"),
        ("vllm:prefix_cache_queries", "counter"),
        ("vllm:prefix_cache_hits", "counter"),
        ("vllm:time_to_first_token_seconds", "histogram"),
        ("vllm:inter_token_latency_seconds", "histogram"),
        ("vllm:e2e_request_latency_seconds", "histogram"),
        ("vllm:request_queue_time_seconds", "histogram"),
        ("vllm:spec_decode_num_drafts", "counter"),
        ("vllm:spec_decode_num_draft_tokens", "counter"),
        ("vllm:spec_decode_num_accepted_tokens", "counter"),
        ("vllm:spec_decode_num_accepted_tokens_per_pos", "counter"),
    ]:
        assert name in families, name
        fam = families[name]
        assert fam.type == kind, (name, fam.type)
        for s in fam.samples:
            assert s.labels["model_name"] == NAME and s.labels["engine"] == "0", s
    reasons = {s.labels["finished_reason"] for s in families["vllm:request_success"].samples if s.name.endswith("_total")}
    assert {"stop", "length", "abort"} <= reasons
    positions = {
        s.labels["position"]
        for s in families["vllm:spec_decode_num_accepted_tokens_per_pos"].samples
        if s.name.endswith("_total")
    }
    assert positions == {str(i) for i in range(K)}
    ttft = [s for s in families["vllm:time_to_first_token_seconds"].samples if s.name.endswith("_count")]
    assert ttft[0].value >= 1


def test_metrics_vllm_033_adds_are_exported(server):
    # item 8: series vLLM 0.33 exports that the simulator lacked, read the way sparkctl reads them
    from sparkctl.facts.metrics import parse_page

    prompt = "A cached prefix for the metrics test. " * 40
    server.complete(prompt, max_tokens=4)
    server.complete(prompt, max_tokens=4)
    text = server.client.get("/metrics").text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    waiting = {s.labels["reason"]: s.value for s in families["vllm:num_requests_waiting_by_reason"].samples}
    assert set(waiting) == {"capacity", "deferred"}
    sleep = {s.labels["sleep_state"]: s.value for s in families["vllm:engine_sleep_state"].samples}
    assert sleep == {"awake": 1.0, "weights_offloaded": 0.0, "discard_all": 0.0}
    page = parse_page(text, NAME)
    cached = page.total("vllm:prompt_tokens_cached_total")
    assert cached and cached == page.total("vllm:prompt_tokens_by_source_total", source="local_cache_hit")
    assert page.total("vllm:request_prefill_kv_computed_tokens_count") >= 2
    # cache_config_info: CacheConfig's every field as a label, kv_cache_size_tokens among them
    info = page.cache_config()["0"]
    assert {
        "block_size",
        "cache_dtype",
        "gpu_memory_utilization",
        "num_gpu_blocks",
        "kv_cache_size_tokens",
        "kv_cache_max_concurrency",
        "enable_prefix_caching",
        "prefix_caching_hash_algo",
        "_block_size_resolved",
    } <= set(info)
    state = server.client.get("/sim/state").json()
    assert page.kv_cache_size_tokens() == {"0": state["kv_pool_tokens"]} and info["block_size"] == "256"


def test_max_num_seqs_queueing_is_visible_in_metrics(server):
    before = server.metrics()
    harness.set_faults(server.base, server.faults, "slow_decode=40\n")  # hold requests in flight long enough to look
    threads = [
        threading.Thread(target=server.complete, args=(f"Tell me about place {i}.",), kwargs={"max_tokens": 120})
        for i in range(4)
    ]
    for t in threads:
        t.start()
    seen = None
    end = time.monotonic() + 10
    while time.monotonic() < end:
        m = server.metrics()
        running, waiting = m["vllm:num_requests_running{}"], m["vllm:num_requests_waiting{}"]
        if running == 2 and waiting == 2:
            seen = (running, waiting, m["vllm:kv_cache_usage_perc{}"])
            break
        time.sleep(0.02)
    os.remove(server.faults)
    for t in threads:
        t.join(30)
    assert seen is not None, "never saw 2 running + 2 waiting with max_num_seqs=2"
    assert seen[2] > 0
    m = server.metrics()
    assert m["vllm:num_requests_running{}"] == 0 and m["vllm:num_requests_waiting{}"] == 0
    queued = m["vllm:request_queue_time_seconds_count{}"] - before["vllm:request_queue_time_seconds_count{}"]
    waited = m["vllm:request_queue_time_seconds_sum{}"] - before["vllm:request_queue_time_seconds_sum{}"]
    assert queued == 4 and waited > 0.05, (queued, waited)


def test_a_non_streaming_client_that_goes_away_has_its_request_aborted(server):
    # vLLM's @with_cancellation: the handler is cancelled and the request aborted (its slot freed),
    # not run to its end for nobody
    before = server.metrics()
    harness.set_faults(server.base, server.faults, "slow_decode=400\n")  # 2000 tokens: far longer than the client waits
    try:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(
                f"{server.base}/v1/completions",
                timeout=httpx.Timeout(10, read=1.0),
                json={"model": NAME, "prompt": "Count from 1 to 5000:", "max_tokens": 2000, "ignore_eos": True},
            )
        end = time.monotonic() + 10
        while time.monotonic() < end and server.metrics()["vllm:num_requests_running{}"] != 0:
            time.sleep(0.1)
        m = server.metrics()
    finally:
        os.remove(server.faults)
    assert m["vllm:num_requests_running{}"] == 0 and m["vllm:num_requests_waiting{}"] == 0
    assert m["vllm:kv_cache_usage_perc{}"] == 0  # its KV blocks are free again
    for reason in ("length", "abort"):
        # not decoded to max_tokens; and not counted at all: AsyncLLM.abort drops the request's state in
        # the output processor (v1/engine/output_processor.py abort_requests), so no finished stats
        done = f'vllm:request_success_total{{"finished_reason": "{reason}"}}'
        assert m.get(done, 0) == before.get(done, 0), reason


def test_a_hung_engine_takes_a_gone_clients_abort_only_when_it_steps_again(server):
    # EngineCore takes an abort between steps (core.py _process_input_queue): stuck in its step (the
    # `hang` fault, a wedged collective) it holds the request, and /metrics shows it still running
    import socket

    body = json.dumps({"model": NAME, "prompt": "Count from 1 to 5000:", "max_tokens": 2000, "ignore_eos": True})
    harness.set_faults(server.base, server.faults, "slow_decode=400\n")  # 2000 tokens: far longer than this test
    client = socket.create_connection(("127.0.0.1", server.port))
    try:
        client.sendall(
            f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n{body}".encode()
        )
        end = time.monotonic() + 10
        while server.metrics()["vllm:num_requests_running{}"] != 1:
            assert time.monotonic() < end, "the request never ran"
            time.sleep(0.05)
        harness.set_faults(server.base, server.faults, "slow_decode=400\nhang\n")
        client.close()  # the client goes while the engine hangs
        time.sleep(1.0)  # the server has seen it go
        held = server.metrics()
        harness.set_faults(server.base, server.faults, "")  # the engine steps again
        while server.metrics()["vllm:num_requests_running{}"] != 0:
            assert time.monotonic() < end + 10, "the abort never came through"
            time.sleep(0.05)
        after = server.metrics()
    finally:
        client.close()
        if os.path.exists(server.faults):
            os.remove(server.faults)
    assert held["vllm:num_requests_running{}"] == 1 and held["vllm:kv_cache_usage_perc{}"] > 0
    assert after["vllm:kv_cache_usage_perc{}"] == 0  # then its slot and KV blocks are free


def test_prefix_cache_hits_on_a_repeated_prompt(server):
    prompt = "Summarise this report. " + "The quarterly numbers were steady and the outlook is calm. " * 300
    before = server.metrics()
    server.complete(prompt, max_tokens=4)
    server.complete(prompt, max_tokens=4)
    after = server.metrics()
    queries = after["vllm:prefix_cache_queries_total{}"] - before["vllm:prefix_cache_queries_total{}"]
    hits = after["vllm:prefix_cache_hits_total{}"] - before["vllm:prefix_cache_hits_total{}"]
    assert hits >= queries / 2 - 256


# ---- speculative decoding ----

PROMPTS = {
    "counting": "Count from 1 to 3000.",
    "code": "Write a Python function that parses a CSV file and returns rows.",
    "prose": "Describe a walk through the hills in autumn.",
}


def measure(server, prompt: str, max_tokens: int) -> tuple[float, int]:
    before = server.spec()
    out = server.complete(prompt, max_tokens=max_tokens, ignore_eos=True)
    return mean_acceptance(before, server.spec()), out["usage"]["prompt_tokens"]


def test_acceptance_depends_on_the_workload_and_matches_the_configured_model(server):
    state = server.client.get("/sim/state").json()
    p = state["acceptance"]
    measured = {}
    for workload, prompt in PROMPTS.items():
        mal, prompt_len = measure(server, prompt, 1500)
        expected = calibration.expected_acceptance_length(
            p[workload], K, prompt_len + 750, state["acceptance_decay"], state["acceptance_decay_tokens"]
        )
        print(f"{workload}: mean acceptance length measured {mal:.3f}, configured {expected:.3f}")
        assert abs(mal - expected) / expected < 0.04, (workload, mal, expected)
        measured[workload] = mal
    assert measured["counting"] > measured["code"] > measured["prose"]
    # the engine's stats line, every VLLM_LOG_STATS_INTERVAL (10 s): run alone, this test ends sooner
    line = re.compile(
        r"SpecDecoding metrics: Mean acceptance length: \d\.\d\d, .* Per-position acceptance rate: "
        r"(\d\.\d{3}, ){4}\d\.\d{3}, Avg Draft acceptance rate: \d+\.\d%"
    )
    deadline = time.monotonic() + 15
    while not line.search(log := server.proc.log()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert line.search(log), log[-2000:]


def test_acceptance_decays_with_context(server):
    state = server.client.get("/sim/state").json()
    short, short_len = measure(server, PROMPTS["code"], 300)
    long_prompt = PROMPTS["code"] + "\n" + "def f(x): return x\n" * 5000  # ~40K tokens of code context
    long, long_len = measure(server, long_prompt, 300)
    expected = calibration.expected_acceptance_length(
        state["acceptance"]["code"], K, long_len + 150, state["acceptance_decay"], state["acceptance_decay_tokens"]
    )
    print(f"code acceptance: {short:.2f} at {short_len} tokens, {long:.2f} at {long_len} tokens (configured {expected:.2f})")
    assert long_len > 40000
    assert long < short - 0.7
    assert abs(long - expected) / expected < 0.05


def test_head_of_line_a_short_request_waits_behind_a_long_cold_prompt(tmp_path):
    # A server of its own whose steps run 20x slower than the module's: the 60K-token prefill lasts ~2 s
    # instead of ~0.1 s, so the short request is sent while it is still in prefill even on a loaded machine
    # (at 0.005 a CI run saw the prefill end before the metrics poll did).
    server = Server(str(tmp_path), env={"SIM_CRASH_CONTEXT_TOKENS": "0", "SIM_STEP_TIME_SCALE": "0.1"}, name="hol")
    try:
        head_of_line(server)
    finally:
        server.stop()


def head_of_line(server: Server) -> None:
    def ttft(prompt: str, results: dict, key: str) -> None:
        t0 = time.monotonic()
        with server.client.stream(
            "POST", "/v1/completions", json={"model": NAME, "prompt": prompt, "max_tokens": 5, "stream": True}
        ) as r:
            lines = r.iter_lines()
            for line in lines:
                if line.startswith("data: {"):
                    results[key] = time.monotonic() - t0
                    results[key + "_at"] = time.monotonic()
                    break
            for _ in lines:
                pass

    solo: dict = {}
    ttft("Hello there.", solo, "short")
    results: dict = {}
    long_prompt = "An unseen document. " + " ".join(f"w{i}" for i in range(60000))
    t_long = threading.Thread(target=ttft, args=(long_prompt, results, "long"))
    t_long.start()
    end = time.monotonic() + 10
    while server.metrics()["vllm:num_requests_running{}"] < 1 and time.monotonic() < end:
        time.sleep(0.002)  # the long prompt is in prefill
    sent_during_prefill = "long" not in results
    ttft("Hello again.", results, "short")
    t_long.join(30)
    print(f"short TTFT alone {solo['short'] * 1000:.1f} ms, behind a 60K-token cold prompt {results['short'] * 1000:.1f} ms")
    # Order, not a ratio of wall times (a loaded machine stretches both): sent while the long prompt was
    # still in prefill, it got its first token only once that prefill was done. Both first tokens come
    # out of the step that ends the prefill, and which client thread reads its own first is the
    # machine's choice (a CI run: the short one 38 ms first); a short request that did not wait would
    # have had its token most of the prefill (~2 s here) before the long one.
    assert sent_during_prefill
    assert results["short_at"] >= results["long_at"] - 0.25 * results["long"], (results, solo)


# ---- Marlin fallback ----


def test_marlin_fallback_warns_and_decodes_at_half_speed(tmp_path, server):
    marlin = Server(str(tmp_path), "--moe-backend", "marlin", name="marlin")
    try:
        log = marlin.proc.log()
        # An NVFP4 checkpoint on Marlin: marlin_utils_fp4.py's warning and the backend by its enum name (nvfp4.py).
        assert "Weight-only FP4 compression will be used leveraging the Marlin kernel" in log
        assert "Using 'MARLIN' NvFp4 MoE backend out of potential backends: [" in log
        assert "FLASHINFER_B12X'" not in log
        b12x_log = server.proc.log()
        assert "Using 'FLASHINFER_B12X' NvFp4 MoE backend out of potential backends: ['FLASHINFER_TRTLLM'," in b12x_log
        assert "leveraging the Marlin kernel" not in b12x_log
        step = lambda text: float(re.search(r"decode step ([\d.]+) ms at 1 stream", text).group(1))  # noqa: E731
        slow, fast = step(log), step(b12x_log)
        print(f"decode step: flashinfer_b12x {fast} ms, marlin {slow} ms")
        assert slow > 1.6 * fast
        assert marlin.client.get("/sim/state").json()["marlin"] is True
    finally:
        marlin.stop()


# ---- the seeds' crash ----


def test_concurrent_long_context_requests_crash_the_engine(tmp_path):
    s = Server(str(tmp_path), env={"SIM_CRASH_CONTEXT_TOKENS": "3000", "SIM_DEATH_LINGER": "3"}, name="crash")
    statuses: list[int] = []

    def long_request(i: int) -> None:
        try:
            r = s.client.post(
                "/v1/completions",
                json={"model": NAME, "prompt": f"doc {i} " + "word " * 3500, "max_tokens": 20000, "ignore_eos": True},
            )
            statuses.append(r.status_code)
        except httpx.HTTPError:
            statuses.append(-1)

    # the engine holds its steps until both have arrived, so they meet in one, and each would decode
    # for seconds: on a busy machine the second came after the first's ~20 ms of simulated work with
    # 200 tokens had ended (CI's floors run met it)
    harness.set_faults(s.base, s.faults, "hang\n")
    threads = [threading.Thread(target=long_request, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    time.sleep(1.0)  # both sent (a held engine publishes no gauge to wait on, as vLLM's would not)
    os.unlink(s.faults)
    for t in threads:
        t.join(30)
    assert statuses and all(code != 200 for code in statuses), statuses
    assert s.client.get("/health").status_code == 503
    rc = s.proc.wait(20)
    log = s.proc.log()
    assert rc == 1
    assert "device-side assert triggered" in log
    assert log.index("device-side assert triggered") < log.index("EngineCore encountered a fatal error.")
    s.client.close()


# ---- SIGTERM ----


def _stream_until_done(s: Server, out: dict, max_tokens: int, ignore_eos: bool = False) -> None:
    body = {"model": NAME, "prompt": "Tell me a long story.", "max_tokens": max_tokens, "stream": True}
    if ignore_eos:  # all max_tokens for sure: the simulator, as a model, may end at an EOS before
        body["ignore_eos"] = True
    try:
        with s.client.stream("POST", "/v1/completions", json=body) as r:
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    out["started"] = True
                    chunk = json.loads(line[6:])
                    if chunk["choices"] and chunk["choices"][0]["finish_reason"]:
                        out["finish_reason"] = chunk["choices"][0]["finish_reason"]
    except httpx.HTTPError as e:
        out["error"] = repr(e)


def test_sigterm_drains_in_flight_while_health_stays_200_and_new_requests_end_empty_with_abort(tmp_path):
    # vLLM 0.33 during its drain (entrypoints/launchers/launcher.py keeps the HTTP server up while
    # engine_client.shutdown(timeout) runs): /health is 200 (instrumentator/health.py, 503 only on a
    # dead engine) and a new request reaches EngineCore, which finishes it at once as aborted
    # (v1/engine/core.py _reject_add_in_shutdown): a 200 with no content, not an error status.
    import openai

    s = Server(str(tmp_path), "--shutdown-timeout", "20", env={"SIM_STEP_TIME_SCALE": "0.5"}, name="drain")  # 400 tokens: ~3 s
    out: dict = {}
    t = threading.Thread(target=_stream_until_done, args=(s, out, 400))
    t.start()
    end = time.monotonic() + 10
    while not out.get("started") and time.monotonic() < end:
        time.sleep(0.01)
    before = s.metrics()
    s.proc.signal(signal.SIGTERM)
    assert s.proc.wait_log("[shutdown] EngineCore: draining in-flight requests count=1 timeout=", timeout=10)
    oa = openai.OpenAI(base_url=s.base + "/v1", api_key="none", max_retries=0, timeout=10)
    try:
        health = s.client.get("/health").status_code
        chunks = list(
            oa.chat.completions.create(
                model=NAME,
                messages=[{"role": "user", "content": "Count from 1 to 10."}],
                max_tokens=20,
                stream=True,
                stream_options={"include_usage": True},
            )
        )
        chat = oa.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "Hello"}], max_tokens=20)
        text = oa.completions.create(model=NAME, prompt="Count from 1 to 10.", max_tokens=20)
        during = s.metrics()
    finally:
        oa.close()
    t.join(30)
    rc = s.proc.wait(30)
    assert health == 200
    # the stream: the role chunk, then at once an empty delta finished `abort`, then usage with no tokens
    finished = [c.choices[0] for c in chunks if c.choices and c.choices[0].finish_reason]
    assert [f.finish_reason for f in finished] == ["abort"]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == ""
    assert chunks[-1].usage.completion_tokens == 0
    # non-streaming: a 200 whose one choice is empty and finished `abort`
    assert (chat.choices[0].finish_reason, chat.choices[0].message.content, chat.usage.completion_tokens) == ("abort", "", 0)
    assert (text.choices[0].finish_reason, text.choices[0].text) == ("abort", "")
    # the engine counts them as aborted (output_processor.py: the abort output it was sent), and never ran them
    aborted = 'vllm:request_success_total{"finished_reason": "abort"}'
    assert during[aborted] - before.get(aborted, 0) == 3
    assert during["vllm:num_requests_running{}"] + during["vllm:num_requests_waiting{}"] == 1  # only the drained one
    # the request in flight at SIGTERM ran to its end
    assert out.get("finish_reason") == "length", out
    assert rc == 0
    assert "request processing complete; starting resource teardown" in s.proc.log()  # vLLM 0.33 core.py:1743
    s.client.close()


def test_sigterm_with_zero_timeout_aborts_in_flight(tmp_path):
    s = Server(str(tmp_path), "--shutdown-timeout", "0", env={"SIM_STEP_TIME_SCALE": "0.1"}, name="abort")
    out: dict = {}
    t = threading.Thread(target=_stream_until_done, args=(s, out, 2000))
    t.start()
    end = time.monotonic() + 10
    while not out.get("started") and time.monotonic() < end:
        time.sleep(0.01)
    t0 = time.monotonic()
    s.proc.signal(signal.SIGTERM)
    t.join(30)
    rc = s.proc.wait(30)
    assert out.get("finish_reason") == "abort" or "error" in out, out
    assert rc == 0 and time.monotonic() - t0 < 5
    s.client.close()


def test_max_tokens_beyond_max_model_len_itself_is_a_400(server):
    # renderers/params.py TokenizeParams.__post_init__: max_tokens > max_model_len, whatever the prompt
    r = server.client.post("/v1/completions", json={"model": NAME, "prompt": "hi", "max_tokens": 65537})
    assert r.status_code == 400 and r.json()["error"] == {
        "message": "max_tokens=65537 cannot be greater than max_model_len=65536. Please request fewer output tokens. "
        "(parameter=max_tokens, value=65537)",
        "type": "BadRequestError",
        "param": "max_tokens",
        "code": 400,
    }
    r = server.client.post(
        "/v1/chat/completions",
        json={"model": NAME, "messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 70000},
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "max_completion_tokens"
    assert server.client.post("/v1/completions", json={"model": NAME, "prompt": "hi", "max_tokens": 65536}).status_code == 200


def test_min_tokens_above_the_clamped_max_tokens_is_a_400(server):
    # sampling_params.py _verify_args(): min_tokens against max_tokens after get_max_tokens() clamped it
    r = server.client.post("/v1/completions", json={"model": NAME, "prompt": "a " * 65530, "max_tokens": 100, "min_tokens": 10})
    assert r.status_code == 400 and r.json()["error"] == {
        "message": "min_tokens must be less than or equal to max_tokens=6, got 10.",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }
    r = server.client.post("/v1/completions", json={"model": NAME, "prompt": "hi", "max_tokens": 4, "min_tokens": -1})
    assert r.status_code == 400 and "min_tokens must be greater than or equal to 0, got -1." == r.json()["error"]["message"]
    assert (
        server.client.post("/v1/completions", json={"model": NAME, "prompt": "hi", "max_tokens": 4, "min_tokens": 4}).status_code
        == 200
    )


def test_a_missing_api_key_is_a_401_in_the_middlewares_shape(tmp_path):
    # entrypoints/serve/middleware/authenticate.py: {"error": "Unauthorized"}, before any route (even an unknown one)
    s = Server(str(tmp_path), "--api-key", "sekret", name="auth")
    try:
        for path in ("/v1/models", "/v1/no-such-route"):
            r = s.client.get(path)
            assert r.status_code == 401 and r.json() == {"error": "Unauthorized"}
        assert s.client.get("/v1/models", headers={"Authorization": "bearer sekret"}).status_code == 200  # any case
        assert s.client.get("/v1/models", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert s.client.get("/health").status_code == 200  # not guarded
    finally:
        s.stop()
