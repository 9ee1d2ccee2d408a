"""The cluster lock's holder record: parsed from what the head prints, judged alive or gone, and
named in the refusal a second run prints."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time

from sparkctl.lock import STALE_AFTER, Holder, LockHeld, _process_start, parse_holder, refusal


def _record(**over) -> dict:
    doc = {
        "user": "oncall",
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "command": "sparkctl up --force",
        "started_at": time.time() - 95,
        "token": "4c1d",
        "pid_start": _process_start(os.getpid()),
    }
    doc.update(over)
    return doc


def _head_output(doc: dict, heartbeat_age: int) -> str:
    # what `cat lock; stat -c %Y lock; date +%s` prints on the head
    now = 1796089000
    return f"{json.dumps(doc)}\n{now - heartbeat_age}\n{now}\n"


def test_holder_parsed_from_the_heads_output():
    h = parse_holder(_head_output(_record(), heartbeat_age=3))
    assert h.user == "oncall" and h.command == "sparkctl up --force" and h.heartbeat_age == 3
    assert parse_holder("") is None and parse_holder("garbage\n1\n2\n") is None


def test_live_holder_is_refused_by_name_command_and_age():
    h = parse_holder(_head_output(_record(), heartbeat_age=3))
    assert h.gone() is None
    err = refusal(h, "lab")
    assert isinstance(err, LockHeld) and err.exit_code == 1
    assert f"oncall@{socket.gethostname()} (pid {os.getpid()}) running `sparkctl up --force`" in err.message
    assert "(95 s ago)" in err.message or "(96 s ago)" in err.message
    assert "--wait" in err.fix


def test_killed_holder_on_this_machine_is_gone():
    p = subprocess.Popen(["sleep", "30"])
    start = _process_start(p.pid)
    p.kill()
    p.wait()
    h = parse_holder(_head_output(_record(pid=p.pid, pid_start=start), heartbeat_age=1))
    assert h.gone() == f"pid {p.pid} no longer runs on {socket.gethostname()}"
    err = refusal(h, "lab")
    assert "looks gone" in err.message and "sparkctl unlock" in err.fix


def test_reused_pid_is_not_the_holder():
    h = parse_holder(_head_output(_record(pid_start=1), heartbeat_age=1))  # our pid, another start time
    assert "is now another process" in h.gone()


def test_holder_on_another_machine_is_judged_by_its_heartbeat():
    fresh = parse_holder(_head_output(_record(host="laptop-of-someone-else", pid=1), heartbeat_age=4))
    assert fresh.gone() is None
    stale = parse_holder(_head_output(_record(host="laptop-of-someone-else", pid=1), heartbeat_age=int(STALE_AFTER) + 5))
    assert "no heartbeat for" in stale.gone()


def test_record_never_shows_the_token():
    h = Holder(**{**_record(), "heartbeat_age": 1.0})
    assert "token" not in h.to_dict() and "4c1d" not in json.dumps(h.to_dict())


def _acquire_here(tmp_path, doc: str) -> subprocess.CompletedProcess:
    """The head's acquire script, run by bash here with the state folder moved into tmp_path."""
    from sparkctl.lock import LOCK_PATH, _acquire_script
    from sparkctl.state import STATE_DIR

    script = _acquire_script(doc).replace(LOCK_PATH, str(tmp_path / "lock")).replace(STATE_DIR, str(tmp_path))
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=10)


def test_acquire_script_takes_a_free_lock_and_reads_a_held_one(tmp_path):
    mine = json.dumps(_record())
    assert _acquire_here(tmp_path, mine).stdout == "ACQUIRED\n"
    r = _acquire_here(tmp_path, json.dumps(_record(pid=1)))
    first, _, rest = r.stdout.partition("\n")
    assert r.returncode == 0 and first == "HELD" and parse_holder(rest).pid == os.getpid()


def test_a_lock_gone_between_the_link_and_the_read_is_no_failure(tmp_path):
    # the holder released it after our `ln` failed and before our `cat`: what the head then says
    # is HELD and nothing to read. A dangling link is that moment, held still (ln fails, cat fails).
    (tmp_path / "lock").symlink_to(tmp_path / "released")
    r = _acquire_here(tmp_path, json.dumps(_record()))
    assert (r.returncode, r.stdout) == (0, "HELD\n"), r.stderr  # try_acquire looks again
