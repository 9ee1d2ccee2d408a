"""sparkctl's side of the fleet's router (sparkctl/fleet/router_admin.py) against the real
vllm-router, started with the argv sparkctl's launch renders (fleet/router_launch.py), on loopback.

The members' front doors are made-up workers (aiohttp on 127.0.0.11 and 127.0.0.21 at one port,
the fleet file's member heads): /health, /v1/models and a chat completion streamed slowly, so a
request is still in flight when its member is taken out. Cost: one router start (~0.2 s) and a
few seconds of streams and health checks.
"""

from __future__ import annotations

import asyncio
import copy
import json
import threading
import time

import httpx
import pytest
from test_fleet_model import FLEET, LAB, _write, second_pair
from vllm_router_runner import VllmRouter

from sparkctl.fleet import router_admin
from sparkctl.fleet.model import load_fleet
from sparkctl_lab.sim import harness

HEADS = {"lab": "127.0.0.11", "lab-2": "127.0.0.21"}
CHUNKS, CHUNK_S = 30, 0.1  # a streamed answer takes ~3 s: long enough for a loaded router to count it


class Worker:
    """A made-up member front door: answers what vllm-router asks a worker, and counts requests."""

    def __init__(self, address: str, port: int):
        from aiohttp import web

        self.healthy, self.requests = True, 0

        async def health(_):
            return web.Response(status=200 if self.healthy else 503)

        async def models(_):
            return web.json_response({"object": "list", "data": [{"id": "deepseek-v4.1-flash", "object": "model"}]})

        async def chat(request):
            await request.read()
            self.requests += 1
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            for i in range(CHUNKS):
                chunk = {"choices": [{"index": 0, "delta": {"content": f"{address}-{i} "}}]}
                await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
                await asyncio.sleep(CHUNK_S)
            await resp.write(b"data: [DONE]\n\n")
            return resp

        app = web.Application()
        app.router.add_get("/health", health)
        app.router.add_get("/v1/models", models)
        app.router.add_post("/v1/chat/completions", chat)
        self.loop = asyncio.new_event_loop()
        self.runner = web.AppRunner(app)
        self.loop.run_until_complete(self.runner.setup())
        self.loop.run_until_complete(web.TCPSite(self.runner, address, port).start())
        threading.Thread(target=self.loop.run_forever, daemon=True).start()

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)


@pytest.fixture
def fleet_on_loopback(tmp_path):
    port = harness.free_port("127.0.0.11")
    first, second = copy.deepcopy(LAB), second_pair(LAB)
    for doc, last in ((first, 11), (second, 21)):
        for i, host in enumerate(doc["hosts"].values()):
            host["ssh"]["address"] = f"127.0.0.{last + i}"
        doc["runtime"]["port"] = port
    door = {"member": "lab", "port": harness.free_port("127.0.0.11"), "metrics_port": harness.free_port("127.0.0.11"),
            "router": {"health_check_interval_secs": 1, "health_failure_threshold": 1}}  # fmt: skip
    fleet = load_fleet(_write(tmp_path, {**FLEET, "front_door": door}, {"inventory.yaml": first, "inventory-2.yaml": second}))
    workers = {name: Worker(address, port) for name, address in HEADS.items()}
    # sparkctl's own argv for the router, on loopback, and a member that does not serve refused
    # after 2 s instead of ADD_WAIT_S
    router = VllmRouter.for_fleet(str(tmp_path), fleet, startup_timeout=2)
    try:
        yield fleet, workers
    finally:
        router.stop()
        for w in workers.values():
            w.stop()


def stream(fleet, out: list) -> threading.Thread:
    def run():
        body = {"model": "deepseek-v4.1-flash", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
        with httpx.stream("POST", fleet.front_door_url + "/v1/chat/completions", json=body, timeout=30) as r:
            out.append((r.status_code, r.read().decode()))

    t = threading.Thread(target=run)
    t.start()
    return t


def outstanding(fleet, n: int, timeout: float = 20.0) -> dict[str, int]:
    """The members' requests in flight, once the router counts `n` of them (a loaded machine's router
    takes a while to see streams just started: a fixed sleep missed them once at the floors)."""
    deadline = time.monotonic() + timeout
    while True:
        busy = {name: m["outstanding"] for name, m in router_admin.status(fleet)["members"].items()}
        if sum(busy.values()) >= n or time.monotonic() > deadline:
            return busy
        time.sleep(0.05)


def test_a_drain_waits_for_the_members_requests_in_flight_and_new_ones_go_to_the_other(fleet_on_loopback):
    fleet, workers = fleet_on_loopback
    st = router_admin.status(fleet)["members"]
    assert {n: (m["state"], m["healthy"], m["circuit"]) for n, m in st.items()} == {
        "lab": ("passing", True, "closed"), "lab-2": ("passing", True, "closed")}  # fmt: skip

    # both members busy: two streams at once, one on each (the router's loads spread them)
    out: list = []
    threads = [stream(fleet, out) for _ in range(2)]
    busy = outstanding(fleet, 2)
    assert sum(busy.values()) == 2, busy
    member = next(n for n, k in busy.items() if k)
    other = next(n for n in HEADS if n != member)
    t0 = time.monotonic()
    doc = router_admin.drain(fleet, member, wait_s=30)
    waited = time.monotonic() - t0
    for t in threads:
        t.join(30)
    assert [code for code, _ in out] == [200, 200] and all("[DONE]" in text for _, text in out), out
    assert doc["members"][member]["state"] == "drained" and doc["members"][member]["outstanding"] == 0
    assert waited > CHUNK_S * 2, waited  # it returned once that stream had finished, not at once

    before = {n: w.requests for n, w in workers.items()}
    stream(fleet, []).join(30)
    assert workers[other].requests == before[other] + 1 and workers[member].requests == before[member]

    assert router_admin.undrain(fleet, member)["members"][member]["state"] == "passing"
    with pytest.raises(router_admin.DrainTimeout, match=r"1 request\(s\) are still in flight on it after 0.3 s"):
        t = stream(fleet, [])
        busy = next(n for n, k in outstanding(fleet, 1).items() if k)
        try:
            router_admin.drain(fleet, busy, wait_s=0.3)
        finally:
            t.join(30)
            router_admin.undrain(fleet, busy)


def test_a_member_that_stops_serving_is_taken_out_and_is_not_taken_back_until_it_serves(fleet_on_loopback):
    fleet, workers = fleet_on_loopback
    workers["lab-2"].healthy = False
    t_end = time.monotonic() + 10
    while router_admin.status(fleet)["members"]["lab-2"]["state"] != "failing" and time.monotonic() < t_end:
        time.sleep(0.2)
    st = router_admin.status(fleet)["members"]
    assert (st["lab-2"]["state"], st["lab-2"]["healthy"], st["lab"]["state"]) == ("failing", False, "passing"), st

    router_admin.drain(fleet, "lab-2", wait_s=5)
    with pytest.raises(router_admin.DoorAdminError, match="did not take lab-2 back"):
        router_admin.undrain(fleet, "lab-2")  # the router's own health gate: it stays out
    assert router_admin.status(fleet)["members"]["lab-2"]["state"] == "drained"
    workers["lab-2"].healthy = True
    assert router_admin.undrain(fleet, "lab-2")["members"]["lab-2"]["state"] == "passing"
