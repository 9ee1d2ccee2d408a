"""The front door through a drain sparkctl did not start (issue 37): `docker restart` of the head's
engine by hand, with clients streaming through the gateway. vLLM (here the lab's simulator) drains
on SIGTERM: /health stays 200 and every new request is answered 200 with an empty `abort`; the
gateway holds those instead of passing them on, and sends them when the engine serves again.

Runs on the lab's converged cluster as it is (its own inventory: hold_s 30, shutdown_timeout 10);
clients are the real OpenAI Python client at max_retries=0 on the public port. The head restarted
alone does not serve again (its worker is gone: the keeper's case, tests/lab/test_keeper_lab.py):
once the drain is over and requests are held, `sparkctl restart` brings the group back, and the
held requests are sent on.
"""

from __future__ import annotations

import threading
import time

import httpx
import openai
import pytest
from labcli import URL, sparkctl
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.lab

NAME = "deepseek-v4.1-flash"
ENGINE = f"{URL}/gateway/engine"  # the engine itself, through the gateway, never held
# the gateway's 503s for a request it could not hold long enough (sparkctl/gateway/metrics.py)
PAST_THE_HOLD = ("held_too_long", "hold_too_long")


def engine_healthy() -> bool:
    try:
        return httpx.get(f"{ENGINE}/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def gateway_metric(name: str, **labels: str) -> float:
    for fam in text_string_to_metric_families(httpx.get(f"{URL}/gateway/metrics", timeout=10).text):
        for s in fam.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    return 0.0


def one_request(c: openai.OpenAI, max_tokens: int) -> tuple[str, str]:
    """One streamed chat completion: ("ok", text) or what the client saw instead."""
    try:
        chunks = c.chat.completions.create(
            model=NAME, messages=[{"role": "user", "content": "Count from 1 to 50."}], max_tokens=max_tokens,
            temperature=0, stream=True, extra_body={"ignore_eos": True},
        )  # fmt: skip
        text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        return ("ok" if text else "empty", text[:40])
    except openai.APIStatusError as e:
        return (f"status {e.status_code}", e.message[:200])
    except openai.APIConnectionError as e:
        return ("connection", repr(e.__cause__))
    except openai.APIError as e:  # an error event in the stream
        return ("error event", e.message[:200])


def test_a_docker_restart_of_the_engine_by_hand_gives_no_client_an_empty_answer(lab):
    """Cost: the engine's drain (~5 s) and a warm `sparkctl restart`."""
    sparkctl("up", "-i", str(lab.INVENTORY_PATH))  # converged, the gateway running this tree's code
    assert engine_healthy()
    drained_before = gateway_metric("sparkctl_gateway_upstream_errors_total", kind="drain")
    sent_before = gateway_metric("sparkctl_gateway_hold_seconds_count", outcome="sent")
    past_hold_before = sum(gateway_metric("sparkctl_gateway_rejected_total", reason=r) for r in PAST_THE_HOLD)
    stop = threading.Event()
    outcomes: list[tuple[str, str]] = []
    long_outcome: list[tuple[str, str]] = []

    def load() -> None:
        c = openai.OpenAI(base_url=f"{URL}/v1", api_key="lab", max_retries=0, timeout=120)
        while not stop.is_set():
            outcomes.append(one_request(c, 8))

    def long_user() -> None:  # in flight when the drain begins: the drain lasts while it runs
        c = openai.OpenAI(base_url=f"{URL}/v1", api_key="lab", max_retries=0, timeout=120)
        long_outcome.append(one_request(c, 3000))  # ~5 s on the lab's simulator, within its 10 s drain

    clients = [threading.Thread(target=load, daemon=True) for _ in range(3)]
    long = threading.Thread(target=long_user, daemon=True)
    try:
        for t in clients:
            t.start()
        while len(outcomes) < 6:
            time.sleep(0.05)
        long.start()
        time.sleep(0.5)
        lab.host_exec("head", ["docker", "restart", "sparkctl-head"], check=True)  # SIGTERM, drain, start again
        # the drain is over (docker restart returns once the container started again); the clients'
        # requests wait at the gateway, which was told nothing; then the group is brought back
        deadline = time.monotonic() + 90
        while gateway_metric("sparkctl_gateway_held_requests") < 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        sparkctl("restart", "-i", str(lab.INVENTORY_PATH), "--yes")
        came_back = engine_healthy()
        after_back = len(outcomes)
        while came_back and len(outcomes) < after_back + 6 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        for t in [*clients, long]:
            t.join(150)
        drained = gateway_metric("sparkctl_gateway_upstream_errors_total", kind="drain") - drained_before
        sent = gateway_metric("sparkctl_gateway_hold_seconds_count", outcome="sent") - sent_before
        past_hold = sum(gateway_metric("sparkctl_gateway_rejected_total", reason=r) for r in PAST_THE_HOLD) - past_hold_before
        if not engine_healthy():
            sparkctl("up", "-i", str(lab.INVENTORY_PATH))
    kinds = {k for k, _ in outcomes}
    print(f"docker restart: serving after `sparkctl restart` {came_back}; {len(outcomes)} short requests {sorted(kinds)}; the long one "
          f"{long_outcome[0][0] if long_outcome else None}; {drained:g} empty abort(s) held, {sent:g} held request(s) sent on")  # fmt: skip
    assert "empty" not in kinds and long_outcome and long_outcome[0][0] != "empty", (outcomes, long_outcome)
    # every short request was served, or answered 503 because it could not be held long enough: one held
    # since the drain has less than hold_s (30 s) left when `sparkctl restart` announces its expected
    # length (answered at once), or outlives it (a slow machine's drain and restart); none refused
    assert kinds <= {"ok", "status 503"}, [o for o in outcomes if o[0] not in ("ok", "status 503")]
    answered_503 = sum(1 for k, _ in outcomes if k == "status 503")
    assert answered_503 == past_hold, (answered_503, past_hold, [o for o in outcomes if o[0] != "ok"])
    # the drain was met: empty aborts were held, not passed on, and held requests were sent on
    assert drained >= 1, (came_back, long_outcome, outcomes[-20:])
    if came_back:
        assert sum(1 for k, _ in outcomes[after_back:] if k == "ok") >= 6, outcomes[after_back:]  # it serves again
        assert sent >= 1
        assert long_outcome[0][0] in ("ok", "error event"), long_outcome  # finished in the drain, or cut at its end
