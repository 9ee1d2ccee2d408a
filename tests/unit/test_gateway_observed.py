"""The front door seen from outside: its metrics read as facts (facts/gateway.py) from a real
gateway process (test_gateway.Gateway: `python -m sparkctl.gateway` on loopback) in front of a
small real upstream, and doctor's gateway checks judging those facts with the recorded lab's
host facts (the cluster lock as the head's `lock` fact reads it).

Nothing of ours is mocked: the gateway holds because its admin socket was told to, the engine is
down because nothing listens on its port, a stream is empty because the upstream sent it so.
"""

from __future__ import annotations

import json
import threading

import clirun
import pytest
from controlfiles import usable_here
from test_checks import INV, H, by, edit, run, sections
from test_checks_state import lock_text
from test_gateway import Gateway, Recorder, Scripted

from sparkctl import runbooks
from sparkctl.facts.gateway import GatewayFacts, fetch, parse_page, read_again
from sparkctl.inventory.models import Inventory

EMPTY_STREAM = (
    200,
    "text/event-stream; charset=utf-8",
    b'data: {"choices": [{"index": 0, "text": "", "finish_reason": "stop"}]}\n\ndata: [DONE]\n\n',
)
TEXT_STREAM = (
    200,
    "text/event-stream; charset=utf-8",
    b'data: {"choices": [{"index": 0, "text": "1, 2", "finish_reason": null}]}\n\n'
    b'data: {"choices": [{"index": 0, "text": "", "finish_reason": "stop"}]}\n\ndata: [DONE]\n\n',
)


def with_gateway(**gateway) -> Inventory:
    doc = INV.model_dump(mode="json", by_alias=True, exclude_none=True)
    doc["gateway"] = {**doc.get("gateway", {}), **gateway}
    return Inventory.model_validate(doc)


def engine_port_of(base: str) -> int:
    return int(base.rsplit(":", 1)[1])


def closed_port() -> int:
    from sparkctl_lab.sim.harness import free_port  # nothing listens there, nor will another test's server

    return free_port()


def doctor(gw_facts: GatewayFacts, inv: Inventory = INV, lock: str = ""):
    secs = sections()
    edit(secs, H, "lock", lock)
    return run(secs, inv=inv, only=["gateway"], gateway=gw_facts)


@pytest.fixture
def recorder_gw(tmp_path):
    up = Recorder()
    gw = Gateway(str(tmp_path), up.base, "--hold-s", "30")
    yield up, gw
    gw.stop()
    up.stop()


def test_facts_say_passing_or_holding_its_reason_age_and_where_it_sends(recorder_gw):
    up, gw = recorder_gw
    f = fetch("127.0.0.1", gw.port)
    assert f.error is None and f.page.state == "passing" and f.page.upstream == up.base and f.page.hold_s == 30
    gw.hold(reason="reload", expected_s=12, ttl_s=600)
    holding = fetch("127.0.0.1", gw.port).page
    assert holding.state == "holding" and holding.holding == {"admin": True, "upstream_down": False, "upstream_draining": False}
    assert holding.hold_reason == "reload" and 0 < holding.hold_expires_in_s <= 600 and holding.hold_age_s >= 0
    gw.hold(reason="rollback")  # a rollback renews the hold: one reason at a time
    page = fetch("127.0.0.1", gw.port).page
    assert page.hold_reason == "rollback" and page.hold_age_s >= holding.hold_age_s
    gw.release()
    after = fetch("127.0.0.1", gw.port).page
    assert after.state == "passing" and after.hold_reason is None and after.hold_age_s == 0


def test_a_port_that_is_not_the_gateway_is_named():
    assert fetch("127.0.0.1", closed_port()).error.startswith("connection refused")
    with pytest.raises(ValueError):
        parse_page("# HELP up x\n# TYPE up gauge\nup 1\n")  # another exporter on the port


def test_doctor_passing_gateway_pointing_at_the_engine_port_is_ok(recorder_gw):
    up, gw = recorder_gw
    inv = with_gateway(engine_port=engine_port_of(up.base))
    f = read_again(fetch("127.0.0.1", gw.port))
    results = doctor(f, inv)
    assert {r.name: r.status for r in results if r.host == H and r.group == "gateway"} == {
        "gateway.answers": "ok", "gateway.upstream": "ok", "gateway.holding": "ok", "gateway.engine": "ok",
        "gateway.zero_tokens": "ok", "gateway.keys": "warn",  # the lab inventory asks no key
    }  # fmt: skip
    # the lab inventory's engine_port (8001) is not where this gateway sends
    wrong = by(doctor(f), "gateway.upstream", H)
    assert wrong.status == "failed" and up.base in wrong.message and "port 8001" in wrong.message
    assert "sparkctl up" in wrong.fix and runbooks.for_result(wrong) == "docs/runbooks/gateway-down.md"


def test_a_hold_nobody_is_changing_the_cluster_for_fails_naming_the_release(recorder_gw):
    up, gw = recorder_gw
    gw.hold(reason="reload", expected_s=5)
    f = fetch("127.0.0.1", gw.port)
    left = by(doctor(f), "gateway.holding", H)  # the lock is free: the reload that held is gone
    assert (
        left.status == "failed" and "reason reload" in left.message and "no sparkctl run holds the cluster lock" in left.message
    )
    assert "sparkctl gateway release" in left.fix and "python3 -m sparkctl.gateway.ctl release" in left.fix
    assert runbooks.for_result(left) == "docs/runbooks/gateway-holding.md"
    # a live run (heartbeat 4 s ago) holds the lock: the hold is that change's, a warning
    live = by(doctor(f, lock=lock_text(4, host="other-control-host")), "gateway.holding", H)
    assert live.status == "warn" and "changes the cluster" in live.message
    # the lock of a run that is gone (no heartbeat for 10 min) does not excuse it
    gone = by(doctor(f, lock=lock_text(600, host="other-control-host")), "gateway.holding", H)
    assert gone.status == "failed" and "is gone" in gone.message
    gw.release()
    assert by(doctor(fetch("127.0.0.1", gw.port)), "gateway.holding", H).status == "ok"


def test_the_engine_down_behind_an_answering_gateway_is_a_crash_outside_a_change(tmp_path):
    gw = Gateway(str(tmp_path), f"http://127.0.0.1:{closed_port()}", "--hold-s", "1")
    try:
        answer = {}
        t = threading.Thread(target=lambda: answer.setdefault("r", gw.client.post("/v1/completions", json={})), daemon=True)
        t.start()  # the gateway learns the engine is down from a request
        gw.wait_status(lambda st: st["upstream_down_for_s"] is not None)
        f = fetch("127.0.0.1", gw.port)
        t.join(timeout=30)
    finally:
        gw.stop()
    assert answer["r"].status_code == 503 and answer["r"].headers["retry-after"] == "1"
    results = doctor(f)
    crash = by(results, "gateway.engine", H)
    assert crash.status == "failed" and "requests are held up to 1 s, then 503" in crash.message
    assert "sparkctl doctor --only runtime" in crash.fix and runbooks.for_result(crash) == "docs/runbooks/runtime-down.md"
    assert by(results, "gateway.answers", H).status == "ok"  # the front door itself answers
    assert by(results, "gateway.holding", H).status == "ok"  # no admin hold: nobody to release


def test_streams_that_end_without_a_token_fail_while_they_happen(tmp_path):
    up = Scripted()
    gw = Gateway(str(tmp_path), up.base, "--hold-s", "30")
    inv = with_gateway(engine_port=engine_port_of(up.base))

    def stream(answer) -> None:
        up.answers.put((*answer, False))
        with gw.client.stream("POST", "/v1/completions", json={"stream": True}) as r:
            r.read()

    try:
        f = fetch("127.0.0.1", gw.port)
        stream(EMPTY_STREAM)
        stream(TEXT_STREAM)  # a stream with text is not counted
        read_again(f)
        bad = by(doctor(f, inv), "gateway.zero_tokens", H)
        quiet = read_again(fetch("127.0.0.1", gw.port))  # a window with none: ok, the total said
    finally:
        gw.stop()
        up.stop()
    assert bad.status == "failed" and "1 stream(s) ended without one content token" in bad.message and "1 stop" in bad.message
    assert runbooks.for_result(bad) == "docs/runbooks/gateway-zero-tokens.md"
    ok = by(doctor(quiet, inv), "gateway.zero_tokens", H)
    assert ok.status == "ok" and "1 since the gateway started" in ok.message


def test_a_gateway_that_does_not_answer_fails_when_the_runtime_runs_and_is_skipped_when_disabled():
    from test_checks_runtime import running

    down = fetch("127.0.0.1", closed_port())
    secs = running()
    r = by(run(secs, only=["gateway"], gateway=down), "gateway.answers", H)
    assert r.status == "failed" and "connection refused" in r.message and "sparkctl up" in r.fix
    assert "runtime.port 8888" in r.message
    for name in ("gateway.upstream", "gateway.holding", "gateway.engine", "gateway.zero_tokens"):
        assert by(run(secs, only=["gateway"], gateway=down), name, H).status == "skipped"
    off = [r for r in run(secs, inv=with_gateway(enabled=False), only=["gateway"], gateway=down) if r.group == "gateway"]
    keys = next(r for r in off if r.name == "gateway.keys")  # the engine is the door then, and asks no key
    assert keys.status == "warn" and "the engine's every route" in keys.message and "gateway.api_keys_file" in keys.fix
    off.remove(keys)
    assert {r.status for r in off} == {"skipped"} and all("gateway.enabled: false" in r.message for r in off)


def test_recorded_page_parses_to_the_same_figures():
    """A page as a real gateway served it while holding (tests/unit/recorded/gateway/holding.txt)."""
    from pathlib import Path

    text = (Path(__file__).parent / "recorded" / "gateway" / "holding.txt").read_text()
    page = parse_page(text)
    doc = page.to_dict()
    assert doc["state"] == "holding" and doc["hold"]["reason"] == "reload" and doc["upstream"].startswith("http://127.0.0.1:")
    assert doc["held_requests"] == 2 and json.loads(json.dumps(doc)) == doc


def test_status_shows_the_gateway_passing_or_holding_its_queue_and_upstream(recorder_gw):
    from rich.console import Console

    from sparkctl.cli.status import gateway_line
    from sparkctl.cluster_status import gateway_status

    up, gw = recorder_gw
    doc = INV.model_dump(mode="json", by_alias=True, exclude_none=True)
    head = next(h for h, v in doc["hosts"].items() if v["role"] == "head")
    doc["hosts"][head]["ssh"]["address"] = "127.0.0.1"
    doc["runtime"]["port"] = gw.port
    inv = Inventory.model_validate(doc)

    def line(g: dict) -> str:
        c = Console(width=300, no_color=True)
        with c.capture() as cap:
            c.print(gateway_line(g))
        return cap.get().strip()

    passing = gateway_status(inv)
    assert passing["state"] == "passing" and passing["upstream"] == up.base and passing["held_requests"] == 0
    assert (
        line(passing) == f"gateway http://127.0.0.1:{gw.port}/gateway/metrics: passing, 0 held, 0 in flight, upstream {up.base}"
    )
    gw.hold(reason="restart")
    t = threading.Thread(target=lambda: gw.client.post("/v1/completions", json={}), daemon=True)
    t.start()
    gw.wait_status(lambda st: st["held_requests"] == 1)
    holding = gateway_status(inv)
    assert holding["state"] == "holding" and holding["hold"]["reason"] == "restart" and holding["held_requests"] == 1
    assert json.loads(json.dumps(holding)) == holding  # --json: one document
    assert "holding for restart" in line(holding) and "1 held" in line(holding)
    gw.release()
    t.join(timeout=30)
    gw.stop()
    gone = gateway_status(inv)
    assert gone["state"] == "not answering" and "not answering (connection refused" in line(gone)
    doc["gateway"] = {"enabled": False}
    assert gateway_status(Inventory.model_validate(doc)) is None


def test_gateway_commands_without_a_gateway_say_so_and_exit_2(tmp_path):
    import os

    import yaml

    doc = INV.model_dump(mode="json", by_alias=True, exclude_none=True)
    doc["gateway"] = {"enabled": False}
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump(usable_here(doc, tmp_path)))  # the lab's key is there only while it is up
    env = {**os.environ, "SPARKCTL_ONLY_NETWORKS": "127.0.0.0/8"}
    for cmd in ("status", "release"):
        r = clirun.sparkctl(["gateway", cmd, "-i", str(inv)], timeout=60, env=env)
        assert r.returncode == 2 and "gateway.enabled: false" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_a_hold_that_ended_by_itself_or_overran_its_expected_end_is_named(recorder_gw):
    up, gw = recorder_gw
    gw.hold(reason="reload", expected_s=0)  # the restart was expected to be done already
    gw.wait_status(lambda st: st["hold"]["held_for_s"] > 0.5)
    live = by(doctor(fetch("127.0.0.1", gw.port), lock=lock_text(4, host="other-control-host")), "gateway.holding", H)
    assert live.status == "warn" and "past the end sparkctl expected" in live.message
    gw.release()
    gw.hold(reason="rollback", ttl_s=0.2)  # nobody releases it: it ends by itself
    gw.wait_status(lambda st: st["last_hold_expired_s_ago"] is not None)
    f = fetch("127.0.0.1", gw.port)
    assert f.page.state == "passing" and f.page.holds_expired == 1 and f.page.hold_expired_ago_s is not None
    expired = by(doctor(f), "gateway.holding", H)
    assert expired.status == "warn" and "ended by itself" in expired.message and "sparkctl history" in expired.fix
