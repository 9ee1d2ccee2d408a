"""The fleet door deployed on the lab (sparkctl/fleet/door_step.py, door_admin.py): the lab's fleet
of two pairs (tests/lab/conftest.py fleet_lab: `fleet up` deployed it), its door on member lab's
head, port 8890, in the lab's runtime image, reached with the OpenAI client at max_retries=0, and
drained and undrained over SSH. The door's routing itself is tests/unit/test_fleetdoor.py's.

Cost: the door's own step planned and run again (no-ops), a few requests, a 5 s hold before the 503.
The door on a host of its own (the lab's offload host, which holds the lab image): two `fleet up`
runs whose members are no-ops (the first deploys the door there), one `fleet status`, one probe
from that host, a few requests, a drain and an undrain, and one failed pull of a missing image.
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
    from sparkctl.fleet import door_admin
    from sparkctl.fleet.door_step import ensure_front_door, plan_lines

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
    st = door_admin.status(fleet)
    assert {n: m["state"] for n, m in st["members"].items()} == {"lab": "passing", "lab-2": "passing"}, st
    assert sum(m["requests"] for m in st["members"].values()) >= 2, st

    # every member out of the door: held for the door's hold_s, then 503 with Retry-After
    for member in ("lab", "lab-2"):
        assert door_admin.drain(fleet, member, wait_s=30)["members"][member]["state"] == "drained"
    try:
        with pytest.raises(openai.InternalServerError) as e:
            client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "x"}], max_tokens=2)
        assert e.value.status_code == 503 and e.value.response.headers["Retry-After"] == "5"
        said = e.value.response.json()["error"]["message"]
        assert "lab drained" in said and "lab-2 drained" in said, said
    finally:
        for member in ("lab", "lab-2"):
            door_admin.undrain(fleet, member)
    m = httpx.get(fleet.front_door_url + "/fleetdoor/metrics", timeout=5).text
    for member in ("lab", "lab-2"):
        assert f'sparkctl_fleetdoor_member_state{{member="{member}",state="passing"}} 1.0' in m


OWN_PORT = 8891  # beside the lab fleet's own door (member lab's head, 8890)


def _passing(fleet, member: str, timeout: float = 20) -> str:
    from sparkctl.fleet import door_admin

    t_end = time.monotonic() + timeout
    while True:
        state = door_admin.status(fleet)["members"][member]["state"]
        if state == "passing" or time.monotonic() > t_end:
            return state
        time.sleep(0.5)


def test_a_door_on_a_host_of_its_own_is_deployed_serves_drains_and_a_second_up_changes_nothing(lab, fleet_lab, tmp_path):
    from sparkctl.fleet import door_admin
    from sparkctl.fleet.doctor import probe_from_door
    from sparkctl.fleet.door_step import ensure_front_door
    from sparkctl.fleet.model import load_fleet
    from sparkctl.inventory.loader import load_inventory

    address = HOSTS["offload"].mgmt_ip  # the lab's offload host
    url = f"http://{address}:{OWN_PORT}"
    doc = {
        "fleet": {"name": "lab-fleet-own-door"},
        "members": [{"inventory": str(lab.INVENTORY_PATH)}, {"inventory": str(lab.INVENTORY_2_PATH)}],
        "front_door": {
            "host": {"address": address, "user": "root", "key": str(lab.SSH_KEY), "known_hosts": str(lab.KNOWN_HOSTS)},
            "image": load_inventory(lab.INVENTORY_PATH).runtime.image,
            "port": OWN_PORT,
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

        client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=60)
        r = client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "hello"}], max_tokens=4)
        assert r.choices[0].message.content
        st = sparkctl("fleet", "status", "-f", str(path))
        assert st["front_door_url"] == url and st["front_door"]["answering"], st["front_door"]
        assert {m["member"]: m["front_door"] for m in st["members"]} == {"lab": "passing", "lab-2": "passing"}
        assert probe_from_door(fleet) == {"lab": "200", "lab-2": "200"}  # fleet doctor's members_reachable, from there

        # drained over SSH to that host: new requests go to lab alone
        assert door_admin.drain(fleet, "lab-2", wait_s=30)["members"]["lab-2"]["state"] == "drained"
        try:
            before = door_admin.status(fleet)["members"]
            for _ in range(2):
                client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "x"}], max_tokens=2)
            after = door_admin.status(fleet)["members"]
            assert after["lab"]["requests"] - before["lab"]["requests"] == 2, (before, after)
            assert after["lab-2"]["requests"] == before["lab-2"]["requests"], (before, after)
        finally:
            door_admin.undrain(fleet, "lab-2")
        assert _passing(fleet, "lab-2") == "passing"

        second = sparkctl("fleet", "up", "-f", str(path))
        assert second["outcome"] == "nothing to change" and second["front_door"]["status"] == "ok", second["front_door"]
    finally:
        lab.host_exec("offload", ["docker", "rm", "-f", "sparkctl-fleet-door"])
        lab.host_exec("offload", ["rm", "-rf", "/var/lib/sparkctl/fleet-door-code", "/run/sparkctl-fleet-door"])
