"""A real SSH server on loopback for unit tests that need hosts without the lab: paramiko's server
side, one host key, one authorized client key, and every exec request run by `sh -c` on this
machine (as sshd runs it through the user's shell). It counts the commands each connection ran,
so a test sees how many round trips a host cost."""

from __future__ import annotations

import socket
import subprocess
import threading
from pathlib import Path

import paramiko
import yaml

REPO = Path(__file__).resolve().parents[2]


class _Server(paramiko.ServerInterface):
    def __init__(self, sshd: "LoopbackSSHD"):
        self.sshd = sshd

    def get_allowed_auths(self, username):
        return "publickey"

    def check_auth_publickey(self, username, key):
        ok = username == "root" and key.asbytes() == self.sshd.client_key.asbytes()
        return paramiko.AUTH_SUCCESSFUL if ok else paramiko.AUTH_FAILED

    def check_channel_request(self, kind, chanid):
        return paramiko.OPEN_SUCCEEDED if kind == "session" else paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

    def check_channel_exec_request(self, channel, command):
        self.sshd.commands.append(command.decode())

        def run():
            p = subprocess.run(["sh", "-c", command.decode()], capture_output=True, timeout=60)
            try:
                channel.sendall(p.stdout)
                channel.sendall_stderr(p.stderr)
                channel.send_exit_status(p.returncode)
                channel.close()
            except (OSError, EOFError):  # the client went away first (paramiko raises EOFError on a closed transport)
                pass

        # after paramiko's reply to the request (an answer sent before it reaches the client as "Channel closed.")
        threading.Timer(0.05, run).start()
        return True


class LoopbackSSHD:
    """`with LoopbackSSHD(tmp_path) as sshd:` an SSH server on 127.0.0.1:sshd.port."""

    ADDRESSES = ("127.0.0.1", "127.0.0.2", "127.0.0.3")  # one per lab host: an inventory's hosts need their own

    def __init__(self, directory: Path, port: int = 0, same_keys_as: "LoopbackSSHD | None" = None):
        directory.mkdir(parents=True, exist_ok=True)
        if same_keys_as is not None:  # the same host, back on another port
            import shutil

            for f in same_keys_as.host_key_file, same_keys_as.client_key_file:
                shutil.copy(f, directory / f.name)
        self.host_key_file = _key(directory, "host_key")
        self.host_key = paramiko.Ed25519Key.from_private_key_file(str(self.host_key_file))
        self.client_key_file = _key(directory, "id_ed25519")
        self.client_key = paramiko.Ed25519Key.from_private_key_file(str(self.client_key_file))
        self.known_hosts = directory / "known_hosts"
        self.commands: list[str] = []
        self.listeners = [socket.create_server((a, port)) for a in self.ADDRESSES]
        self.ports = [s.getsockname()[1] for s in self.listeners]
        self.known_hosts.write_text("".join(f"[{a}]:{p} {self.host_key.get_name()} {self.host_key.get_base64()}\n"
                                            for a, p in zip(self.ADDRESSES, self.ports)))  # fmt: skip
        self._transports: list[paramiko.Transport] = []
        for listener in self.listeners:
            threading.Thread(target=self._serve, args=(listener,), daemon=True).start()

    def _serve(self, listener: socket.socket) -> None:
        while True:
            try:
                sock, _ = listener.accept()
            except OSError:
                return
            t = paramiko.Transport(sock)
            t.add_server_key(self.host_key)
            try:
                t.start_server(server=_Server(self))
            except (paramiko.SSHException, EOFError, OSError):
                # a client that hung up during the handshake (the tests that refuse its key or change
                # the host key): an sshd goes on accepting the next one
                t.close()
                continue
            self._transports.append(t)

    def __enter__(self) -> "LoopbackSSHD":
        return self

    def __exit__(self, *exc) -> None:
        for listener in self.listeners:
            listener.close()
        for t in self._transports:
            t.close()

    def inventory(self, directory: Path, ports: dict[str, int] | None = None, hosts: dict[str, dict] | None = None,
                  **defaults):  # fmt: skip
        """The lab inventory with its hosts' SSH at this server (head 127.0.0.1, worker .2, offload
        .3; a host's port from `ports` when given, e.g. a closed one), strict host keys, and
        `defaults` over ssh_defaults, `hosts` over a host's ssh section."""
        from sparkctl.inventory.loader import load_inventory

        data = yaml.safe_load((REPO / "inventories" / "lab.yaml").read_text())
        data["ssh_defaults"] = {"user": "root", "key": str(self.client_key_file), "known_hosts": str(self.known_hosts),
                                "host_key_policy": "strict", "config_file": "none", "agent": False,
                                "connect_timeout": 2, **defaults}  # fmt: skip
        for (name, host), address, port in zip(data["hosts"].items(), self.ADDRESSES, self.ports):
            host["ssh"] = {"address": address, "port": (ports or {}).get(name, port), **(hosts or {}).get(name, {})}
            if name in (ports or {}):  # this host's key is known there too
                with self.known_hosts.open("a") as f:
                    f.write(f"[{address}]:{ports[name]} {self.host_key.get_name()} {self.host_key.get_base64()}\n")
        path = directory / "inventory.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return load_inventory(path)


def _key(directory: Path, name: str) -> Path:
    path = directory / name
    if not path.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path


def closed_port(address: str = "127.0.0.1") -> int:
    """A loopback port nothing listens on, and no other test process is handed (harness.free_port)."""
    from sparkctl_lab.sim.harness import free_port

    return free_port(address)
