"""The fleet door deployed on the lab (sparkctl/fleet/door_step.py, door_admin.py): the lab's fleet
of two pairs (tests/lab/conftest.py fleet_lab: `fleet up` deployed it), its door on member lab's
head, port 8890, in the lab's runtime image, reached with the OpenAI client at max_retries=0, and
drained and undrained over SSH. The door's routing itself is tests/unit/test_fleetdoor.py's.

Cost: the door's own step planned and run again (no-ops), a few requests, a 5 s hold before the 503.
"""

from __future__ import annotations

import httpx
import openai
import pytest

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
