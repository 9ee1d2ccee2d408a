"""Mistakes on the control machine, caught by `inventory validate` and by every command that opens SSH,
before any host is touched (exit 2, the field, the file's line and the fix named): a key file that does
not exist or is a public key, a host missing from known_hosts under host_key_policy strict, a fleet file
passed as an inventory. Valid set-ups pass: keys and known_hosts from ssh_config, hashed known_hosts
lines, no key file at all (the agent), accept-new. `render` reaches no host and needs none of it.

Real files (keys from ssh-keygen, known_hosts as ssh-keygen -H hashes it), the real CLI; the hosts are
loopback listeners that count the connections they get (none may come)."""

from __future__ import annotations

import copy
import os
import socket
import subprocess
from pathlib import Path

import clirun
import pytest
import yaml
from climain import run
from controlfiles import usable_here

REPO = Path(__file__).resolve().parents[2]
LAB = yaml.safe_load((REPO / "inventories" / "lab.yaml").read_text())


@pytest.fixture
def listener():
    """A loopback port where an SSH server would be: every host of the inventory points at it."""
    s = socket.create_server(("127.0.0.1", 0))
    s.setblocking(False)
    yield s
    s.close()


def connections(s: socket.socket) -> int:
    n = 0
    while True:
        try:
            s.accept()[0].close()
            n += 1
        except BlockingIOError:
            return n


def keygen(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path


def inventory(tmp_path: Path, port: int = 22, **defaults) -> dict:
    """The lab's inventory on loopback (head 127.0.0.1, worker .2, offload .3 at `port`), usable from
    here (its own key, every host in its known_hosts), then `defaults` over ssh_defaults (None: unset)."""
    doc = copy.deepcopy(LAB)
    for i, host in enumerate(doc["hosts"].values(), start=1):
        host["ssh"] = {"address": f"127.0.0.{i}"}
    doc["ssh_defaults"].update(port=port, config_file="none", connect_timeout=2)
    doc = usable_here(doc, tmp_path)
    for key, value in defaults.items():
        if value is None:
            doc["ssh_defaults"].pop(key, None)
        else:
            doc["ssh_defaults"][key] = value
    return doc


def write(tmp_path: Path, doc: dict, name: str = "cluster.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def sparkctl(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("SPARKCTL_INVENTORY", "SPARKCTL_FLEET")}
    env.update(SPARKCTL_ONLY_NETWORKS="127.0.0.0/8", COLUMNS="80")  # a narrow terminal's width
    return clirun.sparkctl(list(args), env=env, cwd=cwd, timeout=60)


def test_a_usable_inventory_validates(tmp_path, capsys):
    code, out, err = run(["inventory", "validate", str(write(tmp_path, inventory(tmp_path)))], capsys)
    assert code in (0, None) and out.startswith("ok "), err


def test_a_missing_key_stops_validate_and_doctor_before_any_host_with_its_whole_path(tmp_path, listener):
    # a path longer than the terminal is wide: printed whole, on one line, never cut in a table cell
    missing = tmp_path / ("keys-of-the-control-machine-" * 3) / "id_ed25519_for_the_spark_pair"
    doc = inventory(tmp_path, port=listener.getsockname()[1], key=str(missing))  # head at the listener
    path = write(tmp_path, doc)
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if text.strip().startswith("key:"))
    for args in (["inventory", "validate", str(path)], ["doctor", "-i", str(path)], ["status", "-i", str(path)]):
        r = sparkctl(*args)
        assert r.returncode == 2 and "Traceback" not in r.stderr, (args, r.stderr)
        assert f"{path}:{line}: ssh_defaults.key: SSH key {missing} does not exist on this machine" in r.stderr, r.stderr
        assert f"SSH key {missing} does not exist" in r.stderr.splitlines()[1]  # whole, on its own line
        assert "point ssh.key (or ssh_defaults.key) at the private key" in r.stderr and "\nfix: " in r.stderr
        assert r.stderr.count("does not exist") == 1  # ssh_defaults.key: said once, not once per host
    assert connections(listener) == 0  # no command touched a host
    # a key only the inventory's host section names is that host's field
    doc["ssh_defaults"]["key"] = str(tmp_path / "id_ed25519")
    doc["hosts"]["worker"]["ssh"]["key"] = str(missing)
    r = sparkctl("inventory", "validate", str(write(tmp_path, doc)))
    assert r.returncode == 2 and f"hosts.worker.ssh.key: SSH key {missing} does not exist" in r.stderr, r.stderr


def test_a_public_key_is_refused_by_its_name_and_by_its_content(tmp_path, capsys):
    key = keygen(tmp_path / "id_operator")
    path = write(tmp_path, inventory(tmp_path, key=f"{key}.pub"))
    code, _, err = run(["inventory", "validate", str(path)], capsys)
    assert code == 2 and f"ssh_defaults.key: SSH key {key}.pub is a public key (.pub)" in err
    assert f"name the private key beside it: {key}" in " ".join(err.split())
    renamed = tmp_path / "operator-key"  # a public key under a private key's name
    renamed.write_text(Path(f"{key}.pub").read_text())
    code, out, err = run(["inventory", "validate", str(write(tmp_path, inventory(tmp_path, key=str(renamed)))), "--json"], capsys)
    doc = yaml.safe_load(out)
    assert code == 2 and doc["problems"][0]["path"] == "ssh_defaults.key"
    assert f"SSH key {renamed} holds a public key (ssh-ed25519 ...)" in doc["problems"][0]["message"]
    code, _, err = run(["inventory", "validate", str(write(tmp_path, inventory(tmp_path, key=str(key))))], capsys)
    assert code in (0, None), err  # the private key itself


def test_strict_needs_each_host_in_known_hosts_as_paramiko_looks_it_up(tmp_path, capsys):
    doc = inventory(tmp_path, port=2222)
    known = tmp_path / "known_hosts"
    lines = known.read_text().splitlines()
    assert lines[0].startswith("[127.0.0.1]:2222 ")
    # worker filed under its bare address: that is port 22's entry, not port 2222's
    known.write_text("\n".join([lines[0], lines[1].replace("[127.0.0.2]:2222", "127.0.0.2")]) + "\n")
    path = write(tmp_path, doc)
    code, _, err = run(["inventory", "validate", str(path)], capsys)
    err = " ".join(err.split())
    assert code == 2 and "cannot be used from this machine (2 problems)" in err
    assert f"hosts.worker.ssh.address: worker (127.0.0.2): known_hosts {known} has no line for [127.0.0.2]:2222" in err
    assert f"ssh-keyscan -p 2222 127.0.0.2 >> {known}" in err and "host_key_policy: accept-new" in err
    assert "hosts.offload.ssh.address: offload (127.0.0.3)" in err and "hosts.head." not in err
    # hashed, as `ssh-keygen -H` (HashKnownHosts yes) writes them: found all the same
    known.write_text("\n".join(lines) + "\n")
    subprocess.run(["ssh-keygen", "-q", "-H", "-f", str(known)], check=True, capture_output=True)
    assert "127.0.0" not in known.read_text()
    code, _, err = run(["inventory", "validate", str(path)], capsys)
    assert code in (0, None), err
    # no known_hosts at all: each host is named, with its own command
    known.unlink()
    code, _, err = run(["inventory", "validate", str(path)], capsys)
    err = " ".join(err.split())
    assert code == 2 and err.count(f"known_hosts {known} does not exist") == 3
    assert f"ssh-keyscan -p 2222 127.0.0.3 >> {known}" in err
    # accept-new records a host's key on first contact: nothing to have beforehand
    code, _, err = run(["inventory", "validate", str(write(tmp_path, {**doc, "ssh_defaults": {**doc["ssh_defaults"],
                       "host_key_policy": "accept-new"}}))], capsys)  # fmt: skip
    assert code in (0, None), err


def test_a_known_hosts_paramiko_cannot_read_is_named_not_a_traceback(tmp_path, capsys):
    path = write(tmp_path, inventory(tmp_path))
    with (tmp_path / "known_hosts").open("a") as f:
        f.write("spark-c ssh-ed25519 AAAA!!!not-base64\n")  # a line paramiko refuses to read
    code, _, err = run(["inventory", "validate", str(path)], capsys)
    err = " ".join(err.split())
    assert code == 2 and f"known_hosts {tmp_path}/known_hosts cannot be read (this line is not a host key: spark-c" in err


def test_a_jump_host_must_be_known_too(tmp_path, capsys):
    doc = inventory(tmp_path)
    doc["hosts"]["worker"]["ssh"]["proxy_jump"] = "root@127.0.0.9:2200"
    code, _, err = run(["inventory", "validate", str(write(tmp_path, doc))], capsys)
    err = " ".join(err.split())
    assert code == 2 and "hosts.worker.ssh.proxy_jump: worker's jump host 127.0.0.9: known_hosts" in err
    assert "has no line for [127.0.0.9]:2200" in err and "hosts.worker.ssh.address" not in err


def test_keys_and_known_hosts_from_ssh_config_and_the_agent_are_valid(tmp_path, capsys):
    """What ssh itself accepts passes: ssh_config's IdentityFile (a missing one skipped, as ssh does),
    no key file at all (the agent's keys), ssh_config's UserKnownHostsFile."""
    doc = inventory(tmp_path, key=None, known_hosts=None)
    kh = tmp_path / "known_hosts"
    (tmp_path / "ssh_config").write_text(f"Host 127.0.0.*\n  IdentityFile {tmp_path}/not-here\n  UserKnownHostsFile {kh}\n")
    doc["ssh_defaults"]["config_file"] = "ssh_config"
    path = write(tmp_path, doc)
    code, _, err = run(["inventory", "validate", str(path)], capsys)
    assert code in (0, None), err
    (tmp_path / "ssh_config").write_text(f"Host 127.0.0.*\n  UserKnownHostsFile {tmp_path}/other_known_hosts\n")
    code, _, err = run(["inventory", "validate", str(path)], capsys)
    assert code == 2 and f"known_hosts {tmp_path}/other_known_hosts does not exist" in " ".join(err.split())


def test_file_only_and_render_do_not_need_this_machines_files(tmp_path, capsys):
    doc = inventory(tmp_path, key=str(tmp_path / "nope"), known_hosts=str(tmp_path / "nope_known_hosts"))
    path = write(tmp_path, doc)
    code, out, _ = run(["inventory", "validate", str(path), "--file-only"], capsys)
    assert code in (0, None) and out.startswith("ok ")
    code, out, err = run(["render", "-i", str(path)], capsys)
    assert code in (0, None) and "vllm serve" in out, err  # reaches no host: renders on any machine


def test_a_fleet_file_given_as_an_inventory_says_so(tmp_path, capsys):
    fleet = {"fleet": {"name": "f"}, "members": [{"inventory": "a.yaml"}], "front_door": {"member": "a"}}
    path = write(tmp_path, fleet, "fleet.yaml")
    for argv in (["inventory", "validate", str(path)], ["render", "-i", str(path)], ["doctor", "-i", str(path), "--json"]):
        code, out, err = run(argv, capsys)
        text = " ".join((out + err).split())
        assert code == 2 and f"{path} is a fleet file" in text, text
        assert f"this is a fleet file: use `sparkctl fleet ... -f {path}`" in text
