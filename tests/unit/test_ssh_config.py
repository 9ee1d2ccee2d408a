"""Hosts are reached the way the operator's own `ssh` reaches them: settings the inventory leaves
unset come from an OpenSSH client config file (written here; no host needed), the inventory's own
settings win, and every jump host's address is fenced and its key verified like the host's."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
from contextlib import suppress
from pathlib import Path

import paramiko
import pytest
import yaml

from sparkctl.errors import InputError, UnreachableError
from sparkctl.inventory.loader import load_inventory
from sparkctl.transport.ssh import Fleet, HostSession

REPO = Path(__file__).resolve().parents[2]
LAB = yaml.safe_load((REPO / "inventories" / "lab.yaml").read_text())


def inventory(tmp_path: Path, config: str | None, defaults: dict | None = None, **host_ssh):
    """The lab inventory with ssh_defaults replaced by `defaults` and worker's ssh by `host_ssh`,
    reading `config` (written next to it) as its ssh_config."""
    data = yaml.safe_load(yaml.safe_dump(LAB))
    data["ssh_defaults"] = {"host_key_policy": "strict", **(defaults or {})}
    if config is not None:
        (tmp_path / "ssh_config").write_text(config)
        data["ssh_defaults"].setdefault("config_file", "ssh_config")  # relative: next to the inventory
    data["hosts"]["worker"]["ssh"] = {"address": "10.231.0.12", **host_ssh}
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_inventory(path)


@pytest.fixture
def keys(tmp_path):
    for name in ("id_lab", "id_bastion"):
        (tmp_path / name).write_text("not read when resolving\n")
    return tmp_path


CONFIG = """
Host bastion
  HostName 10.231.0.11
  User jumper
  Port 2201
  IdentityFile {dir}/id_bastion
Host spark-b
  HostName 10.231.0.12
  User admin
  Port 2222
  ProxyJump bastion
Host *
  IdentityFile {dir}/id_lab
  IdentityFile {dir}/id_absent
  UserKnownHostsFile {dir}/known_hosts_from_config
  StrictHostKeyChecking no
"""


def test_ssh_config_fills_what_the_inventory_leaves_unset(tmp_path, keys):
    inv = inventory(tmp_path, CONFIG.format(dir=keys), address="spark-b")
    t = inv.ssh_target("worker")
    assert (t.address, t.user, t.port) == ("10.231.0.12", "admin", 2222)  # HostName, User, Port
    assert t.identity_files == (keys / "id_lab",)  # a missing IdentityFile is skipped, as ssh does
    assert t.known_hosts == keys / "known_hosts_from_config"
    assert t.host_key_policy == "strict"  # StrictHostKeyChecking no in the file changes nothing
    [hop] = t.jumps
    assert (hop.label, hop.address, hop.user, hop.port) == ("bastion", "10.231.0.11", "jumper", 2201)
    # its own IdentityFile lines, in the file's order (Host bastion's, then Host *'s), as ssh offers them
    assert hop.identity_files == (keys / "id_bastion", keys / "id_lab")


def test_the_inventory_wins_over_ssh_config(tmp_path, keys):
    key = keys / "id_inventory"
    key.write_text("x\n")
    inv = inventory(
        tmp_path, CONFIG.format(dir=keys), defaults={"user": "root"},
        address="spark-b", port=22, key=str(key), known_hosts=str(keys / "kh"), proxy_jump="none",
    )  # fmt: skip
    t = inv.ssh_target("worker")
    assert (t.user, t.port, t.key, t.known_hosts) == ("root", 22, key, keys / "kh")
    assert t.identity_files == (key,)
    assert t.address == "10.231.0.12"  # still the alias's HostName: address is what Host matches
    assert t.jumps == ()  # proxy_jump: none connects directly whatever the file says


def test_inventory_proxy_jump_names_hosts_the_file_describes(tmp_path, keys):
    inv = inventory(tmp_path, CONFIG.format(dir=keys), proxy_jump="ops@bastion:2300,10.231.0.13")
    t = inv.ssh_target("worker")
    assert [(h.label, h.address, h.user, h.port) for h in t.jumps] == [
        ("bastion", "10.231.0.11", "ops", 2300),  # user and port of the spec beat the file's
        ("10.231.0.13", "10.231.0.13", "root", 22),  # not in the file: the host's own user
    ]


def test_a_jump_hosts_own_proxy_jump_is_followed_and_a_loop_refused(tmp_path, keys):
    chained = CONFIG.format(dir=keys) + "\nHost outer\n  HostName 10.231.0.13\n"
    chained = chained.replace("Host bastion\n", "Host bastion\n  ProxyJump outer\n")
    t = inventory(tmp_path, chained, address="spark-b").ssh_target("worker")
    assert [h.label for h in t.jumps] == ["outer", "bastion"]

    looped = CONFIG.format(dir=keys).replace("Host bastion\n", "Host bastion\n  ProxyJump bastion\n")
    with pytest.raises(InputError) as err:
        inventory(tmp_path, looped, address="spark-b").ssh_target("worker")
    assert "loop" in err.value.message and "bastion" in err.value.message


def test_include_lines_are_followed(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".ssh" / "conf.d").mkdir(parents=True)
    (tmp_path / ".ssh" / "conf.d" / "spark.conf").write_text("Host spark-b\n  HostName 10.231.0.12\n  User admin\n")
    # relative to ~/.ssh, as ssh reads it; the first value found wins, so the included one
    config = "Include conf.d/*.conf\nHost * !10.231.0.11\n  User nobody\n  ProxyJump 10.231.0.11\n"
    t = inventory(tmp_path, config, address="spark-b").ssh_target("worker")
    assert (t.address, t.user, [h.address for h in t.jumps]) == ("10.231.0.12", "admin", ["10.231.0.11"])


def test_proxy_command_is_refused_not_ignored(tmp_path, keys):
    config = "Host spark-b\n  HostName 10.231.0.12\n  ProxyCommand nc -X 5 -x proxy:1080 %h %p\n"
    with pytest.raises(InputError) as err:
        inventory(tmp_path, config, address="spark-b").ssh_target("worker")
    assert "ProxyCommand" in err.value.message and "ProxyJump" in err.value.fix


def test_config_file_default_none_and_missing(tmp_path, monkeypatch):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text("Host 10.231.0.12\n  User fromhome\n  Port 2022\n")
    monkeypatch.setenv("HOME", str(home))
    t = inventory(tmp_path, None).ssh_target("worker")
    assert (t.user, t.port, t.config_file) == ("fromhome", 2022, home / ".ssh" / "config")

    t = inventory(tmp_path, None, config_file="none").ssh_target("worker")
    assert (t.user, t.port, t.config_file) == ("root", 22, None)  # sparkctl's defaults
    assert t.known_hosts == home / ".ssh" / "known_hosts"

    with pytest.raises(InputError) as err:
        inventory(tmp_path, None, config_file="no/such/config").ssh_target("worker")
    assert "does not exist" in err.value.message and "config_file" in err.value.fix


@pytest.mark.parametrize(
    ("line", "inventory_agent", "agent", "socket_path"),
    [
        ("", None, True, None),  # $SSH_AUTH_SOCK, also with a key set
        ("IdentityAgent none", None, False, None),
        ("IdentityAgent none", True, True, None),  # the inventory wins
        ("IdentityAgent ~/agent.sock", None, True, "~/agent.sock"),
        ("IdentityAgent SSH_AUTH_SOCK", False, False, None),
    ],
)
def test_agent_settings(tmp_path, monkeypatch, line, inventory_agent, agent, socket_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    extra = {} if inventory_agent is None else {"agent": inventory_agent}
    t = inventory(tmp_path, f"Host *\n  {line}\n", **extra).ssh_target("worker")
    assert t.agent is agent
    assert t.identity_agent == (str(Path(socket_path).expanduser()) if socket_path else None)


def test_a_jump_host_named_only_in_ssh_config_is_fenced(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARKCTL_ONLY_NETWORKS", "127.0.0.0/8,10.231.0.0/16")
    opened = []

    def refuse(self, addr):  # record, and never let a packet leave even if the fence broke
        opened.append(addr)
        raise ConnectionRefusedError("test: no real connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    config = "Host bastion\n  HostName 192.0.2.10\nHost 10.231.0.12\n  ProxyJump bastion\n"
    with Fleet(inventory(tmp_path, config), hosts=["worker"]) as fleet:
        out = fleet.map(lambda s: s.run("true"))
    assert "refusing to contact 192.0.2.10" in out["worker"].error
    assert "jump host bastion" in out["worker"].error
    assert opened == []


# -- the agent next to a key, against a real SSH server on loopback and a real ssh-agent --------


class _Server(paramiko.ServerInterface):
    def __init__(self, allowed: paramiko.PKey):
        self.allowed = allowed

    def get_allowed_auths(self, username):
        return "publickey"

    def check_auth_publickey(self, username, key):
        return paramiko.AUTH_SUCCESSFUL if key.asbytes() == self.allowed.asbytes() else paramiko.AUTH_FAILED

    def check_channel_request(self, kind, chanid):
        return paramiko.OPEN_SUCCEEDED

    def check_channel_exec_request(self, channel, command):
        def answer():  # after paramiko has sent the reply to exec (a close before it fails exec_command)
            threading.Event().wait(0.2)
            with suppress(OSError, EOFError):  # the client may close the connection first (CI: EOFError)
                channel.sendall(b"answered\n")
                channel.send_exit_status(0)
                channel.close()

        threading.Thread(target=answer, daemon=True).start()
        return True


@pytest.fixture
def agent_host(tmp_path):
    """A passphrase-protected key on disk, its unlocked copy in a real ssh-agent (at a socket
    named only by IdentityAgent), and a server that accepts only that key."""
    key = tmp_path / "id_locked"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    host_key_file = tmp_path / "host_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_key_file)], check=True)
    sock_path = tmp_path / "agent.sock"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock_path)], stdout=subprocess.DEVNULL)
    try:
        for _ in range(100):
            if sock_path.exists():
                break
            threading.Event().wait(0.05)
        env = {**os.environ, "SSH_AUTH_SOCK": str(sock_path)}
        subprocess.run(["ssh-add", "-q", str(key)], check=True, env=env, stderr=subprocess.DEVNULL)
        allowed = paramiko.PKey.from_path(key)
        # then lock the file on disk: the agent holds the only unlocked copy
        subprocess.run(["ssh-keygen", "-q", "-p", "-P", "", "-N", "test-passphrase", "-f", str(key)],
                       check=True, stdout=subprocess.DEVNULL)  # fmt: skip
        host_key = paramiko.PKey.from_path(host_key_file)
        listener = socket.create_server(("127.0.0.1", 0))
        port = listener.getsockname()[1]
        transports = []  # held: a server Transport nobody references is collected, and its channels close

        def serve():
            while True:
                try:
                    conn, _ = listener.accept()
                except OSError:
                    return
                t = paramiko.Transport(conn)
                t.add_server_key(host_key)
                # a client that gave up (or reset the connection: CI run K's busy machine)
                with suppress(EOFError, OSError, paramiko.SSHException):
                    t.start_server(server=_Server(allowed))
                transports.append(t)

        threading.Thread(target=serve, daemon=True).start()
        (tmp_path / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_key.get_name()} {host_key.get_base64()}\n")
        yield key, sock_path, port
        listener.close()
        for t in transports:
            t.close()
    finally:
        agent.terminate()
        agent.wait(5)


def _agent_inventory(tmp_path, key, sock_path, port, **extra):
    data = yaml.safe_load(yaml.safe_dump(LAB))
    (tmp_path / "ssh_config").write_text(f"Host *\n  IdentityAgent {sock_path}\n")
    data["ssh_defaults"] = {"config_file": "ssh_config", "known_hosts": "known_hosts", "connect_timeout": 5}
    data["hosts"]["worker"]["ssh"] = {"address": "127.0.0.1", "port": port, "key": str(key), **extra}
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_inventory(path)


def test_a_locked_key_signs_through_the_agent_unless_the_inventory_says_no(tmp_path, agent_host, monkeypatch):
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)  # the agent is reachable only through IdentityAgent
    key, sock_path, port = agent_host
    session = HostSession(_agent_inventory(tmp_path, key, sock_path, port).ssh_target("worker"))
    try:
        assert session.run("true").stdout == "answered\n"
    finally:
        session.close()

    session = HostSession(_agent_inventory(tmp_path, key, sock_path, port, agent=False).ssh_target("worker"))
    with pytest.raises(UnreachableError) as err:
        session.connect()
    assert "authentication failed" in err.value.message
    assert f"ssh-add {key}" in err.value.fix  # the locked key, named: sparkctl never asks for a passphrase
    assert "test-passphrase" not in err.value.message + err.value.fix
