"""sparkctl's own transports against the lab's real sshd and dockerd on every host."""

from __future__ import annotations

from pathlib import Path

import paramiko
import pytest
import yaml

from sparkctl.errors import HostError
from sparkctl.inventory.models import Inventory
from sparkctl.transport.ssh import Fleet, HostSession

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def inv(lab) -> Inventory:
    inventory = Inventory.model_validate(yaml.safe_load((ROOT / "inventories" / "lab.yaml").read_text()))
    return inventory


@pytest.fixture(scope="module")
def fleet(inv):
    with Fleet(inv) as f:
        yield f


def target_with(inv, name, **changes):
    return inv.ssh_target(name).model_copy(update=changes)


def test_ssh_reaches_every_host_in_parallel(fleet):
    out = fleet.map(lambda s: s.run("hostname").check().stdout.strip())
    assert {h: o.value for h, o in out.items()} == {"head": "head", "worker": "worker", "offload": "offload"}
    assert all(o.ok for o in out.values())


def test_one_connection_per_host_is_reused(fleet):
    session = fleet["head"]
    session.run("true")
    transport = session.paramiko_client.get_transport()
    for _ in range(3):
        session.run("true")
    assert session.paramiko_client.get_transport() is transport


def test_docker_sdk_over_ssh_negotiates_and_reaches_each_hosts_own_engine(fleet):
    out = fleet.map(lambda s: (s.docker().api.api_version, s.docker().info()["ID"]))
    versions = {o.value[0] for o in out.values()}
    assert versions == {"1.41"}, out  # Debian's dockerd 20.10, negotiated (never pinned)
    engine_ids = {o.value[1] for o in out.values()}
    assert len(engine_ids) == 3  # three separate engines, not one shared daemon


def test_one_engine_connection_serves_requests_to_every_path(inv):
    """Every SDK request to a host's engine (the version, the info, lists, each network by ID, the
    containers fact read through it) goes over one `docker system dial-stdio` on that host, not one
    per URL path; and that fact is the one the host's probe reads."""
    from sparkctl.facts.docker import read_containers
    from sparkctl.facts.host import gather_host

    # this host's (its network namespace: the lab's hosts share one process table); other
    # clients (the module's fleet) may hold theirs: only the ones this client adds count
    count = (
        "n=0; for p in $(pgrep -f 'docker[^ ]* system dial-stdio'); do "
        '[ "$(readlink /proc/$p/ns/net)" = "$(readlink /proc/self/ns/net)" ] && n=$((n+1)); done; echo $n'
    )
    with Fleet(inv) as f:
        session = f["head"]
        before = int(session.run(count).stdout)
        client = session.docker()
        client.info()
        nets = client.networks.list()  # bridge, host and none on any engine: paths of their own
        for n in nets:
            client.networks.get(n.id)
        sdk = read_containers(client, inv.cluster.name)
        added = int(session.run(count).stdout) - before
        probed = gather_host(session, inv, {"containers"}).containers
    assert len(nets) >= 2
    assert added == 1, f"{added} dial-stdio processes for one client's requests"
    assert sdk is not None and probed is not None
    assert sorted(sdk, key=lambda c: c.id) == sorted(probed, key=lambda c: c.id)


def test_nonzero_exit_is_data_and_check_redacts_secrets(fleet):
    r = fleet["worker"].run("echo HF_TOKEN=hf_abcdefghijklmnopqrstu >&2; exit 3")
    assert r.exit_code == 3
    with pytest.raises(HostError) as err:
        r.check("token probe")
    assert "hf_abcdefghijklmnopqrstu" not in err.value.message
    assert "worker" in err.value.message


def test_strict_policy_refuses_an_unknown_host_and_writes_nothing(inv, tmp_path):
    kh = tmp_path / "known_hosts"
    kh.write_text("")
    session = HostSession(target_with(inv, "head", known_hosts=kh, host_key_policy="strict"))
    with pytest.raises(HostError) as err:
        session.connect()
    assert "not in" in err.value.message and "strict" in err.value.message
    assert "SHA256:" in err.value.message  # the fingerprint to verify out of band
    assert kh.read_text() == ""  # Fabric's AutoAddPolicy is really gone


def test_accept_new_records_the_real_key_then_reuses_it(inv, tmp_path, lab):
    kh = tmp_path / "known_hosts"
    session = HostSession(target_with(inv, "worker", known_hosts=kh, host_key_policy="accept-new"))
    session.run("true").check()
    session.close()
    recorded = paramiko.HostKeys(str(kh))
    lab_keys = paramiko.HostKeys(str(inv.ssh_target("worker").known_hosts))
    addr = inv.hosts["worker"].ssh.address
    assert recorded.lookup(addr) is not None
    assert recorded.lookup(addr)["ssh-ed25519"] == lab_keys.lookup(addr)["ssh-ed25519"]
    # second contact: known now, nothing appended
    before = kh.read_text()
    HostSession(target_with(inv, "worker", known_hosts=kh, host_key_policy="accept-new")).run("true").check()
    assert kh.read_text() == before


@pytest.mark.parametrize("policy", ["strict", "accept-new"])
def test_changed_host_key_is_refused_with_the_fix(inv, tmp_path, policy):
    # known_hosts claims head has another key: what a reinstalled host or a MITM looks like
    impostor = paramiko.Ed25519Key.from_private_key_file(str(inv.ssh_target("head").key))
    kh = tmp_path / "known_hosts"
    kh.write_text(f"{inv.hosts['head'].ssh.address} ssh-ed25519 {impostor.get_base64()}\n")
    session = HostSession(target_with(inv, "head", known_hosts=kh, host_key_policy=policy))
    with pytest.raises(HostError) as err:
        session.connect()
    assert "HOST KEY CHANGED" in err.value.message
    assert "ssh-keygen -R" in err.value.fix
    assert kh.read_text().count("\n") == 1  # not overwritten, not appended


def test_missing_key_file_is_an_operator_error(inv, tmp_path):
    session = HostSession(target_with(inv, "head", key=tmp_path / "nope"))
    with pytest.raises(HostError) as err:
        session.connect()
    assert "does not exist" in err.value.message


def test_unreachable_host_fails_for_that_host_only(inv):
    # an address inside the lab's management subnet that no host holds
    data = inv.model_dump(mode="json")
    data["hosts"]["offload"]["ssh"]["address"] = "10.231.0.99"
    data["ssh_defaults"]["connect_timeout"] = 1
    broken = Inventory.model_validate(data)
    with Fleet(broken) as f:
        out = f.map(lambda s: s.run("true").exit_code)
    assert out["head"].ok and out["worker"].ok
    assert not out["offload"].ok and "cannot connect" in out["offload"].error


def test_jumbo_frames_cross_the_fabric_but_not_the_management_net(fleet):
    head = fleet["head"]
    assert head.run("ping -M do -s 8972 -c 1 -W 2 -I enp1s0f0np0 10.231.100.3").ok
    assert head.run("ping -M do -s 8972 -c 1 -W 2 -I enP2p1s0f0np0 10.231.101.3").ok
    too_big = head.run("ping -M do -s 8973 -c 1 -W 2 -I enp1s0f0np0 10.231.100.3")
    assert not too_big.ok and "message too long" in too_big.stdout + too_big.stderr
    mgmt = head.run("ping -M do -s 1473 -c 1 -W 2 10.231.0.12")
    assert not mgmt.ok
    assert fleet["offload"].run("ping -M do -s 8972 -c 1 -W 2 -I enp65s0f1np1 10.231.111.3").ok
