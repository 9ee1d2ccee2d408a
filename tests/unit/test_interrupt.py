"""Ctrl-C while hosts do not answer (issue 40, item 5): the run stops at once, says "interrupted"
(with --json, as the one error document on stdout), exits 130, and leaves no process holding a
connection to a host.

Every host of the lab's inventory is a loopback port that accepts and never speaks SSH (a frozen
sshd): a connection waits its whole connect timeout (20 s here) for the banner. The run is the
real CLI, Ctrl-C'd once it is connecting to a host, as a person at a terminal does."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from controlfiles import usable_here

REPO = Path(__file__).resolve().parents[2]
CONNECT_TIMEOUT = 20  # what a run not stopped by Ctrl-C would wait for each host
# from Ctrl-C to its exit: well under the connect timeout (a run that waits for its hosts takes all
# 20 s), with room for a loaded CI machine (a run beside the whole suite once took over 3 s)
STOPPED_WITHIN = CONNECT_TIMEOUT / 2


class SilentHosts:
    """The lab's inventory with every host at a loopback port that accepts and never answers."""

    def __init__(self, folder: Path):
        doc = yaml.safe_load((REPO / "inventories" / "lab.yaml").read_text())
        doc["ssh_defaults"]["connect_timeout"] = CONNECT_TIMEOUT
        self.listeners: list[socket.socket] = []
        self.held: list[socket.socket] = []  # accepted and kept open: the client keeps waiting
        for n, host in enumerate(doc["hosts"].values(), start=1):
            listener = socket.create_server((f"127.0.0.{n}", 0))
            listener.setblocking(False)
            self.listeners.append(listener)
            host["ssh"].update(address=f"127.0.0.{n}", port=listener.getsockname()[1])
        self.path = folder / "inventory.yaml"
        self.path.write_text(yaml.safe_dump(usable_here(doc, folder)))

    def accept(self, wait: float) -> int:
        """Accept what is there (waiting up to `wait` s for the first); how many were accepted."""
        n = 0
        for s in select.select(self.listeners, [], [], wait)[0]:
            while True:
                try:
                    conn, _ = s.accept()
                except BlockingIOError:
                    break
                self.held.append(conn)
                n += 1
        return n

    def all_closed(self, within: float) -> bool:
        """Every accepted connection was closed by the client (its process is gone, nothing kept it)."""
        end = time.monotonic() + within
        for conn in self.held:
            conn.setblocking(True)
            while True:
                conn.settimeout(max(0.01, end - time.monotonic()))
                try:
                    if not conn.recv(1 << 16):  # the client's banner first, then end of stream
                        break
                except (TimeoutError, socket.timeout):
                    return False
                except ConnectionResetError:
                    break
        return True

    def close(self) -> None:
        for s in self.held + self.listeners:
            s.close()


@pytest.fixture
def hosts(tmp_path):
    h = SilentHosts(tmp_path)
    yield h
    h.close()


def interrupted_run(
    hosts: SilentHosts, *args: str, sig: signal.Signals = signal.SIGINT
) -> tuple[subprocess.CompletedProcess, float]:
    """`sparkctl ARGS -i INVENTORY`, Ctrl-C'd (`sig`: SIGINT) once it is connecting to a host and half a
    second has gone by (its imports done, its threads started); (the run, seconds from Ctrl-C to exit)."""
    env = {**os.environ, "SPARKCTL_ONLY_NETWORKS": "127.0.0.0/8", "PYTHONFAULTHANDLER": "1"}
    env.pop("SPARKCTL_INVENTORY", None)
    started = time.monotonic()
    p = subprocess.Popen([sys.executable, "-m", "sparkctl", *args, "-i", str(hosts.path)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip
    try:
        end = started + 60
        while not hosts.accept(0.2):  # connecting: every host will keep it waiting
            assert p.poll() is None and time.monotonic() < end, p.communicate()
        time.sleep(max(0.0, started + 0.5 - time.monotonic()))
        hosts.accept(0)
        assert p.poll() is None, p.communicate()
        p.send_signal(sig)
        sent = time.monotonic()
        try:
            out, err = p.communicate(timeout=CONNECT_TIMEOUT * 3)
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGABRT)  # faulthandler: every thread's stack, to say where it hung
            raise AssertionError(
                f"still running {CONNECT_TIMEOUT * 3} s after {sig.name}:\n{p.communicate()[1][-6000:]}"
            ) from None
        took = time.monotonic() - sent
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    return subprocess.CompletedProcess(p.args, p.returncode, out, err), took


COMMANDS = [["doctor"], ["status"], ["up", "--check"]]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_ctrl_c_stops_at_once_and_says_so(hosts, command):
    r, took = interrupted_run(hosts, *command)
    assert r.returncode == 130, (r.stdout, r.stderr)
    assert took < STOPPED_WITHIN, f"{took:.1f} s from Ctrl-C to exit (connect timeout {CONNECT_TIMEOUT} s)"
    assert "interrupted" in r.stderr and "Traceback" not in r.stderr and "Exception ignored" not in r.stderr, r.stderr
    assert r.stdout == ""  # no answer: the command did not finish
    assert hosts.all_closed(within=2), "a connection to a host outlived the run"


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_ctrl_c_under_json_is_one_error_document(hosts, command):
    r, took = interrupted_run(hosts, *command, "--json")
    assert r.returncode == 130, (r.stdout, r.stderr)
    assert took < STOPPED_WITHIN, f"{took:.1f} s from Ctrl-C to exit (connect timeout {CONNECT_TIMEOUT} s)"
    doc = json.loads(r.stdout)  # exactly one document: json.loads refuses anything after it
    assert doc == {"error": "interrupted", "fix": None, "exit_code": 130}  # the shape of every error's document
    assert "Traceback" not in r.stderr and "Exception ignored" not in r.stderr, r.stderr
    assert hosts.all_closed(within=2), "a connection to a host outlived the run"


def test_sigterm_ends_a_run_at_once_and_no_connection_outlives_it(hosts):
    """SIGTERM (systemd stopping a unit, `kill`) while `up` connects to its hosts. Once `up` holds the
    cluster lock's handlers (lock.cluster_lock, around the whole run) it ends as Ctrl-C does: exit 130,
    "interrupted", its `finally` run (a lock it held released); a signal that comes before them (the
    hosts are contacted while it starts) ends it as any process. Either way at once, with no traceback
    and no connection left open."""
    r, took = interrupted_run(hosts, "up", sig=signal.SIGTERM)
    if r.returncode == 130:
        assert "interrupted (signal 15)" in r.stderr, r.stderr
    else:
        assert r.returncode == -signal.SIGTERM, (r.returncode, r.stdout, r.stderr)
    assert took < STOPPED_WITHIN, f"{took:.1f} s from SIGTERM to exit (connect timeout {CONNECT_TIMEOUT} s)"
    assert "Traceback" not in r.stderr and r.stdout == "", r.stderr
    assert hosts.all_closed(within=2), "a connection to a host outlived the run"
