"""What a change tells the gateway (runtime/gateway_admin.py): the hold the stop step plans (what
`--check` and reload's plan show), sent over a real SSH session to a real gateway process, and the
release once the engine streams a token.

The gateway is `python -m sparkctl.gateway` (test_gateway.Gateway) in front of the lab's vLLM
simulator (a real `vllm serve` subprocess); sparkctl reaches it through LoopbackSSHD (a real SSH
server on loopback). The head has no Docker here: a `docker` on the SSH server's PATH runs
`docker exec sparkctl-gateway CMD...` as CMD on this machine while the gateway's socket exists, and
otherwise answers as the Docker CLI does for a missing container (its words below).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

import httpx
import openai
import pytest
from hostfacts import sec
from loopback_sshd import REPO, LoopbackSSHD
from test_gateway import Gateway
from test_reload_plan import INV, changed, cluster_facts, recorded
from test_sim_serving import NAME, Server

from sparkctl.inventory.models import Inventory
from sparkctl.launch.gateway import CONTAINER
from sparkctl.launch.names import LABEL_PREFIX
from sparkctl.records import Event, dump
from sparkctl.reload import plan_reload
from sparkctl.runner import Recap, build_stages, compensate, load_playbook
from sparkctl.runtime import gateway_admin, health
from sparkctl.runtime.compile_cache import compile_key
from sparkctl.runtime.gateway_admin import GatewayAbsent, GatewayAdmin, Hold
from sparkctl.session import ClusterSession
from sparkctl.steps.base import RunContext, RunOptions, StepOptions
from sparkctl.steps.runtime import RuntimeStep, StopStep

# `docker exec` of a container that does not exist, as the Docker CLI prints it (moby's
# errdefs.NotFound: "No such container: <name>"; 24.x and 27.x print the same line)
NO_SUCH_CONTAINER = "Error response from daemon: No such container: {name}"
DOCKER = """#!/bin/sh
# docker exec NAME python3 ARGS... -> python ARGS... on this machine, for the gateway whose socket is $SOCKET
if [ "$1" != exec ] || [ "$2" != {container} ] || [ ! -S "{socket}" ]; then
  echo "{missing}" >&2; exit 1
fi
shift 3
SPARKCTL_GATEWAY_ADMIN_SOCKET="{socket}" PYTHONPATH="{repo}" exec "{python}" "$@"
"""


# ---- a real gateway, reached over SSH ----


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    s = Server(str(tmp_path_factory.mktemp("hs-sim")), env={"SIM_CRASH_CONTEXT_TOKENS": "0"})
    yield s
    s.stop()


@pytest.fixture
def gw(sim, tmp_path):
    g = Gateway(str(tmp_path), sim.base, "--hold-s", "30")
    yield g
    g.stop()


@pytest.fixture
def ctx(gw, tmp_path, monkeypatch):
    """A run's context whose fleet reaches the 'head' over SSH, where `docker exec` reaches `gw`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(DOCKER.format(container=CONTAINER, socket=gw.socket, repo=REPO, python=sys.executable,
                                                  missing=NO_SUCH_CONTAINER.format(name=CONTAINER)))  # fmt: skip
    (bin_dir / "docker").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")  # the SSH server's commands inherit it
    with LoopbackSSHD(tmp_path / "sshd") as sshd:
        inv = sshd.inventory(tmp_path)
        with ClusterSession(inv) as cluster:
            yield RunContext(inventory=inv, fleet=cluster.fleet)


def stream(gw: Gateway, out: list, max_tokens: int = 8) -> threading.Thread:
    """One streamed chat completion through the gateway with the OpenAI client at max_retries=0, in a thread."""

    def run():
        client = openai.OpenAI(base_url=gw.base + "/v1", api_key="x", max_retries=0, timeout=60)
        try:
            chunks = client.chat.completions.create(
                model=NAME, messages=[{"role": "user", "content": "Count from 1 to 10."}], max_tokens=max_tokens, stream=True
            )
            out.append("".join(c.choices[0].delta.content or "" for c in chunks if c.choices))
        except openai.APIError as exc:
            out.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_a_hold_sent_over_ssh_holds_new_requests_and_the_release_sends_them_on(ctx, gw):
    h = Hold("reload", expected_s=2.0, cache="warm", hold_s=30.0, ttl_s=600.0)
    said = gateway_admin.hold(ctx, "head", h.to_data())
    assert said.startswith("gateway holding: requests are held up to 30 s")
    st = gw.status()
    assert st["state"] == "holding" and st["hold"]["reason"] == "reload" and 590 < st["hold"]["expires_in_s"] <= 600
    out: list = []
    t = stream(gw, out)
    gw.wait_status(lambda s: s["held_requests"] == 1)
    assert out == []  # held, not failed
    assert gateway_admin.release(ctx, "head") == "gateway released 1 held request(s)"
    t.join(60)
    assert len(out) == 1 and isinstance(out[0], str) and out[0]  # the held request was served, tokens and all
    assert gw.status()["state"] == "passing" and ctx.outputs.gateway_hold.released is True


def test_an_expected_start_beyond_hold_s_is_a_503_with_retry_after_and_a_rollbacks_hold_keeps_the_start(ctx, gw):
    cold = Hold("reload", expected_s=540.0, cache="cold", hold_s=30.0, ttl_s=1800.0)
    assert cold.rejects and "clients get 503 with Retry-After ~540 s during this restart" in cold.summary()
    gateway_admin.hold(ctx, "head", cold.to_data())
    r = gw.client.post("/v1/completions", json={"model": NAME, "prompt": "x", "max_tokens": 4})
    assert r.status_code == 503 and 530 <= int(r.headers["retry-after"]) <= 540
    assert r.json()["error"]["type"] == "ServiceUnavailableError"
    out: list = []
    stream(gw, out).join(30)
    assert isinstance(out[0], openai.InternalServerError)  # what the OpenAI client raises, at once
    first = gw.status()["hold"]["held_for_s"]
    time.sleep(0.2)
    # the reload failed; its rollback is warm: a second hold, no release between
    gateway_admin.hold(ctx, "head", Hold("rollback", 2.0, "warm", 30.0, 1800.0).to_data())
    st = gw.status()
    assert st["hold"]["reason"] == "rollback" and st["hold"]["held_for_s"] > first + 0.15  # the start is kept
    assert st["hold"]["expected_remaining_s"] <= 2.0
    held: list = []
    t = stream(gw, held)
    gw.wait_status(lambda s: s["held_requests"] == 1)  # now held, not refused
    gateway_admin.release(ctx, "head")
    t.join(60)
    assert isinstance(held[0], str) and held[0]


def test_a_failed_run_releases_its_hold_once_and_a_gateway_that_is_gone_is_absent(ctx, gw):
    # a failed `up` with no run after it: the runner's compensating actions (the stop step's releases)
    stages = build_stages(load_playbook("up"))
    assert gateway_admin.release(ctx, "head") is None  # an engine start that held nothing says nothing
    assert compensate(ctx, stages) == []  # this run held nothing: nothing to undo
    gateway_admin.hold(ctx, "head", Hold("up", 2.0, "warm", 30.0, 600.0).to_data())
    assert gw.status()["state"] == "holding"
    assert compensate(ctx, stages) == ["gateway released 0 held request(s)"]
    assert gw.status()["state"] == "passing"
    assert compensate(ctx, stages) == []  # released already: nothing sent
    gw.stop()
    with pytest.raises(GatewayAbsent, match="no sparkctl-gateway running"):
        GatewayAdmin(ctx.fleet["head"]).status()
    assert gateway_admin.hold(ctx, "head", Hold("up", 2.0, "warm", 30.0, 600.0).to_data()).startswith("no gateway runs")
    assert gateway_admin.release(ctx, "head") == "no gateway runs to release"


def test_the_first_streamed_token_is_read_from_the_engine_and_a_503_is_not_one(sim, gw):
    with httpx.Client() as http:
        assert health.first_token(http, sim.base, NAME) == "token"
        gw.hold(expected_s=600)
        with pytest.raises(httpx.HTTPStatusError, match="503"):
            health.first_token(http, gw.base, NAME)
        gw.release()


# ---- the plan: what a change will tell the gateway ----


def gateway_json(running: bool = True) -> dict:
    """The gateway's container as `docker inspect` shows it (role gateway, its own restart group)."""
    return {
        "Id": "gw-ctr", "Name": f"/{CONTAINER}", "Image": "sha256:" + "1" * 64,
        "State": {"Status": "running" if running else "exited", "ExitCode": 0, "StartedAt": "2026-12-01T00:00:00.000000000Z"},
        "Config": {"Image": "img", "Labels": {f"{LABEL_PREFIX}.cluster": "lab", f"{LABEL_PREFIX}.role": "gateway",
                                              f"{LABEL_PREFIX}.config-hash": "g" * 16}},
        "HostConfig": {},
    }  # fmt: skip


def facts(new: Inventory, events=(), gateway: bool = True, warm_cache: bool = True) -> dict:
    """The cluster runs INV's config (test_reload_plan.cluster_facts); the head also runs the gateway
    and holds the record, the events log and a compile cache."""
    out = cluster_facts(new, INV)
    head = out["head"]
    found = json.loads(head.sections["containers"].out) + ([gateway_json()] if gateway else [])
    cache = "present\nd ./abc123\ni ./abc123/rank_0_0/backbone/cache_key_factors.json\n" if warm_cache else "present\n"
    from hostfacts import host_facts

    sections = {**head.sections, "containers": sec(json.dumps(found)), "applied": sec(json.dumps(dump(recorded()))),
                "events": sec("".join(json.dumps(e) + "\n" for e in events)), "cache": sec(cache)}  # fmt: skip
    out["head"] = host_facts(new, "head", **sections)
    return out


def stop_plans(new: Inventory, f: dict, **options) -> tuple[dict, RunContext]:
    ctx = RunContext(inventory=new, fleet=None, facts=f, check_mode=True, options=RunOptions(**options))
    return StopStep().plan(ctx), ctx


def reload_plan(new: Inventory, events: list, **options):
    """reload's plan over the check-mode plans of the stop and runtime steps (test_reload_plan.checked)."""
    ctx = RunContext(inventory=new, fleet=None, facts=facts(new, events), check_mode=True, options=RunOptions(**options))
    plans = [p for step in (StopStep(), RuntimeStep()) for p in step.plan(ctx).values()]
    typed = [Event.model_validate(e) for e in events]
    return plan_reload("reload", recorded(), new, typed, True, Recap(playbook="reload", check_mode=True, plans=plans))


def holds(plans: dict) -> list[tuple[str, dict]]:
    return [(h, c.data) for h, p in plans.items() for c in p.changes if c.action == "hold"]


SERVED = {"outcome": "applied", "compile_key": compile_key(INV.model_dump(mode="json"))}


def test_an_engine_change_holds_before_the_head_stops_with_the_forecast_start():
    new = changed(served_model_name="renamed")
    plans, _ = stop_plans(new, facts(new, [SERVED, {"cache": "warm", "start_seconds": 2.4}]), event="reload")
    assert [a for a in (c.action for c in plans["head"].changes)] == ["barrier", "hold", "stop"]  # after the barrier
    ((host, data),) = holds(plans)
    assert host == "head" and data["reason"] == "reload" and data["cache"] == "warm" and data["expected_s"] == 2.4
    assert data["hold_s"] == 30 and data["ttl_s"] == 1800  # drain + deadline 1800 + margin, capped at hold_max_s
    assert not Hold(**data).rejects


def test_a_cold_start_beyond_hold_s_is_told_to_the_gateway_and_said_in_reloads_plan():
    new = changed(max_num_seqs=2)  # a compile input this cluster never served: cold
    events = [SERVED, {"cache": "warm", "start_seconds": 2.0}, {"cache": "cold", "start_seconds": 540.0}]
    p = reload_plan(new, events, event="reload", timeout=900)
    assert p.prediction == "cold" and p.expected_seconds == 540.0
    gw = p.to_dict()["gateway"]
    assert gw["hold"] and gw["answers_503"] and gw["expected_s"] == 540.0
    assert gw["ttl_s"] == INV.runtime.shutdown_timeout + 900 + 120
    assert "gateway: clients get 503 with Retry-After ~540 s during this restart" in "\n".join(p.lines())
    warm = reload_plan(changed(served_model_name="x"), events, event="reload")
    assert warm.prediction == "warm" and warm.to_dict()["gateway"]["expected_s"] == 2.0
    assert any(line.startswith("gateway: requests are held up to 30 s") for line in warm.lines())


def test_a_drafter_only_change_holds_nothing_and_the_gateway_is_never_stopped_with_the_engine():
    new = changed(speculative__drafter_image="10.231.0.1:5000/sparkctl/vllm-sim:drafter")
    plans, _ = stop_plans(new, facts(new, [SERVED]))
    assert holds(plans) == []
    engine = changed(served_model_name="renamed")
    stopped = [n for p in stop_plans(engine, facts(engine, [SERVED]))[0].values() for c in p.changes
               if c.action == "stop" for n in c.data["names"]]  # fmt: skip
    assert CONTAINER not in stopped and "sparkctl-head" in stopped


def test_no_gateway_running_or_the_gateway_off_holds_nothing_and_the_plan_says_clients_are_refused():
    new = changed(served_model_name="renamed")
    assert holds(stop_plans(new, facts(new, [SERVED], gateway=False))[0]) == []
    d = new.model_dump(mode="json")
    d["gateway"]["enabled"] = False
    off = Inventory.model_validate(d)
    assert holds(stop_plans(off, facts(off, [SERVED]))[0]) == []
    p = reload_plan(off, [SERVED])
    assert p.to_dict()["gateway"] == {"hold": False, "clients": "gateway.enabled is false: clients are refused from the "
                                      "head's SIGTERM until the new engine serves"}  # fmt: skip


def test_down_holds_so_new_requests_get_503_at_once_while_the_engine_drains():
    stop = StopStep()
    stop.options = StepOptions(always=True)
    ctx = RunContext(inventory=INV, fleet=None, facts=facts(INV, [SERVED]), check_mode=True, options=RunOptions(drain=10))
    ((host, data),) = holds(stop.plan(ctx))
    h = Hold(**data)
    assert host == "head" and h.reason == "down" and h.rejects and h.expected_s > h.hold_s and h.ttl_s == 130
    assert "503 with Retry-After at once while the engine drains" in h.summary()
