"""The front door on the lab (issue 19): the engine killed outside a change, long-context admission,
and the admin interface nobody on the network reaches.

One converged cluster for the module: the lab inventory with a 3 s `gateway.hold_s` (so a held
request is answered in seconds) and `gateway.long_context: {tokens: 60000, max_concurrent: 1}`.
Clients are the OpenAI Python client at max_retries=0 on the public port (the gateway); sparkctl's
view of the engine is the gateway's never-held engine route (the engine listens on the head's loopback). The module ends on the lab's own
inventory (`sparkctl up`); a test that leaves the engine down is brought back by `up` after it.
Doctor names a crashed engine behind the gateway (its gateway.engine check).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest
from labcli import HEAD_IP, URL, sparkctl, variant
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.lab

HEAD = HEAD_IP  # this lab's head (the file runs on the third lab: tests/conftest.py)
ENGINE = f"{URL}/gateway/engine"  # the engine itself (on the head's loopback), through the gateway, never held
NAME = "deepseek-v4.1-flash"
HOLD_S = 3
# The simulator crashes (like seed 002's CUDA device-side assert) when two requests of 65536 tokens
# or more are in one engine step (SIM_CRASH_CONTEXT_TOKENS); the gateway counts a prompt of more
# than LONG_TOKENS as long, so the prompts below are long to both.
LONG_TOKENS = 60000
LONG_WORDS = 70000  # one token per word in the simulator's tokenizer


@pytest.fixture(scope="module")
def gw_inv(lab, tmp_path_factory) -> Path:
    lab_inv = Path(lab.INVENTORY_PATH)
    inv = variant(lab_inv, tmp_path_factory.mktemp("gwlab"), "gwlab", gateway__hold_s=HOLD_S,
                  gateway__long_context={"tokens": LONG_TOKENS, "max_concurrent": 1})  # fmt: skip
    sparkctl("up", "-i", str(inv))  # restarts the gateway only (its own section changed)
    yield inv
    sparkctl("up", "-i", str(lab_inv))


@pytest.fixture(autouse=True)
def serving_again(gw_inv):
    """A test that killed or crashed the engine leaves it down when it fails: `up` brings it back."""
    yield
    if not engine_healthy():
        sparkctl("up", "-i", str(gw_inv), rc=None)


def engine_healthy() -> bool:
    try:
        return httpx.get(f"{ENGINE}/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def samples(url: str) -> dict[tuple[str, tuple], float]:
    """A Prometheus page as {(sample name, sorted labels): value}."""
    out = {}
    for fam in text_string_to_metric_families(httpx.get(url, timeout=10).text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def gateway_metrics() -> dict:
    """The gateway's own metrics ({} when nothing answers there as the gateway: then the clients'
    outcomes below say what is wrong)."""
    try:
        return samples(f"{URL}/gateway/metrics")
    except (httpx.HTTPError, ValueError):
        return {}


def delta(before: dict, after: dict, name: str, **labels) -> float:
    key = (name, tuple(sorted(labels.items())))
    return after.get(key, 0.0) - before.get(key, 0.0)


def engine_finished() -> float:
    """Requests the engine has finished, whatever their finish reason (vllm:request_success)."""
    return sum(v for (n, _), v in samples(f"{ENGINE}/metrics").items() if n == "vllm:request_success_total")


def gateway_status(lab) -> dict:
    r = lab.host_exec("head", ["docker", "exec", "sparkctl-gateway", "python3", "-m", "sparkctl.gateway.ctl", "status"])
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def started_at(lab, host: str, name: str) -> str:
    return lab.host_exec(host, ["docker", "inspect", "-f", "{{.State.StartedAt}}", name], check=True).stdout.strip()


@dataclass
class Outcome:
    kind: str  # ok | status | connection | empty | error
    status: int | None = None
    retry_after: str | None = None
    message: str = ""


def client() -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{URL}/v1", api_key="lab", max_retries=0, timeout=60)


def one_request(c: openai.OpenAI) -> Outcome:
    """One streamed chat completion, and what the client saw of it."""
    try:
        chunks = c.chat.completions.create(
            model=NAME, messages=[{"role": "user", "content": "Count from 1 to 10."}], max_tokens=8, temperature=0, stream=True
        )
        text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        return Outcome("ok" if text else "empty")
    except openai.APIStatusError as e:
        return Outcome("status", e.status_code, e.response.headers.get("retry-after"), e.message)
    except openai.APIConnectionError as e:
        return Outcome("connection", message=repr(e.__cause__))
    except Exception as e:  # noqa: BLE001 - any other failure is a failed request too
        return Outcome("error", message=repr(e))


def test_an_engine_killed_outside_a_change_is_held_then_503_and_up_brings_it_back(lab, gw_inv):
    """Cost: ~9 s (3 s of hold, one `doctor --only gateway`, one `up` that restarts the engine)."""
    before = gateway_metrics()
    lab.host_exec("head", ["docker", "kill", "sparkctl-head"], check=True)
    outcomes: list[Outcome] = []
    threads = [threading.Thread(target=lambda: outcomes.append(one_request(client()))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    # held, then 503 with Retry-After: hold_s (nothing expected), OpenAI-shaped; never refused
    assert [(o.kind, o.status, o.retry_after) for o in outcomes] == [("status", 503, str(HOLD_S))] * 3, outcomes
    assert all(f"did not come back within {HOLD_S} s" in o.message for o in outcomes), outcomes
    after = gateway_metrics()
    assert delta(before, after, "sparkctl_gateway_rejected_total", reason="held_too_long") == 3
    assert delta(before, after, "sparkctl_gateway_hold_seconds_count", outcome="rejected") == 3  # each was held first
    assert gateway_status(lab)["upstream_down_for_s"] is not None  # still holding on its own, waiting for /health
    doc = sparkctl("doctor", "-i", str(gw_inv), "--only", "gateway", rc=None)  # and doctor names it
    (check,) = [c for c in doc["checks"] if c["name"] == "gateway.engine"]
    assert check["status"] == "failed" and "has refused connections" in check["message"], check

    # `up` brings the engine back; clients sending back to back the whole time (staggered by 1 s, so
    # one of them is always within its hold_s when the engine returns) are held and sent on, or 503
    before = gateway_metrics()
    during: list[Outcome] = []
    stop = threading.Event()

    def load(offset: float) -> None:
        c = client()
        time.sleep(offset)
        while not stop.is_set():
            during.append(one_request(c))

    threads = [threading.Thread(target=load, args=(i * 1.0,)) for i in range(3)]
    for t in threads:
        t.start()
    try:
        sparkctl("up", "-i", str(gw_inv))
        time.sleep(1)  # and after it
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    # `up` holds the gateway before it restarts the engine (with the forecast start): a request that
    # would outwait its hold_s on that forecast gets 503 at once, Retry-After = the forecast
    bad = [
        o for o in during if not (o.kind == "ok" or (o.kind == "status" and o.status == 503 and (o.retry_after or "").isdigit()))
    ]
    assert bad == [], bad
    assert any(o.kind == "ok" for o in during)
    after = gateway_metrics()
    assert delta(before, after, "sparkctl_gateway_hold_seconds_count", outcome="sent") >= 1  # held, then served
    assert gateway_status(lab)["state"] == "passing" and engine_healthy()
    assert one_request(client()).kind == "ok"


def test_a_hold_left_by_a_change_killed_before_its_stop_is_released_by_the_next_up(lab, gw_inv):
    """A reload SIGKILLed after it told the gateway to hold and before the engine's stop leaves a
    serving engine behind a gateway that holds every request, then answers 503, until the hold's
    ttl. The next `up` has nothing to restart: it releases that hold, and its --check says so."""
    ctl = ["docker", "exec", "sparkctl-gateway", "python3", "-m", "sparkctl.gateway.ctl"]
    lab.host_exec("head", [*ctl, "hold", "--reason", "reload", "--expected-s", "2", "--ttl-s", "600"], check=True)
    try:
        held = one_request(client())
        assert held.kind == "status" and held.status == 503, held  # held hold_s (3 s), then 503
        plan = sparkctl("up", "-i", str(gw_inv), "--check")
        ops = {(r["host"], r["step"]): r.get("operations", []) for r in plan["results"]}
        assert ops[("head", "runtime")] == ["release"] and ops[("head", "stop")] == [], ops
        assert sparkctl("up", "-i", str(gw_inv))["changed"] == 1
        assert gateway_status(lab)["state"] == "passing"
        assert one_request(client()).kind == "ok"
        assert sparkctl("up", "-i", str(gw_inv))["changed"] == 0  # and a second run has nothing to do
    finally:
        lab.host_exec("head", [*ctl, "release"])


def test_the_gateway_runs_on_uvloop_from_the_runtime_image(lab, gw_inv):
    # vLLM's image ships uvloop (fastapi[standard] -> uvicorn[standard]); the gateway picks it up there
    r = lab.host_exec(
        "head", ["docker", "exec", "sparkctl-gateway", "python3", "-c", "import uvloop, aiohttp, prometheus_client"]
    )
    assert r.returncode == 0, r.stderr


def test_two_long_prompts_sent_together_run_one_after_the_other(lab, gw_inv):
    """Cost: ~2 s (two 70k-token prefills in the lab's simulator, one after the other).

    The order is read off the engine, not off clocks: each client, when its first token arrives,
    reads how many requests the engine has finished. The gateway sends the second long request on
    only after the first one's answer has ended, so the second's first token comes after the engine
    counted the first as finished: its reading is at least 1 whatever the threads' scheduling (a
    late reading only counts more), so this cannot fail when the gateway admits one at a time. Had
    both been at the engine at once, the first-token readings would be 0 (each answer runs a few
    hundred tokens on), and the simulator would have crashed on two long prompts in one step (the
    engine restarted, both streams failed) as seed 002's recipe does: that is what
    max_concurrent: 2 shows."""
    engine = started_at(lab, "head", "sparkctl-head")
    base = engine_finished()
    prompt = " ".join(f"w{i % 97}" for i in range(LONG_WORDS))
    readings: list[float] = []
    outcomes: list[tuple[str, str | None]] = []
    together = threading.Barrier(2)

    def long_request(i: int) -> None:
        c = client()
        together.wait()
        try:
            chunks = c.chat.completions.create(
                model=NAME, messages=[{"role": "user", "content": f"({i}) {prompt}"}], max_tokens=400, temperature=0, stream=True
            )
            first, finish = None, None
            for ch in chunks:
                if ch.choices and ch.choices[0].delta.content and first is None:
                    first = engine_finished() - base
                    readings.append(first)
                if ch.choices and ch.choices[0].finish_reason:
                    finish = ch.choices[0].finish_reason
            outcomes.append(("ok" if first is not None and finish in ("length", "stop") else f"empty ({finish})", "done"))
        except openai.APIError as e:
            outcomes.append((f"failed: {e!r}", None))

    threads = [threading.Thread(target=long_request, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert outcomes == [("ok", "done"), ("ok", "done")], outcomes
    assert len(readings) == 2 and max(readings) >= 1, readings  # the second began after the first finished
    assert started_at(lab, "head", "sparkctl-head") == engine  # the engine never crashed on both at once
    lc = gateway_status(lab)["long_context"]
    assert (lc["tokens"], lc["max_concurrent"], lc["running"], lc["waiting"]) == (LONG_TOKENS, 1, 0, 0)


def listeners(lab, pid: int, kind: str) -> set[str]:
    """What the process listens on in the head's network namespace: `-t` TCP ports, `-x` unix paths."""
    out = lab.host_exec("head", ["ss", "-Hlnp", kind], check=True).stdout
    return {line.split()[4 if kind == "-x" else 3].rsplit(":", 1)[-1] for line in out.splitlines() if f"pid={pid}," in line}


# Run in the worker's namespace: every admin route at the head's address, on the given ports; what
# came back, and whether it was the admin's (its status document, or the gateway's own metrics).
PROBE = """
import json, sys, urllib.request, urllib.error
out = {}
for port in json.loads(sys.argv[1]):
    for method, path, body in (("POST", "/hold", b'{"expected_s": 600, "reason": "intruder"}'), ("GET", "/status", None),
                               ("POST", "/release", b""), ("GET", "/metrics", None)):
        req = urllib.request.Request(f"http://{sys.argv[2]}:{port}{path}", data=body, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                status, text = r.status, r.read().decode(errors="replace")
        except urllib.error.HTTPError as e:
            status, text = e.code, e.read().decode(errors="replace")
        except OSError as e:
            status, text = None, repr(e)
        admin = '"hold_s"' in text or "sparkctl_gateway_" in text
        out[f"{port} {method} {path}"] = [status, admin, text[:200]]
print(json.dumps(out))
"""


def test_the_admin_interface_refuses_another_lab_host(lab, gw_inv):
    """Cost: ~2 s (a few HTTP requests from the worker's namespace, two docker execs)."""
    pid = int(lab.host_exec("head", ["docker", "inspect", "-f", "{{.State.Pid}}", "sparkctl-gateway"], check=True).stdout)
    ports = listeners(lab, pid, "-t")
    assert ports == {"8888"}, ports  # the public port alone: no admin port on TCP
    # its only other listener: the admin socket, on the head, 0600 root
    assert listeners(lab, pid, "-x") == {"/run/sparkctl-gateway/admin.sock"}
    st = lab.host_exec("head", ["stat", "-c", "%F %a %U", "/run/sparkctl-gateway/admin.sock"], check=True).stdout.split()
    assert st == ["socket", "600", "root"], st
    d = lab.host_exec("head", ["stat", "-c", "%a %U", "/run/sparkctl-gateway"], check=True).stdout.split()
    assert d == ["700", "root"], d  # its directory too: nobody but root on the head reaches the socket
    # from the worker: every admin route on every port the gateway opens, and on the engine's port
    r = lab.host_exec("worker", ["python3", "-c", PROBE, json.dumps(sorted({int(p) for p in ports} | {8001})), HEAD], timeout=120)
    assert r.returncode == 0, r.stderr
    answers = json.loads(r.stdout)
    assert [k for k, (_, admin, _) in answers.items() if admin] == [], answers  # nothing answered as the admin
    # on the public port they are the engine's routes: /hold, /status, /release are not (404)
    assert [answers[f"8888 {m} {p}"][0] for m, p in (("POST", "/hold"), ("GET", "/status"), ("POST", "/release"))] == [404] * 3
    status = gateway_status(lab)
    assert status["state"] == "passing" and status["hold"] is None, status  # the intruder's /hold held nothing
    assert one_request(client()).kind == "ok"
