"""The fleet door deployed on the lab (sparkctl/fleet/door_step.py, door_admin.py): a one-member fleet
(the lab's own pair, no second pair: the two-pair fleet tests are the fleet's), its door on the
head's port 8890 in the lab's runtime image, reached with the OpenAI client at max_retries=0, and
drained and undrained over SSH. The door's routing itself is tests/unit/test_fleetdoor.py's.

Cost: one `sparkctl up` (a no-op on a converged lab), the door's code shipped and its container
started (a few seconds), a 5 s hold before the 503; the container is removed at the end.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import openai
import pytest
import yaml
from labcli import sparkctl

pytestmark = pytest.mark.lab

NAME = "deepseek-v4.1-flash"
PORT = 8890


@pytest.fixture(scope="module")
def fleet(lab, tmp_path_factory):
    from sparkctl.fleet.model import load_fleet

    sparkctl("up", "-i", str(lab.INVENTORY_PATH))  # the pair serves (a no-op when it already does)
    path = Path(tmp_path_factory.mktemp("fleetdoor")) / "fleet.yaml"
    path.write_text(yaml.safe_dump({"fleet": {"name": "door-lab"}, "members": [{"inventory": str(lab.INVENTORY_PATH)}],
                                    "front_door": {"member": "lab", "port": PORT}}))  # fmt: skip
    yield load_fleet(path)
    lab.host_exec("head", ["docker", "rm", "-f", "sparkctl-fleet-door"])


def test_the_door_deploys_serves_drains_and_a_second_run_is_a_noop(fleet):
    from sparkctl.fleet import door_admin
    from sparkctl.fleet.door_step import ensure_front_door, plan_lines

    check = ensure_front_door(fleet, check=True)
    assert not check.failed and any("start sparkctl-fleet-door" in line for line in plan_lines(check)), plan_lines(check)
    up = ensure_front_door(fleet)
    assert not up.failed, [r.to_dict() for r in up.results]
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
    assert st["members"]["lab"]["state"] == "passing" and st["members"]["lab"]["requests"] >= 2, st

    assert door_admin.drain(fleet, "lab", wait_s=30)["members"]["lab"]["state"] == "drained"
    try:
        with pytest.raises(openai.InternalServerError) as e:
            client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "x"}], max_tokens=2)
        assert e.value.status_code == 503 and e.value.response.headers["Retry-After"] == "5"
        assert "lab drained" in e.value.response.json()["error"]["message"]
    finally:
        door_admin.undrain(fleet, "lab")
    m = httpx.get(fleet.front_door_url + "/fleetdoor/metrics", timeout=5).text
    assert 'sparkctl_fleetdoor_member_state{member="lab",state="passing"} 1.0' in m
