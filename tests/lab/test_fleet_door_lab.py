"""The fleet's front door, vllm-router (the real one, from the lab's image), deployed on the lab
(sparkctl/fleet/router_step.py, router_admin.py): the lab's fleet of two pairs (tests/lab/conftest.py
fleet_lab: `fleet up` deployed it), the router on member lab's head, port 8890, the members' front
doors its workers, reached with the OpenAI client at max_retries=0, members taken out and put back
over the router's own worker API.

Cost: the door's own step planned and run again (no-ops), a few requests, the 503 of a router with
no worker, two 3-turn conversations. The door on a host of its own (the lab's offload host, which
holds the lab image), from vllm-router's wheel shipped there (rebuilt from this venv's
installation; ~70 MB unpacked, copied once): two `fleet up` runs whose members are no-ops (the
first deploys the door there), one `fleet status`, one probe from that host, a few requests, a
drain and an undrain, and one failed pull of a missing image.
"""

from __future__ import annotations

import time

import httpx
import openai
import pytest
import yaml
from labcli import sparkctl

from sparkctl_lab.topology import HOSTS

pytestmark = pytest.mark.lab

NAME = "deepseek-v4.1-flash"
PORT = 8890


@pytest.fixture
def fleet(lab, fleet_lab):
    from sparkctl.fleet.model import load_fleet

    return load_fleet(lab.FLEET_PATH)


def test_the_door_serves_drains_and_a_second_run_of_its_step_is_a_noop(fleet):
    from sparkctl.fleet import router_admin
    from sparkctl.fleet.router_step import ensure_front_door, plan_lines

    # `fleet up` deployed it: its step plans nothing now, and a run does nothing
    check = ensure_front_door(fleet, check=True)
    assert not check.failed and [p.empty for p in check.plans] == [True], plan_lines(check)
    again = ensure_front_door(fleet)
    assert [p.empty for p in again.plans] == [True] and "running config" in again.plans[0].reason, plan_lines(again)

    client = openai.OpenAI(base_url=fleet.front_door_url + "/v1", api_key="none", max_retries=0, timeout=60)
    r = client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "hello"}], max_tokens=4)
    assert r.choices[0].message.content
    chunks = client.chat.completions.create(
        model=NAME, messages=[{"role": "user", "content": "Count from 1 to 10."}], max_tokens=8, stream=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    st = router_admin.status(fleet)
    assert {n: m["state"] for n, m in st["members"].items()} == {"lab": "passing", "lab-2": "passing"}, st
    assert sum(m["requests"] for m in st["members"].values()) >= 2, st

    # every member out of the router: its 503, naming why
    for member in ("lab", "lab-2"):
        assert router_admin.drain(fleet, member, wait_s=30)["members"][member]["state"] == "drained"
    try:
        with pytest.raises(openai.InternalServerError) as e:
            client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "x"}], max_tokens=2)
        assert e.value.status_code == 503 and "No available workers" in e.value.response.text, e.value.response.text
    finally:
        for member in ("lab", "lab-2"):
            router_admin.undrain(fleet, member)
    m = httpx.get(fleet.router_metrics_url, timeout=5).text  # the router's own Prometheus page
    for url in router_admin.workers(fleet):
        assert f'vllm_router_worker_health{{worker="{url}"}} 1' in m


def prefix_hits(fleet) -> float:
    """The router's own count of requests it routed to the member holding their prompt's prefix."""
    from prometheus_client.parser import text_string_to_metric_families

    page = httpx.get(fleet.router_metrics_url, timeout=5).text
    return sum(s.value for f in text_string_to_metric_families(page) for s in f.samples
               if s.name == "vllm_router_prefix_routing_decisions_total" and s.labels.get("outcome") == "prefix_hit")  # fmt: skip


def test_a_conversations_follow_up_turns_land_on_the_pair_that_served_its_first(fleet):
    """cache_aware (the fleet file's default policy): a turn's prompt starts with the ones before, so
    the router sends it where that prefix went. The first conversation starts on lab-2 (lab out of
    the router for that turn: a prompt no member has seen goes to the same member each time at
    equal loads, so lab-2 is the one it would not have chosen), the second wherever the router puts it; every follow-up goes back to its conversation's first
    member, and the router counts each as a prefix hit (it reads the prompt's tokens through the
    member's /tokenize). Where each turn went: the router's per-member request counters."""
    from sparkctl.fleet import router_admin

    client = openai.OpenAI(base_url=fleet.front_door_url + "/v1", api_key="none", max_retries=0, timeout=60)

    def served_by(messages: list[dict]) -> str:
        before = {n: m["requests"] for n, m in router_admin.status(fleet)["members"].items()}
        r = client.chat.completions.create(model=NAME, messages=messages, max_tokens=4)
        messages.append({"role": "assistant", "content": r.choices[0].message.content})
        after = {n: m["requests"] for n, m in router_admin.status(fleet)["members"].items()}
        (member,) = [n for n in after if after[n] > before[n]]
        return member

    first, second = (
        [{"role": "user", "content": f"Tell me at length about {topic}, in all the detail you can. " * 4}]
        for topic in ("the tides of the North Sea", "how glaciers carve valleys")
    )
    router_admin.drain(fleet, "lab", wait_s=30)
    try:
        where = {"first": [served_by(first)]}
    finally:
        router_admin.undrain(fleet, "lab")
    where["second"] = [served_by(second)]
    hits = prefix_hits(fleet)
    for turn in ("Go on.", "And then?"):
        for name, conversation in (("first", first), ("second", second)):
            conversation.append({"role": "user", "content": turn})
            where[name].append(served_by(conversation))
    print(f"\nmembers per turn: {where}")
    assert where["first"] == ["lab-2"] * 3 and len(set(where["second"])) == 1, where
    assert prefix_hits(fleet) - hits == 4  # each follow-up, by the router's own count


OWN_PORT = 8891  # beside the lab fleet's own door (member lab's head, 8890)


def _passing(fleet, member: str, timeout: float = 20) -> str:
    from sparkctl.fleet import router_admin

    t_end = time.monotonic() + timeout
    while True:
        state = router_admin.status(fleet)["members"][member]["state"]
        if state == "passing" or time.monotonic() > t_end:
            return state
        time.sleep(0.5)


def test_a_door_on_a_host_of_its_own_is_deployed_serves_drains_and_a_second_up_changes_nothing(lab, fleet_lab, tmp_path):
    from sparkctl.fleet import router_admin
    from sparkctl.fleet.doctor import probe_from_door
    from sparkctl.fleet.model import load_fleet
    from sparkctl.fleet.router_step import ensure_front_door
    from sparkctl.inventory.loader import load_inventory
    from sparkctl_lab.router_wheel import router_wheel

    address = HOSTS["offload"].mgmt_ip  # the lab's offload host
    url = f"http://{address}:{OWN_PORT}"
    doc = {
        "fleet": {"name": "lab-fleet-own-door"},
        "members": [{"inventory": str(lab.INVENTORY_PATH)}, {"inventory": str(lab.INVENTORY_2_PATH)}],
        "front_door": {
            "host": {"address": address, "user": "root", "key": str(lab.SSH_KEY), "known_hosts": str(lab.KNOWN_HOSTS)},
            "image": load_inventory(lab.INVENTORY_PATH).runtime.image,
            "port": OWN_PORT,
            # shipped from this machine, as to a node without internet (the image has only its requirements)
            "router": {"wheel": str(router_wheel(tmp_path))},
        },
    }
    path, missing = tmp_path / "fleet.yaml", tmp_path / "fleet-missing-image.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    doc["front_door"]["image"] = no_such = lab.REGISTRY + "/sparkctl/no-such-door:0"
    missing.write_text(yaml.safe_dump(doc, sort_keys=False))
    fleet = load_fleet(path)
    try:
        # an image the host lacks and cannot pull: the door's step fails naming it and the fix
        recap = ensure_front_door(load_fleet(missing))
        failed = [r for r in recap.results if r.status == "failed"]
        assert recap.failed and f"the front door's image {no_such} is not there and cannot be pulled" in failed[0].message
        assert f"push {no_such} to a registry {address} pulls from" in failed[0].fix

        first = sparkctl("fleet", "up", "-f", str(path))
        assert not first["failed"] and first["front_door"]["status"] == "changed", first["front_door"]
        assert "answers on " + url in first["front_door"]["message"], first["front_door"]

        runs = lab.host_exec("offload", ["docker", "exec", "sparkctl-fleet-door", "python3", "-c",
                                         "import vllm_router; print(vllm_router.__file__)"], check=True).stdout  # fmt: skip
        assert runs.startswith("/opt/sparkctl-fleet-router/vllm_router/"), runs

        client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=60)
        r = client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "hello"}], max_tokens=4)
        assert r.choices[0].message.content
        st = sparkctl("fleet", "status", "-f", str(path))
        assert st["front_door_url"] == url and st["front_door"]["answering"], st["front_door"]
        assert {m["member"]: m["front_door"] for m in st["members"]} == {"lab": "passing", "lab-2": "passing"}
        assert probe_from_door(fleet) == {"lab": "200", "lab-2": "200"}  # fleet doctor's members_reachable, from there

        # taken out at that router: new requests go to lab alone
        assert router_admin.drain(fleet, "lab-2", wait_s=30)["members"]["lab-2"]["state"] == "drained"
        try:
            before = router_admin.status(fleet)["members"]
            for _ in range(2):
                client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "x"}], max_tokens=2)
            after = router_admin.status(fleet)["members"]
            assert after["lab"]["requests"] - before["lab"]["requests"] == 2, (before, after)
            assert after["lab-2"]["requests"] == before["lab-2"]["requests"], (before, after)
        finally:
            router_admin.undrain(fleet, "lab-2")
        assert _passing(fleet, "lab-2") == "passing"

        second = sparkctl("fleet", "up", "-f", str(path))
        assert second["outcome"] == "nothing to change" and second["front_door"]["status"] == "ok", second["front_door"]
    finally:
        lab.host_exec("offload", ["docker", "rm", "-f", "sparkctl-fleet-door"])
        lab.host_exec("offload", ["rm", "-rf", "/var/lib/sparkctl/fleet-router"])
