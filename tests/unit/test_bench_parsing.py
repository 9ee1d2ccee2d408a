"""sparkctl bench's parsers on recorded server output: SSE streams, /metrics text, token sizes."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from sparkctl.bench import stats
from sparkctl.bench.longprompt import Calibration, filler, tagged
from sparkctl.cli.bench import parse_tokens
from sparkctl.errors import InputError
from sparkctl.facts.metrics import RUNNING, parse_page
from sparkctl.inventory.models import Runtime
from sparkctl.runtime.openai_client import Endpoint, normalise_endpoint

# A vLLM chat stream (ignore_eos, include_usage): a role chunk with empty content, text chunks of
# several tokens each (speculative decoding delivers accepted drafts together), a finish chunk,
# then the usage chunk with no choices, then [DONE].
RECORDED_SSE = (
    'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1761900000,"model":"deepseek-v4.1-flash",'
    '"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\r\n\r\n'
    'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1761900000,"model":"deepseek-v4.1-flash",'
    '"choices":[{"index":0,"delta":{"content":"1, 2, 3"},"logprobs":null,"finish_reason":null}]}\r\n\r\n'
    ": a comment line the parser must skip\r\n\r\n"
    'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1761900000,"model":"deepseek-v4.1-flash",'
    '"choices":[{"index":0,"delta":{"content":", 4, 5, 6"},"logprobs":null,"finish_reason":null}]}\r\n\r\n'
    'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1761900000,"model":"deepseek-v4.1-flash",'
    '"choices":[{"index":0,"delta":{"content":", 7"},"logprobs":null,"finish_reason":"length","stop_reason":null}]}\r\n\r\n'
    'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1761900000,"model":"deepseek-v4.1-flash",'
    '"choices":[],"usage":{"prompt_tokens":27,"total_tokens":40,"completion_tokens":13}}\r\n\r\n'
    "data: [DONE]\r\n\r\n"
)

# vLLM /metrics with two engines (data parallel), created-timestamps and per-position counters.
RECORDED_METRICS = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="deepseek-v4.1-flash"} 0.0
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="deepseek-v4.1-flash"} 100.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="deepseek-v4.1-flash"} 60.0
# HELP vllm:spec_decode_num_drafts_created Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_created gauge
vllm:spec_decode_num_drafts_created{engine="0",model_name="deepseek-v4.1-flash"} 1.7619e+09
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="deepseek-v4.1-flash"} 500.0
vllm:spec_decode_num_draft_tokens_total{engine="1",model_name="deepseek-v4.1-flash"} 300.0
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="deepseek-v4.1-flash"} 400.0
vllm:spec_decode_num_accepted_tokens_total{engine="1",model_name="deepseek-v4.1-flash"} 200.0
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="deepseek-v4.1-flash",position="0"} 95.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="deepseek-v4.1-flash",position="1"} 90.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="deepseek-v4.1-flash",position="0"} 55.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="deepseek-v4.1-flash",position="1"} 45.0
"""


def _stream_server(body: str, status: int = 200, content_type: str = "text/event-stream", piece: int = 7):
    """An httpx transport answering every request with `body`, delivered in small byte pieces
    so that events arrive split across reads, as they do over a real socket."""
    seen: list[dict] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        data = body.encode()

        async def pieces():
            for i in range(0, len(data), piece):
                yield data[i : i + piece]

        return httpx.Response(status, headers={"content-type": content_type}, content=pieces())

    return httpx.MockTransport(handler), seen


def _chat(body: str, **kw):
    transport, seen = _stream_server(body, **kw)
    ep = Endpoint("http://127.0.0.1:9/v1", "deepseek-v4.1-flash")
    request = ep.chat_body("Count from 1 to 200.", 13, 0.0, False, True)

    async def go():
        async with httpx.AsyncClient(transport=transport) as client:
            return await ep.chat(client, request)

    return asyncio.run(go()), seen


def test_stream_counts_tokens_from_usage_not_chunks():
    m, seen = _chat(RECORDED_SSE)
    assert m.error is None and m.ok
    assert (m.prompt_tokens, m.output_tokens) == (27, 13)
    assert len(m.chunk_times) == 3  # the empty role chunk is not a token
    assert m.finish_reason == "length"
    assert m.ttft is not None and m.ttft >= 0
    assert len(m.itls) == 2
    # what we asked for: the seed's sampling, usage in the stream, every token generated
    sent = seen[0]
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert sent["temperature"] == 0.0 and sent["chat_template_kwargs"] == {"enable_thinking": False}
    assert sent["ignore_eos"] is True and sent["min_tokens"] == sent["max_tokens"] == 13


def test_stream_without_done_is_an_error():
    truncated = RECORDED_SSE.split("data: [DONE]")[0]
    m, _ = _chat(truncated)
    assert not m.ok and "[DONE]" in m.error


def test_http_error_carries_the_servers_message():
    body = json.dumps(
        {
            "object": "error",
            "message": "This model's maximum context length is 327680 tokens.",
            "type": "BadRequestError",
            "code": 400,
        }
    )
    m, _ = _chat(body, status=400, content_type="application/json")
    assert not m.ok
    assert m.error.startswith("HTTP 400") and "maximum context length" in m.error


def test_error_event_mid_stream_fails_the_request():
    body = RECORDED_SSE.split("data: [DONE]")[0].rsplit("data: ", 1)[0]
    body += 'data: {"error": {"message": "EngineCore encountered a fatal error.", "code": 500}}\n\n'
    m, _ = _chat(body)
    assert not m.ok and "EngineCore" in m.error


def test_metrics_counters_sum_engines_and_skip_created():
    c = parse_page(RECORDED_METRICS, "deepseek-v4.1-flash").spec
    assert (c.drafts, c.draft_tokens, c.accepted_tokens) == (160.0, 800.0, 600.0)
    assert c.accepted_per_position == {0: 150.0, 1: 135.0}


def test_acceptance_from_a_delta():
    before = parse_page(RECORDED_METRICS).spec
    after_text = (
        RECORDED_METRICS.replace("} 100.0", "} 140.0")  # engine 0: +40 drafts
        .replace("} 500.0", "} 700.0")  # +200 draft tokens (5 per draft)
        .replace("} 400.0", "} 520.0")  # +120 accepted
        .replace("} 95.0", "} 131.0")  # position 0: +36
        .replace("} 90.0", "} 114.0")  # position 1: +24
    )
    d = parse_page(after_text).spec - before
    assert (d.drafts, d.draft_tokens, d.accepted_tokens) == (40.0, 200.0, 120.0)
    assert d.acceptance_rate == pytest.approx(60.0)  # percent, as vllm bench serve reports it
    assert d.acceptance_length == pytest.approx(4.0)  # 1 + 120 / 40
    assert d.per_position_acceptance_rates == pytest.approx([90.0, 60.0])


def test_counter_reset_counts_from_zero():
    before = parse_page(RECORDED_METRICS).spec
    restarted = parse_page(
        RECORDED_METRICS.replace("} 100.0", "} 4.0")
        .replace("} 60.0", "} 0.0")
        .replace("} 500.0", "} 20.0")
        .replace("} 300.0", "} 0.0")
        .replace("} 400.0", "} 10.0")
        .replace("} 200.0", "} 0.0")
    ).spec
    d = restarted - before
    assert (d.drafts, d.draft_tokens, d.accepted_tokens) == (4.0, 20.0, 10.0)


def test_model_filter_when_a_server_hosts_two_models():
    other = RECORDED_METRICS.replace('model_name="deepseek-v4.1-flash"', 'model_name="other"')
    both = RECORDED_METRICS + "\n".join(l for l in other.splitlines() if l and not l.startswith("#")) + "\n"
    assert parse_page(both, "deepseek-v4.1-flash").spec.drafts == 160.0
    assert parse_page(both, None).spec.drafts == 320.0


def test_running_requests_gauge():
    assert parse_page(RECORDED_METRICS, "deepseek-v4.1-flash").total(RUNNING) == 0.0
    busy = RECORDED_METRICS.replace('model_name="deepseek-v4.1-flash"} 0.0', 'model_name="deepseek-v4.1-flash"} 2.0')
    assert parse_page(busy).total(RUNNING) == 2.0
    assert parse_page("# TYPE other gauge\nother 1.0\n").total(RUNNING) is None


def test_no_spec_counters_means_none():
    plain = "\n".join(RECORDED_METRICS.splitlines()[:3]) + "\n"
    assert parse_page(plain).spec is None


def test_percentile_matches_numpy_linear():
    xs = [15.0, 20.0, 35.0, 40.0, 50.0]
    assert stats.percentile(xs, 99) == pytest.approx(49.6)
    assert stats.percentile(xs, 50) == 35.0
    assert stats.median([]) is None


@pytest.mark.parametrize(
    "text,tokens",
    [("262144", 262144), ("256K", 262144), ("262k", 262000), ("32k", 32000), ("32K", 32768), ("1.5k", 1500),
     ("80K", 81920), ("1m", 1000000), ("1M", 1048576)],
)  # fmt: skip
def test_token_counts_read_as_vllm_and_the_inventory_read_them(text, tokens):
    """`bench --context-sizes 32k` and `max_model_len: 32k` are one number (vLLM's human_readable_int)."""
    assert parse_tokens(text) == tokens
    runtime = {"image": "i:1", "model": "/m", "served_model_name": "m", "max_num_seqs": 1, "max_num_batched_tokens": 1}
    assert Runtime.model_validate({**runtime, "max_model_len": text}).max_model_len == tokens


def test_bad_token_count():
    with pytest.raises(ValueError):
        parse_tokens("lots")


def test_endpoint_urls():
    assert normalise_endpoint("http://127.0.0.1:8888") == "http://127.0.0.1:8888/v1"
    assert normalise_endpoint("http://127.0.0.1:8888/v1/") == "http://127.0.0.1:8888/v1"
    with pytest.raises(InputError):
        normalise_endpoint("127.0.0.1:8888")


def test_long_prompts_are_cold_and_sized_by_calibration():
    a, b = tagged(filler("prose", 10, 0), "q?"), tagged(filler("prose", 10, 0), "q?")
    assert a != b and a.split("\n", 1)[1] == b.split("\n", 1)[1]  # unique tag, same body
    cal = Calibration.from_probes(base_tokens=40, probe_tokens=40 + 256 * 19)
    assert cal.tokens_per_line == 19
    assert cal.lines_for(40 + 19 * 1000) == 1000
    assert cal.lines_for(10) == 0
