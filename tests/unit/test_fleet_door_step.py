"""The fleet door's deploy step: its launch (rendered from the fleet alone) and its plans from
recorded `docker inspect` output, no host needed."""

from __future__ import annotations

import json

from hostfacts import host_facts, sec
from test_fleet_model import FLEET, LAB, _write, second_pair

from sparkctl.fleet import door_code
from sparkctl.fleet.door_host import DOOR_HOST, door_inventory, door_session
from sparkctl.fleet.door_step import FrontDoorStep, launch, plan_lines
from sparkctl.fleet.model import load_fleet
from sparkctl.runner import Recap
from sparkctl.steps.base import RunContext


def fleet_of(tmp_path, second=None, **front_door):
    doc = {**FLEET, "front_door": {**FLEET["front_door"], **front_door}}
    inventories = {"inventory.yaml": LAB, "inventory-2.yaml": second or second_pair(LAB)}
    return load_fleet(_write(tmp_path, doc, inventories))


def container(config_hash: str, state: str = "running") -> dict:
    # `docker inspect sparkctl-fleet-door`, the fields the fact reads (facts/docker.py parse_containers)
    return {
        "Id": "door-ctr", "Name": "/sparkctl-fleet-door", "Image": "sha256:" + "1" * 64,
        "State": {"Status": state, "ExitCode": 0, "StartedAt": "2026-12-01T00:00:00.000000000Z"},
        "Config": {"Image": LAB["runtime"]["image"],
                   "Labels": {"io.sparkctl.fleet": "lab-fleet", "io.sparkctl.role": "fleet-door",
                              "io.sparkctl.config-hash": config_hash}},
        "HostConfig": {},
    }  # fmt: skip


def plan(fleet, inspect: str, rc: int = 0, code: str = "present\n"):
    inv, host = door_inventory(fleet)
    # a missing container: the probe prints docker's `[]` (docker inspect exits 1 for it) and exits 0
    f = {host: host_facts(inv, host, fleet_door=sec(inspect, rc), fleet_door_code=sec(code))}
    return FrontDoorStep().plan(RunContext(inventory=inv, fleet=None, facts=f, options={"fleet": fleet}))[host]


def test_the_door_runs_on_the_members_head_in_its_image_with_every_member_behind_it(tmp_path):
    f = fleet_of(tmp_path)
    spec = launch(f)
    assert (spec.host, spec.name, spec.image, spec.network_mode, spec.gpus) == (
        "head", "sparkctl-fleet-door", LAB["runtime"]["image"], "host", "none")  # fmt: skip
    cmd = spec.command
    assert cmd[:3] == ["python3", "-m", "sparkctl.fleetdoor"] and cmd[cmd.index("--listen") + 1] == "0.0.0.0:8890"
    members = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--member"]
    port, engine = LAB["runtime"]["port"], LAB.get("gateway", {}).get("engine_port", 8001)
    assert members == [f"lab=http://10.231.0.11:{port},http://10.231.0.11:{engine}",
                       f"lab-2=http://10.231.0.21:{port},http://10.231.0.21:{engine}"]  # fmt: skip
    code = next(m for m in spec.mounts if m.target == "/opt/sparkctl-fleet-door")
    assert code.read_only and code.source.endswith("/" + door_code.code_hash())
    assert "sparkctl/fleetdoor/proxy.py" in door_code.files() and "sparkctl/gateway/proxy.py" in door_code.files()
    # never the member's cluster label: the member's own up/down would take it for theirs
    assert "io.sparkctl.cluster" not in spec.labels and spec.labels["io.sparkctl.fleet"] == "lab-fleet"


def test_it_restarts_only_when_its_own_launch_changes(tmp_path):
    base = launch(fleet_of(tmp_path)).labels["io.sparkctl.config-hash"]

    def hash_of(name, **kw):
        d = tmp_path / name
        d.mkdir()
        return launch(fleet_of(d, **kw)).labels["io.sparkctl.config-hash"]

    engine_change = second_pair(LAB)
    engine_change["runtime"]["max_num_seqs"] = 7
    assert hash_of("engine", second=engine_change) == base  # a member's engine change: the door stays
    assert hash_of("port", port=8891) != base
    moved = second_pair(LAB)
    moved["runtime"]["port"] = 8100
    assert hash_of("member-port", second=moved) != base


def test_the_step_ships_the_code_starts_and_waits_then_is_a_noop(tmp_path):
    f = fleet_of(tmp_path)
    want = launch(f).labels["io.sparkctl.config-hash"]
    first = plan(f, "[]\n", code="absent\n")
    assert [c.action for c in first.changes] == ["ship-code", "start", "wait-door"]
    assert "sparkctl-fleet-door not on head" in first.reason and "members lab, lab-2" in first.changes[1].summary
    again = plan(f, json.dumps([container(want)]))
    assert again.empty and f"sparkctl-fleet-door running config {want} on :8890" in again.reason
    stale = plan(f, json.dumps([container("0ld")]))
    assert [c.action for c in stale.changes] == ["start", "wait-door"] and "runs config 0ld" in stale.reason
    dead = plan(f, json.dumps([container(want, "exited")]))
    assert [c.action for c in dead.changes] == ["start", "wait-door"] and "is exited" in dead.reason
    blocked = plan(f, "Cannot connect to the Docker daemon at unix:///var/run/docker.sock\n", rc=1)
    assert blocked.blocked and "Cannot connect to the Docker daemon" in blocked.blocked
    lines = plan_lines(Recap("fleet-door", True, plans=[first, again]))
    assert lines[0].startswith("front door on head: copy the fleet door's code") and "nothing to do" in lines[-1]


OWN_HOST = {"address": "10.231.0.40", "user": "door", "port": 2222, "key": "keys/door",
            "known_hosts": "keys/known_hosts", "host_key_policy": "accept-new"}  # fmt: skip


def subdir(tmp_path, name):
    (tmp_path / name).mkdir()
    return tmp_path / name


def own_host_fleet(tmp_path, **front_door):
    # the members' inventories in a folder of their own: the door's paths are the fleet file's, not theirs
    doc = {**FLEET, "members": [{"inventory": "members/inventory.yaml"}, {"inventory": "members/inventory-2.yaml"}],
           "front_door": {"host": OWN_HOST, "image": "registry.example:5000/door:1", "port": 8890, **front_door}}  # fmt: skip
    for d in ("keys", "members"):
        (tmp_path / d).mkdir(exist_ok=True)
    (tmp_path / "keys" / "door").write_text("a private key\n")  # a key sparkctl must find: resolve() checks it exists
    return load_fleet(_write(tmp_path, doc, {"members/inventory.yaml": LAB, "members/inventory-2.yaml": second_pair(LAB)}))


def test_a_door_on_a_host_of_its_own_runs_there_in_its_image(tmp_path):
    f = own_host_fleet(tmp_path)
    spec = launch(f)
    assert (spec.host, spec.image, f.front_door_url) == (DOOR_HOST, "registry.example:5000/door:1", "http://10.231.0.40:8890")
    members = [spec.command[i + 1] for i, a in enumerate(spec.command) if a == "--member"]
    assert [m.split("=")[0] for m in members] == ["lab", "lab-2"]
    # the same members elsewhere: another launch, so moving the door restarts it there
    on_head = launch(fleet_of(subdir(tmp_path, "on-head")))
    assert spec.labels["io.sparkctl.config-hash"] != on_head.labels["io.sparkctl.config-hash"]
    # its plan reads the same facts on that host as on a member's head
    first = plan(f, "[]\n", code="absent\n")
    assert first.host == DOOR_HOST and [c.action for c in first.changes] == ["ship-code", "start", "wait-door"]
    assert "in registry.example:5000/door:1" in first.changes[1].summary
    again = plan(f, json.dumps([container(spec.labels["io.sparkctl.config-hash"])]))
    assert again.empty


def test_the_door_session_is_the_fleet_files_ssh_block_with_paths_from_its_folder(tmp_path):
    f = own_host_fleet(tmp_path)
    inv, host = door_inventory(f)
    assert (host, list(inv.hosts), inv.cluster.name) == (DOOR_HOST, [DOOR_HOST], "lab-fleet")
    with door_session(f) as (sessions, name):  # built, never connected: no host here
        t = sessions[name].target
    assert (name, t.address, t.user, t.port, t.host_key_policy) == (DOOR_HOST, "10.231.0.40", "door", 2222, "accept-new")
    assert (t.key, t.known_hosts) == (tmp_path / "keys" / "door", tmp_path / "keys" / "known_hosts")
    # a door on a member's head goes through the same function: that member's own inventory and head
    m = fleet_of(subdir(tmp_path, "on-head"))
    with door_session(m) as (sessions, name):
        assert (name, sessions.inventory, sessions[name].target.address) == ("head", m.member("lab").inventory, "10.231.0.11")
