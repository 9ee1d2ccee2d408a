"""A fleet whose members ask keys (fleet/keys.py), on loopback: the real vllm-router started with
the argv sparkctl renders (fleet/router_launch.py), its two members real gateways
(`python -m sparkctl.gateway`, gateway.api_keys_file) at the fleet file's heads 127.0.0.11 and
127.0.0.21, in front of one recording engine (test_gateway_security.Engine) that asks its own key.

What a client meets at the fleet's front door, what sparkctl's own calls send, and the fleet file
refused before any host when its members disagree. Cost: two gateways and one router start (~2 s).
"""

from __future__ import annotations

import copy
import os
import sys

import httpx
import pytest
from test_fleet_model import FLEET, LAB, _write, second_pair
from test_gateway_security import ENGINE_KEY, KEY, Engine
from vllm_router_runner import VllmRouter

from sparkctl import httpclient
from sparkctl.fleet import router_admin
from sparkctl.fleet.model import FleetError, load_fleet
from sparkctl.fleet.router_launch import launch
from sparkctl_lab.sim import harness

HEADS = {"lab": "127.0.0.11", "lab-2": "127.0.0.21"}
BODY_LIMIT = 64 << 10  # the members' gateway.max_body_bytes here: the router's limit follows it


class MemberGateway:
    """A member's front door: sparkctl's gateway on ADDRESS:PORT (the member's runtime.port on its
    head), asking the keys in `keys_file`, its engine `upstream` (which asks ENGINE_KEY)."""

    def __init__(self, tmp: str, address: str, port: int, upstream: str, keys_file: str):
        self.base = f"http://{address}:{port}"
        argv = [sys.executable, "-m", "sparkctl.gateway", "--listen", f"{address}:{port}", "--upstream", upstream,
                "--admin-socket", os.path.join(tmp, f"gw-{address}", "admin.sock"), "--api-keys-file", keys_file,
                "--max-body-bytes", str(BODY_LIMIT)]  # fmt: skip
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "SPARKCTL_GATEWAY_ENGINE_API_KEY": ENGINE_KEY}
        self.proc = harness.Proc("gateway", argv, env, os.path.join(tmp, f"gateway-{address}.log")).start()
        assert harness.wait_http(self.base + "/health", timeout=30, proc=self.proc), self.proc.log()

    def stop(self) -> None:
        self.proc.stop()


def keyed_fleet(tmp_path, second_keyed: bool = True, port: int = 8000):
    first, second = copy.deepcopy(LAB), second_pair(LAB)
    for doc, last, keyed in ((first, 11, True), (second, 21, second_keyed)):
        for i, host in enumerate(doc["hosts"].values()):
            host["ssh"]["address"] = f"127.0.0.{last + i}"
        doc["runtime"]["port"] = port
        doc.setdefault("gateway", {})["max_body_bytes"] = BODY_LIMIT
        if keyed:
            doc["gateway"]["api_keys_file"] = "/etc/sparkctl/keys"  # on each head (made up: never read here)
    door = {"member": "lab", "port": harness.free_port("127.0.0.11"), "metrics_port": harness.free_port("127.0.0.11"),
            "router": {"health_check_interval_secs": 1, "health_failure_threshold": 1}}  # fmt: skip
    return load_fleet(_write(tmp_path, {**FLEET, "front_door": door}, {"inventory.yaml": first, "inventory-2.yaml": second}))


@pytest.fixture
def keyed_on_loopback(tmp_path):
    engine = Engine()
    keys = tmp_path / "keys"
    keys.write_text(f"{KEY}\n")
    port = harness.free_port("127.0.0.11")
    fleet = keyed_fleet(tmp_path, port=port)
    members = {name: MemberGateway(str(tmp_path), a, port, engine.base, str(keys)) for name, a in HEADS.items()}
    router = VllmRouter.for_fleet(str(tmp_path), fleet)
    try:
        yield fleet, engine
    finally:
        router.stop()
        for m in members.values():
            m.stop()
        engine.stop()


def chat(fleet, key: str | None, text: str = "hi", **body) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    doc = {"model": "m", "messages": [{"role": "user", "content": text}], **body}
    return httpx.post(fleet.front_door_url + "/v1/chat/completions", json=doc, headers=headers, timeout=30)


def test_a_client_without_the_key_is_refused_at_the_fleets_door_and_one_with_it_is_served(keyed_on_loopback):
    fleet, engine = keyed_on_loopback
    for key in (None, "wrong-key") * 6:  # more than the router's 10 failures that would open a circuit
        r = chat(fleet, key)
        assert r.status_code == 401, r.text
        assert r.json()["error"]["code"] == 401  # the member's answer, in OpenAI's shape, passed back
    assert [s for s in engine.seen if s[1].startswith("/v1/")] == []  # nothing reached the engine
    # the refusals opened no circuit: both members still pass, and the key is served by each
    members = router_admin.status(fleet)["members"]
    assert {n: (m["state"], m["circuit"]) for n, m in members.items()} == {
        "lab": ("passing", "closed"), "lab-2": ("passing", "closed")}  # fmt: skip
    for i in range(6):
        r = chat(fleet, KEY, text=f"conversation {i}: " + "x" * 40 * i)
        assert r.status_code == 200, r.text
    served = [s for s in engine.seen if s[1] == "/v1/chat/completions"]
    assert len(served) == 6 and {auth for _, _, auth in served} == {f"Bearer {ENGINE_KEY}"}


def test_the_router_holds_no_key_and_refuses_a_body_every_member_would(keyed_on_loopback):
    fleet, engine = keyed_on_loopback
    spec = launch(fleet)
    assert "--api-key" not in spec.command and KEY not in spec.docker_run()
    assert spec.command[spec.command.index("--max-payload-size") + 1] == str(BODY_LIMIT)
    r = chat(fleet, KEY, text="x" * (BODY_LIMIT + 1024))
    assert r.status_code == 413, r.text
    assert [s for s in engine.seen if s[1].startswith("/v1/")] == []


def test_sparkctls_drain_counts_a_keyed_members_engine_with_its_key_and_says_when_it_has_none(keyed_on_loopback):
    fleet, engine = keyed_on_loopback
    url = "http://127.0.0.21:" + str(fleet.member("lab-2").inventory.runtime.port) + "/"
    try:
        with pytest.raises(router_admin.DoorAdminError) as err:  # no key: refused, never counted as idle
            router_admin.drain(fleet, "lab-2", wait_s=5)
        assert "refused sparkctl's key" in err.value.message and "gateway.api_keys_file" in err.value.fix
        router_admin.undrain(fleet, "lab-2")
        # the key registered as fleet/keys.authorize does it after reading the head's file
        httpclient.authorize([url], lambda: KEY)
        doc = router_admin.drain(fleet, "lab-2", wait_s=5)
        assert doc["members"]["lab-2"]["state"] == "drained"
        assert ("GET", "/metrics", f"Bearer {ENGINE_KEY}") in engine.seen  # read through its gateway, keyed
    finally:
        httpclient.authorize([url], lambda: None)


def test_members_that_disagree_on_keys_are_refused_before_any_host_naming_the_field(tmp_path):
    with pytest.raises(FleetError) as err:
        keyed_fleet(tmp_path, second_keyed=False)
    text = str(err.value)
    assert "member lab-2 asks no key while lab ask one" in text and "gateway.api_keys_file" in text
    assert "inventory-2.yaml" in text or "members[1]" in text or "members.1" in text, text
