"""Write vllm033-2engines-idle.prom: the /metrics page of an idle two-engine vLLM 0.33 server
that has served speculative traffic since it started (no GPU server was at hand to scrape).

    python tests/unit/recorded/status/record.py

The series are vLLM 0.33's own (vllm-0.33.0 wheel: vllm/v1/metrics/loggers.py:499 labelnames
["model_name", "engine"], :528 num_requests_running, :538 num_requests_waiting, :620
kv_cache_usage_perc, :748 prompt_tokens, :799 generation_tokens; vllm/v1/spec_decode/metrics.py:229
num_drafts, num_draft_tokens, num_accepted_tokens, :255 num_accepted_tokens_per_pos with
position 0..k-1), with their documentation strings, exposed by prometheus_client's
generate_latest as vLLM's /metrics does. Values: num_speculative_tokens 5, 1000 drafts over both
engines, 3600 of 5000 draft tokens accepted: acceptance rate 72 %, mean acceptance length
1 + 3600/1000 = 4.6. Nothing runs, so two scrapes a second apart give the same page.
"""

from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

MODEL = "deepseek-v4.1-flash"
LABELS = ["model_name", "engine"]
ENGINES = {  # engine -> drafts, draft tokens, accepted per position (k = 5)
    "0": (600, 3000, [570, 500, 420, 370, 300]),
    "1": (400, 2000, [380, 335, 285, 240, 200]),
}

registry = CollectorRegistry()
running = Gauge("vllm:num_requests_running", "Number of requests in model execution batches.", LABELS, registry=registry)
waiting = Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", LABELS, registry=registry)
kv = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", LABELS, registry=registry)
prompt = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", LABELS, registry=registry)
generation = Counter("vllm:generation_tokens", "Number of generation tokens processed.", LABELS, registry=registry)
drafts = Counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", LABELS, registry=registry)
draft_tokens = Counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", LABELS, registry=registry)
accepted = Counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", LABELS, registry=registry)
per_pos = Counter("vllm:spec_decode_num_accepted_tokens_per_pos", "Accepted tokens per draft position.",
                  LABELS + ["position"], registry=registry)  # fmt: skip

for engine, (n_drafts, n_draft_tokens, per_position) in ENGINES.items():
    lv = (MODEL, engine)
    running.labels(*lv).set(0)
    waiting.labels(*lv).set(0)
    kv.labels(*lv).set(0.0)
    prompt.labels(*lv).inc(41250 if engine == "0" else 27500)
    generation.labels(*lv).inc(4600 * n_drafts // 1000)  # 4.6 tokens per step, as accepted above
    drafts.labels(*lv).inc(n_drafts)
    draft_tokens.labels(*lv).inc(n_draft_tokens)
    accepted.labels(*lv).inc(sum(per_position))
    for pos, n in enumerate(per_position):
        per_pos.labels(*lv, str(pos)).inc(n)

text = generate_latest(registry).decode()
# _created samples carry the wall time of this run: fixed, so re-recording changes nothing else
text = "\n".join(line if "_created{" not in line else line.rsplit(" ", 1)[0] + " 1.7645e+09" for line in text.splitlines())
(Path(__file__).resolve().parent / "vllm033-2engines-idle.prom").write_text(text + "\n")
