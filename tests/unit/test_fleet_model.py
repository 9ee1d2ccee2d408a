"""The fleet file: what `load_fleet` accepts, and every mistake named with its file, line and field."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from sparkctl.errors import InputError
from sparkctl.fleet.model import FleetError, fleet_path, load_fleet

REPO = Path(__file__).resolve().parents[2]
LAB = yaml.safe_load((REPO / "inventories" / "lab.yaml").read_text())


def second_pair(doc: dict) -> dict:
    """The lab's inventory as a second pair: its own name and addresses, no offload host."""
    d = copy.deepcopy(doc)
    d["cluster"]["name"] = "lab-2"
    d["hosts"].pop("offload")
    d.pop("engram")
    d["runtime"].pop("speculative")
    d["weights"].pop("drafter")  # no drafter host, no drafter checkpoint (sparkctl_lab.topology's second pair)
    for name, last in (("head", 21), ("worker", 22)):
        h = d["hosts"][name]
        h["ssh"]["address"] = f"10.231.0.{last}"
        h["fabric"] = [link for link in h["fabric"] if link["peer"] != "offload"]
    return d


def _write(tmp: Path, fleet: dict, inventories: dict[str, dict]) -> Path:
    for name, doc in inventories.items():
        (tmp / name).write_text(yaml.safe_dump(doc))
    p = tmp / "fleet.yaml"
    p.write_text(yaml.safe_dump(fleet, sort_keys=False))
    return p


FLEET = {
    "fleet": {"name": "lab-fleet"},
    "members": [{"inventory": "inventory.yaml"}, {"inventory": "inventory-2.yaml"}],
    "front_door": {"member": "lab", "port": 8890},
    "rollout": {"max_unavailable": 1, "stop_on_failure": True},
}


def test_a_two_pair_fleet_loads_in_rollout_order_with_its_door_on_the_first_head(tmp_path):
    p = _write(tmp_path, FLEET, {"inventory.yaml": LAB, "inventory-2.yaml": second_pair(LAB)})
    f = load_fleet(p)
    assert [m.name for m in f.members] == ["lab", "lab-2"]
    assert f.members[1].inventory_path == tmp_path / "inventory-2.yaml"
    assert f.member("lab-2").head_address == "10.231.0.21"
    assert f.front_door_url == "http://10.231.0.11:8890"
    assert (f.rollout.max_unavailable, f.rollout.stop_on_failure) == (1, True)
    with pytest.raises(InputError, match="no member 'nope'"):
        f.member("nope")


def _problems(tmp_path, fleet: dict, second: dict | None = None) -> str:
    p = _write(tmp_path, fleet, {"inventory.yaml": LAB, "inventory-2.yaml": second or second_pair(LAB)})
    with pytest.raises(FleetError) as err:
        load_fleet(p)
    assert err.value.exit_code == 2
    return err.value.message


def test_a_member_that_is_not_a_valid_inventory_is_named_with_its_own_problem(tmp_path):
    bad = second_pair(LAB)
    bad["runtime"]["max_num_seqs"] = 0
    msg = _problems(tmp_path, FLEET, bad)
    assert "members[1].inventory" in msg and "inventory-2.yaml" in msg and "max_num_seqs" in msg


def test_two_members_with_one_name_or_one_host_are_refused(tmp_path):
    same = copy.deepcopy(LAB)
    msg = _problems(tmp_path, FLEET, same)
    assert "cluster name 'lab' is also member 0's" in msg
    assert "host head (10.231.0.11) is also host head of member lab" in msg


def test_the_door_must_name_a_member_and_a_free_port(tmp_path):
    fleet = copy.deepcopy(FLEET)
    fleet["front_door"] = {"member": "lab-3", "port": 8890}
    assert "front_door.member: 'lab-3' is not a member; members: lab, lab-2" in _problems(tmp_path, fleet)
    fleet["front_door"] = {"member": "lab", "port": 8888}
    assert "front_door.port: 8888 is its runtime.port on member lab's head" in _problems(tmp_path, fleet)
    fleet["front_door"] = {"member": "lab", "host": {"address": "10.231.0.30"}}
    assert "name exactly one of member" in _problems(tmp_path, fleet)
    fleet["front_door"] = {"host": {"address": "10.231.0.30"}}
    assert "front_door.image: a front door on a host of its own needs the image" in _problems(tmp_path, fleet)


def test_a_door_on_a_host_of_its_own_must_not_take_a_port_a_member_uses_on_that_address(tmp_path):
    fleet = copy.deepcopy(FLEET)
    door = {"image": "x/y:1"}
    # the lab's offload host (10.231.0.13) runs member lab's drafter on 8100
    fleet["front_door"] = {**door, "host": {"address": "10.231.0.13"}, "port": 8100}
    assert ("front_door.port: 8100 is its runtime.speculative.drafter_port on 10.231.0.13 (host offload of member lab)"
            in _problems(tmp_path, fleet))  # fmt: skip
    fleet["front_door"] = {**door, "host": {"address": "10.231.0.21"}, "port": 8888}
    assert "front_door.port: 8888 is its runtime.port on 10.231.0.21 (host head of member lab-2)" in _problems(tmp_path, fleet)
    # another port on that host, or that port on an address no member uses: the door may run there
    for address, port in (("10.231.0.13", 8891), ("10.231.0.40", 8100)):
        fleet["front_door"] = {**door, "host": {"address": address}, "port": port}
        f = load_fleet(_write(tmp_path, fleet, {"inventory.yaml": LAB, "inventory-2.yaml": second_pair(LAB)}))
        assert (f.front_door_url, f.front_door_image, f.door_member) == (f"http://{address}:{port}", "x/y:1", None)


def test_the_door_hosts_ssh_block_is_the_inventorys_ssh_model(tmp_path):
    fleet = copy.deepcopy(FLEET)
    fleet["front_door"] = {"host": {"address": "10.231.0.40", "host_key_policy": "trust-all"}, "image": "x/y:1"}
    msg = _problems(tmp_path, fleet)
    assert "front_door.host.host_key_policy" in msg and "strict" in msg and "accept-new" in msg
    fleet["front_door"] = {"host": {"address": "10.231.0.40", "password": "hunter2"}, "image": "x/y:1"}
    msg = _problems(tmp_path, fleet)
    assert "front_door.host.password" in msg and "hunter2" not in msg


def test_unknown_keys_and_bad_values_are_located(tmp_path):
    fleet = copy.deepcopy(FLEET)
    fleet["rollout"] = {"max_unavailble": 2}
    fleet["fleet"] = {"name": "Lab Fleet"}
    msg = _problems(tmp_path, fleet)
    assert "fleet file" in msg and "rollout.max_unavailble" in msg and "max_unavailable" in msg
    assert "fleet.name" in msg and ":2:" in msg  # fleet.name's line


def test_the_fleet_file_comes_from_the_option_or_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("SPARKCTL_FLEET", raising=False)
    with pytest.raises(InputError, match=r"pass -f/--fleet FILE or set \$SPARKCTL_FLEET"):
        fleet_path(None)
    monkeypatch.setenv("SPARKCTL_FLEET", str(tmp_path / "f.yaml"))
    assert fleet_path(None) == tmp_path / "f.yaml"
    assert fleet_path(Path("x.yaml")) == Path("x.yaml")


def test_a_missing_member_inventory_is_named_at_its_line(tmp_path):
    fleet = copy.deepcopy(FLEET)
    fleet["members"].append({"inventory": "gone.yaml"})
    msg = _problems(tmp_path, fleet)
    assert "members[2].inventory" in msg and "gone.yaml does not exist" in msg


def test_a_missing_or_special_fleet_file_is_named_as_the_fleet_file(tmp_path):
    with pytest.raises(InputError) as err:
        load_fleet(tmp_path / "nope.yaml")
    assert err.value.exit_code == 2 and err.value.message == f"fleet file {tmp_path / 'nope.yaml'} does not exist"
    assert "docs/fleets.md" in err.value.fix
    with pytest.raises(InputError) as err:
        load_fleet(tmp_path)  # a directory
    assert "not a fleet file" in err.value.message and "inventory" not in err.value.message
