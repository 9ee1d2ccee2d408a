"""The cluster lock on the lab: two `up --force` at once (one refused with the holder named, or
waiting for it), a holder killed with SIGKILL reported as gone and cleared by `unlock --yes`,
read-only commands never blocked. The cluster ends converged every time."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from typing import Iterator

import pytest

pytestmark = pytest.mark.lab

ENV = {**os.environ, "SPARKCTL_ONLY_NETWORKS": "127.0.0.0/8,10.231.0.0/16"}
LOCK = "/var/lib/sparkctl/state/lock"


def start(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "sparkctl", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV
    )


def run(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    p = subprocess.run([sys.executable, "-m", "sparkctl", *args], capture_output=True, text=True, env=ENV, timeout=timeout)
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    return p


def lock_holder(lab) -> dict | None:
    r = lab.host_exec("head", ["cat", LOCK])
    return json.loads(r.stdout) if r.returncode == 0 and r.stdout.strip() else None


def wait_for_lock(lab, pid: int, proc: subprocess.Popen) -> dict:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        holder = lock_holder(lab)
        if holder and holder["pid"] == pid:
            return holder
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    pytest.fail("the first run never took the lock")


@pytest.fixture(autouse=True)
def no_stale_lock(lab):
    """Start unlocked: a run killed earlier (by another test) may have left its lock behind."""
    if lock_holder(lab) is not None:
        p = run("unlock", "-i", lab.INVENTORY_PATH, "--yes")
        print(f"\n[cleared a lock left behind] {p.stdout.strip()}")
    yield


def converged(lab) -> dict:
    p = run("up", "-i", lab.INVENTORY_PATH, "--json")
    doc = json.loads(p.stdout)
    assert p.returncode == 0 and doc["changed"] == 0 and doc["failed"] == 0, p.stdout[-3000:]
    return doc


@contextmanager
def paused(proc: subprocess.Popen) -> Iterator[None]:
    """The lock's holder stopped (SIGSTOP) while the block runs: alive and holding the lock, its
    heartbeat inside STALE_AFTER, for as long as the test needs. (A lab `up --force` can end within
    the seconds two other CLI runs take: ci51 found the lock released before the test looked.)"""
    proc.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        proc.send_signal(signal.SIGCONT)


def test_second_up_is_refused_with_the_holder_named(lab):
    first = start("up", "-i", lab.INVENTORY_PATH, "--force", "--json")
    try:
        holder = wait_for_lock(lab, first.pid, first)
        assert holder["command"].startswith("sparkctl up -i") and "--force" in holder["command"]
        with paused(first):
            second = run("up", "-i", lab.INVENTORY_PATH, "--force", "--json")
            assert second.returncode == 1
            err = json.loads(second.stdout)
            assert err["exit_code"] == 1
            assert (
                f"cluster lab is locked by {holder['user']}@{holder['host']} (pid {first.pid}) running `sparkctl up -i"
                in err["error"]
            )
            assert "--force --json` since " in err["error"] and " ago)" in err["error"]
            assert "--wait" in err["fix"]
            # read-only commands never take the lock, even while it is held
            assert run("up", "-i", lab.INVENTORY_PATH, "--check", "--json").returncode in (0, 1)
            assert lock_holder(lab)["pid"] == first.pid
    finally:
        out, err = first.communicate(timeout=900)
    assert first.returncode == 0, (out[-3000:], err[-3000:])
    assert lock_holder(lab) is None  # released
    converged(lab)


def test_second_up_with_wait_runs_after_the_first(lab):
    first = start("up", "-i", lab.INVENTORY_PATH, "--force", "--json")
    try:
        wait_for_lock(lab, first.pid, first)
        with paused(first):  # until the second says it waits (else the first may be done before it looks)
            second = start("up", "-i", lab.INVENTORY_PATH, "--force", "--json", "--wait", "900")
            waiting = []
            for line in iter(second.stderr.readline, ""):  # (to its end, if it never waits: asserted below)
                waiting.append(line)
                if "waiting up to" in line:
                    break
        out2, rest = second.communicate(timeout=1200)
        err2 = "".join(waiting) + rest
    finally:
        out1, err1 = first.communicate(timeout=900)
    assert first.returncode == 0, (out1[-3000:], err1[-3000:])
    assert second.returncode == 0, (out2[-3000:], err2[-3000:])
    assert "waiting up to 900 s for the cluster lock: held by" in err2 and f"(pid {first.pid})" in err2
    # the second really ran after the first: it restarted the runtime the first had started
    assert json.loads(out2)["changed"] > 0
    assert lock_holder(lab) is None
    converged(lab)


def test_terminated_holder_releases_the_lock(lab):
    first = start("up", "-i", lab.INVENTORY_PATH, "--force", "--json")
    wait_for_lock(lab, first.pid, first)
    first.send_signal(signal.SIGTERM)  # as `kill PID`, or a closed terminal (SIGHUP)
    first.communicate(timeout=120)
    assert first.returncode == 130
    assert lock_holder(lab) is None
    p = run("up", "-i", lab.INVENTORY_PATH, "--json")
    assert p.returncode == 0, p.stdout[-3000:]
    converged(lab)


def test_killed_holder_is_reported_and_unlock_clears_it(lab):
    first = start("up", "-i", lab.INVENTORY_PATH, "--force", "--json")
    wait_for_lock(lab, first.pid, first)
    first.send_signal(signal.SIGKILL)
    first.communicate()
    try:
        refused = run("up", "-i", lab.INVENTORY_PATH, "--json")
        assert refused.returncode == 1
        err = json.loads(refused.stdout)
        assert f"(pid {first.pid})" in err["error"]
        assert f"that run looks gone: pid {first.pid} no longer runs on" in err["error"]
        assert "sparkctl unlock" in err["fix"]
        # down is refused the same way: it changes the cluster too
        assert run("down", "-i", lab.INVENTORY_PATH, "--json").returncode == 1
        # without --yes (and no terminal to ask on) nothing is broken
        assert run("unlock", "-i", lab.INVENTORY_PATH).returncode == 2
        assert lock_holder(lab) is not None
        p = run("unlock", "-i", lab.INVENTORY_PATH, "--yes", "--json")
        assert p.returncode == 0, p.stdout + p.stderr
        doc = json.loads(p.stdout)
        assert doc["removed"] is True and doc["holder"]["pid"] == first.pid
        assert doc["holder"]["gone"] == f"pid {first.pid} no longer runs on {doc['holder']['host']}"
        assert lock_holder(lab) is None
    finally:
        if lock_holder(lab) is not None:
            lab.host_exec("head", ["rm", "-f", LOCK])
    # the interrupted run is repaired by the next one
    p = run("up", "-i", lab.INVENTORY_PATH, "--json")
    assert p.returncode == 0, p.stdout[-3000:]
    converged(lab)


JOURNAL = "/var/lib/sparkctl/state/journal.json"


def test_terminated_reload_releases_the_lock_and_leaves_the_journal(lab, tmp_path):
    """The same lock path as `up`: SIGTERM ends a reload like Ctrl-C, its lock released, and its
    journal left on the head so the next command names the interrupted reload (then rollback)."""
    import yaml

    doc = yaml.safe_load(open(lab.INVENTORY_PATH))
    doc["runtime"]["served_model_name"] = "lab-terminated"
    new = tmp_path / "renamed.yaml"
    new.write_text(yaml.safe_dump(doc))
    first = start("reload", "-i", lab.INVENTORY_PATH, "--config", str(new), "--yes", "--json")
    try:
        wait_for_lock(lab, first.pid, first)
        deadline = time.monotonic() + 60  # the journal is written once the lock is held: then it runs
        while lab.host_exec("head", ["test", "-e", JOURNAL]).returncode != 0 and time.monotonic() < deadline:
            assert first.poll() is None, first.communicate()
            time.sleep(0.05)
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=120)
        assert first.returncode == 130
        assert lock_holder(lab) is None
        journal = json.loads(lab.host_exec("head", ["cat", JOURNAL], check=True).stdout)
        assert journal["kind"] == "reload" and journal["phase"] in ("validate", "prestage", "drain", "restart", "verify")
        refused = run("reload", "-i", lab.INVENTORY_PATH, "--config", str(new), "--yes")
        assert refused.returncode == 1 and "interrupted reload" in refused.stderr, refused.stderr[-2000:]
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
        if lock_holder(lab) is not None:
            run("unlock", "-i", lab.INVENTORY_PATH, "--yes")
        if lab.host_exec("head", ["test", "-e", JOURNAL]).returncode == 0:
            back = run("rollback", "-i", lab.INVENTORY_PATH, "--yes", "--json")
            assert back.returncode == 0, back.stdout[-3000:] + back.stderr[-2000:]
    assert lab.host_exec("head", ["test", "-e", JOURNAL]).returncode != 0
    converged(lab)
