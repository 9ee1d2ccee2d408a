"""No remote call hangs: a worker whose management link is dropped, or whose sshd is frozen
(SIGSTOP), is named within seconds and the command exits 1.

Faults are injected by hand, as an operator would meet them: `ip link set enP7s7 down` inside the
worker's namespace, `kill -STOP` on the sshd processes of the worker's PID namespace; both are
undone in a finally. Times to detection are printed (run with -s), never asserted; the subprocess
timeout only turns a hang into a failure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.lab

ENV = {**os.environ, "SPARKCTL_ONLY_NETWORKS": "127.0.0.0/8,10.231.0.0/16"}
HANG = 180  # seconds: only a hang takes this long (the inventory's connect_timeout is a few seconds)
# the lab inventory's connect deadline, as sparkctl's messages print it
CONNECT = f"{yaml.safe_load((Path(__file__).resolve().parents[2] / 'inventories' / 'lab.yaml').read_text())['ssh_defaults']['connect_timeout']:g}"


def mgmt_device(host: str) -> str:
    from sparkctl_lab.topology import HOSTS

    return HOSTS[host].mgmt_device


@contextmanager
def link_down(lab, host: str):
    dev = mgmt_device(host)
    lab.host_exec(host, ["ip", "link", "set", dev, "down"], check=True)
    try:
        yield
    finally:
        lab.host_exec(host, ["ip", "link", "set", dev, "up"], check=True)
        _wait_ssh(lab, host)


@contextmanager
def sshd_stopped(lab, host: str):
    pids = lab.host_exec(host, ["pgrep", "-x", "sshd"], check=True).stdout.split()
    assert pids, f"no sshd in {host}"
    try:  # CONT in `finally` whatever happens: a worker left with its sshd stopped fails every later test
        # a per-connection sshd can end between pgrep and kill ("No such process"): the rest are stopped
        r = lab.host_exec(host, ["kill", "-STOP", *pids])
        assert r.returncode == 0 or "No such process" in r.stderr, r.stderr
        yield pids
    finally:
        lab.host_exec(host, ["kill", "-CONT", *pids])
        _wait_ssh(lab, host)


def _wait_ssh(lab, host: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if lab.ssh_banner(host):
            return
        time.sleep(0.5)


def sparkctl(*args: str) -> tuple[int, dict, float]:
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "sparkctl", *args, "--json"], capture_output=True, text=True, env=ENV, timeout=HANG)
    seconds = time.monotonic() - t0
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    return p.returncode, json.loads(p.stdout), seconds


def report(what: str, seconds: float) -> None:
    print(f"\n[time to detection] {what}: {seconds:.1f} s")


@pytest.mark.parametrize("fault", ["link-down", "sshd-stopped"])
def test_doctor_names_the_worker_and_exits_1(lab, fault):
    cm = link_down(lab, "worker") if fault == "link-down" else sshd_stopped(lab, "worker")
    with cm:
        code, doc, seconds = sparkctl("doctor", "-i", lab.INVENTORY_PATH)
    report(f"doctor, worker {fault}", seconds)
    assert code == 1
    failed = [r for r in doc["checks"] if r["status"] == "failed" and r["host"] == "worker"]
    assert failed, json.dumps(doc)[-2000:]
    text = " ".join(r["message"] for r in failed)
    assert "worker" in text and (f"no answer within {CONNECT} s" in text or "no route" in text), text
    assert "Error" not in text and "Exception" not in text, text  # no raw library error


@pytest.mark.parametrize("fault", ["link-down", "sshd-stopped"])
def test_status_names_the_worker_and_exits_1(lab, fault):
    cm = link_down(lab, "worker") if fault == "link-down" else sshd_stopped(lab, "worker")
    with cm:
        code, doc, seconds = sparkctl("status", "-i", lab.INVENTORY_PATH)
    report(f"status, worker {fault}", seconds)
    assert code == 1, json.dumps(doc)[-2000:]
    error = doc["hosts"]["worker"]["error"]
    assert error.startswith("worker: ") and (f"no answer within {CONNECT} s" in error or "no route" in error), error
    assert doc["hosts"]["head"]["error"] is None  # the others are still reported


@pytest.mark.parametrize("fault", ["link-down", "sshd-stopped"])
def test_open_connection_to_a_host_that_stops_answering(lab, fault):
    """A connection already open when the fault hits (as during `up`): the command in flight and
    every later call (commands, Docker) fail with the host named, within the connect timeout."""
    from sparkctl.inventory.loader import load_inventory
    from sparkctl.transport.ssh import Fleet

    os.environ["SPARKCTL_ONLY_NETWORKS"] = ENV["SPARKCTL_ONLY_NETWORKS"]
    inv = load_inventory(lab.INVENTORY_PATH)
    with Fleet(inv) as fleet:
        assert fleet["worker"].run("hostname").stdout.strip() == "worker"
        fleet["worker"].docker().ping()
        cm = link_down(lab, "worker") if fault == "link-down" else sshd_stopped(lab, "worker")
        with cm:
            t0 = time.monotonic()
            out = fleet.map(lambda s: s.run("sleep 2; hostname").stdout.strip())
            seconds = time.monotonic() - t0
            t1 = time.monotonic()
            later = fleet.map(lambda s: s.docker().containers.list(), hosts=["worker"])["worker"]
            later_seconds = time.monotonic() - t1
    report(f"command in flight, worker {fault}", seconds)
    report(f"next Docker call, worker {fault}", later_seconds)
    assert out["head"].value == "head" and out["offload"].value == "offload"
    assert not out["worker"].ok
    assert out["worker"].error.startswith(f"worker: no answer within {CONNECT} s (management link down or sshd frozen?)")
    assert "sleep 2; hostname" in out["worker"].error  # what was in progress
    assert out["worker"].fix
    assert not later.ok and later.error.startswith(f"worker: no answer within {CONNECT} s")


def test_new_connection_to_a_frozen_sshd(lab):
    from sparkctl.errors import HostError
    from sparkctl.inventory.loader import load_inventory
    from sparkctl.transport.ssh import HostSession

    os.environ["SPARKCTL_ONLY_NETWORKS"] = ENV["SPARKCTL_ONLY_NETWORKS"]
    inv = load_inventory(lab.INVENTORY_PATH)
    session = HostSession(inv.ssh_target("worker"))
    with sshd_stopped(lab, "worker"):
        t0 = time.monotonic()
        with pytest.raises(HostError) as exc:
            session.run("true")
        seconds = time.monotonic() - t0
    session.close()
    report("new connection, worker sshd stopped", seconds)
    assert "worker: cannot connect" in exc.value.message
    assert f"sshd accepted the connection, then no answer within {CONNECT} s (sshd frozen or overloaded?)" in exc.value.message
