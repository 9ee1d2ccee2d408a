"""The fleet's front door, vllm-router: its launch (rendered from the fleet alone), the fleet file's
router section validated before any host, and the deploy step's plans from recorded `docker
inspect` output and a made-up wheel listing, no host needed."""

from __future__ import annotations

import json
import zipfile

import pytest
from hostfacts import host_facts, sec
from test_fleet_model import FLEET, LAB, _write, second_pair

from sparkctl.fleet.model import FleetError, load_fleet
from sparkctl.fleet.router_host import DOOR_HOST, door_inventory, door_session
from sparkctl.fleet.router_launch import launch, wheel_directory, wheel_files, wheel_hash
from sparkctl.fleet.router_step import FrontDoorStep, plan_lines
from sparkctl.runner import Recap
from sparkctl.steps.base import RunContext

WHEEL = "vllm_router-0.1.17-cp38-abi3-manylinux_2_28_aarch64.whl"


def fleet_of(tmp_path, second=None, router=None, **front_door):
    doc = {**FLEET, "front_door": {**FLEET["front_door"], **front_door}}
    if router is not None:
        doc["front_door"]["router"] = router
    inventories = {"inventory.yaml": LAB, "inventory-2.yaml": second or second_pair(LAB)}
    return load_fleet(_write(tmp_path, doc, inventories))


def made_up_wheel(folder, name: str = WHEEL):
    """A made-up wheel: a zip holding a stand-in package, named as vllm-router's wheels are."""
    path = folder / name
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("vllm_router/__init__.py", "# a stand-in\n")
        z.writestr("vllm_router_rs.abi3.so", b"\x7fELF stand-in")
        z.writestr("vllm_router-0.1.17.dist-info/METADATA", "Name: vllm-router\nVersion: 0.1.17\n")
    return path


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


def plan(fleet, inspect: str, rc: int = 0, wheels: str = "aarch64\n"):
    inv, host = door_inventory(fleet)
    # a missing container: the probe prints docker's `[]` (docker inspect exits 1 for it) and exits 0;
    # the wheel probe: `uname -m`, then each complete wheel directory
    f = {host: host_facts(inv, host, fleet_door=sec(inspect, rc), fleet_router_wheels=sec(wheels))}
    return FrontDoorStep().plan(RunContext(inventory=inv, fleet=None, facts=f, fleet_spec=fleet))[host]


def test_the_router_runs_on_the_members_head_with_each_members_front_door_as_a_worker(tmp_path):
    f = fleet_of(tmp_path)
    spec = launch(f)
    assert (spec.host, spec.name, spec.image, spec.network_mode, spec.gpus) == (
        "head", "sparkctl-fleet-door", LAB["runtime"]["image"], "host", "none")  # fmt: skip
    cmd = spec.command
    assert cmd[:3] == ["python3", "-m", "vllm_router.launch_router"]

    def arg(flag):
        return cmd[cmd.index(flag) + 1]

    port = LAB["runtime"]["port"]  # each member's front door: its gateway (or its engine when it has none)
    assert cmd[cmd.index("--worker-urls") + 1 : cmd.index("--worker-urls") + 3] == [
        f"http://10.231.0.11:{port}", f"http://10.231.0.21:{port}"]  # fmt: skip
    assert (arg("--host"), arg("--port"), arg("--policy"), arg("--prometheus-port")) == ("0.0.0.0", "8890", "cache_aware", "8891")
    # a dead member out within seconds, and back as soon as it serves (the router's own: 60 s and 60 s)
    assert (arg("--health-check-interval-secs"), arg("--health-failure-threshold"), arg("--cb-timeout-duration-secs")) == (
        "2", "2", "5")  # fmt: skip
    assert "--queue-size" not in cmd  # a knob the fleet file leaves out is the router's default ...
    assert arg("--balance-abs-threshold") == str(LAB["runtime"]["max_num_seqs"])  # ... but this one: a member's batch
    assert not spec.mounts and "PYTHONPATH" not in spec.env  # no wheel: the image's own vllm-router
    # never the member's cluster label: the member's own up/down would take it for theirs
    assert "io.sparkctl.cluster" not in spec.labels and spec.labels["io.sparkctl.fleet"] == "lab-fleet"


def test_the_fleet_files_policy_and_knobs_reach_the_router(tmp_path):
    f = fleet_of(tmp_path, router={"policy": "consistent_hash", "queue_size": 0, "max_payload_size": 4194304},
                 metrics_port=9100)  # fmt: skip
    cmd = launch(f).command
    assert cmd[cmd.index("--policy") + 1] == "consistent_hash" and cmd[cmd.index("--prometheus-port") + 1] == "9100"
    assert cmd[cmd.index("--queue-size") + 1] == "0" and cmd[cmd.index("--max-payload-size") + 1] == "4194304"
    assert f.router_metrics_url == "http://10.231.0.11:9100/metrics"


@pytest.mark.parametrize(
    "front_door, said",
    [
        ({"router": {"policy": "least_busy"}}, "front_door.router.policy"),
        ({"router": {"queue_size": -1}}, "front_door.router.queue_size"),
        ({"router": {"retries": 3}}, "front_door.router.retries"),
        ({"router": {"wheel": "wheels/missing.whl"}}, "is not a file; download the router's wheel"),
        ({"metrics_port": 8890}, "the router's metrics need a port of their own"),
        ({"metrics_port": LAB["runtime"]["port"]}, "front_door.metrics_port"),
    ],
)
def test_a_bad_router_section_is_named_before_any_host(tmp_path, front_door, said):
    with pytest.raises(FleetError) as e:
        fleet_of(tmp_path, **front_door)
    assert said in e.value.message, e.value.message


def test_a_wheel_for_no_known_architecture_or_not_the_routers_is_refused(tmp_path):
    for name, said in (("vllm_router-0.1.17-cp38-abi3-win_amd64.whl", "is built for none of x86_64, aarch64"),
                       ("other-1.0-py3-none-any.whl", "is not a vllm-router wheel")):  # fmt: skip
        d = tmp_path / name
        d.mkdir()
        made_up_wheel(d, name)
        with pytest.raises(FleetError) as e:
            fleet_of(d, router={"wheel": name})
        assert said in e.value.message, e.value.message


def test_it_restarts_only_when_its_own_launch_changes(tmp_path):
    base = launch(fleet_of(tmp_path)).labels["io.sparkctl.config-hash"]

    def hash_of(name, **kw):
        d = tmp_path / name
        d.mkdir()
        return launch(fleet_of(d, **kw)).labels["io.sparkctl.config-hash"]

    engine_change = second_pair(LAB)
    engine_change["runtime"]["max_num_seqs"] = 7
    assert hash_of("engine", second=engine_change) == base  # a member's engine change: the door stays
    assert hash_of("port", port=8895) != base
    assert hash_of("policy", router={"policy": "power_of_two"}) != base
    moved = second_pair(LAB)
    moved["runtime"]["port"] = 8100
    assert hash_of("member-port", second=moved) != base


def test_the_step_starts_and_waits_then_is_a_noop(tmp_path):
    f = fleet_of(tmp_path)
    want = launch(f).labels["io.sparkctl.config-hash"]
    first = plan(f, "[]\n")
    assert [c.action for c in first.changes] == ["start", "wait"]
    assert "sparkctl-fleet-door not on head" in first.reason and "members lab, lab-2" in first.changes[0].summary
    assert "vllm-router (cache_aware)" in first.changes[0].summary
    again = plan(f, json.dumps([container(want)]))
    assert again.empty and f"sparkctl-fleet-door running config {want} on :8890" in again.reason
    # the old aiohttp door (or any launch that differs) in the same container name: replaced in place
    stale = plan(f, json.dumps([container("0ld")]))
    assert [c.action for c in stale.changes] == ["start", "wait"] and "runs config 0ld" in stale.reason
    dead = plan(f, json.dumps([container(want, "exited")]))
    assert [c.action for c in dead.changes] == ["start", "wait"] and "is exited" in dead.reason
    blocked = plan(f, "Cannot connect to the Docker daemon at unix:///var/run/docker.sock\n", rc=1)
    assert blocked.blocked and "Cannot connect to the Docker daemon" in blocked.blocked
    lines = plan_lines(Recap("fleet-door", True, plans=[first, again]))
    assert lines[0].startswith("front door on head: start vllm-router") and "nothing to do" in lines[-1]


def test_a_wheel_is_shipped_once_mounted_and_on_the_path_and_one_for_another_arch_blocks(tmp_path):
    (tmp_path / "wheels").mkdir()
    wheel = made_up_wheel(tmp_path / "wheels")
    f = fleet_of(tmp_path, router={"wheel": "wheels/" + WHEEL})
    spec = launch(f)
    mount = spec.mounts[0]
    assert (mount.source, mount.target, mount.read_only) == (wheel_directory(wheel), "/opt/sparkctl-fleet-router", True)
    assert mount.source.endswith("/" + wheel_hash(wheel)) and spec.env["PYTHONPATH"] == "/opt/sparkctl-fleet-router"
    assert set(wheel_files(wheel)) == {"vllm_router/__init__.py", "vllm_router_rs.abi3.so",
                                       "vllm_router-0.1.17.dist-info/METADATA"}  # fmt: skip
    first = plan(f, "[]\n", wheels="aarch64\n")
    assert [c.action for c in first.changes] == ["ship-router", "start", "wait"]
    assert f"copy vllm-router from {WHEEL}" in first.changes[0].summary
    shipped = plan(f, json.dumps([container(spec.labels["io.sparkctl.config-hash"])]), wheels=f"aarch64\n{wheel_hash(wheel)}\n")
    assert shipped.empty
    other = plan(f, "[]\n", wheels="x86_64\n")
    assert other.blocked and f"{WHEEL} is for aarch64, head is x86_64" in other.blocked
    assert "--platform manylinux_2_28_x86_64 vllm-router" in other.blocked


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
    # the same members elsewhere: another launch, so moving the door restarts it there
    on_head = launch(fleet_of(subdir(tmp_path, "on-head")))
    assert spec.labels["io.sparkctl.config-hash"] != on_head.labels["io.sparkctl.config-hash"]
    first = plan(f, "[]\n")
    assert first.host == DOOR_HOST and [c.action for c in first.changes] == ["start", "wait"]
    assert "in registry.example:5000/door:1" in first.changes[0].summary
    assert plan(f, json.dumps([container(spec.labels["io.sparkctl.config-hash"])])).empty


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
