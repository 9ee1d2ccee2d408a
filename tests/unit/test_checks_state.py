"""state.lock and state.last_reload on the head's state files, as the fact layer reads them.

tests/unit/recorded/state/: the lock file as `ClusterLock` writes it for a `sparkctl up` run, with the
lock's mtime and the head's clock after it (what the `lock` fact reads), and the lab head's
events.jsonl after the reload-rolled-back drill. The healthy recording predates both facts.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

from test_checks import H, by, edit, run, sections

REC = Path(__file__).parent / "recorded" / "state"
LOCK = (REC / "lock_killed_up.txt").read_text()  # cat lock; stat -c %Y lock; date +%s
EVENTS = (REC / "events_rolled_back.jsonl").read_text()  # tail of events.jsonl after the rolled-back reload


def lock_text(heartbeat_age: int, host: str | None = None, pid: int | None = None) -> str:
    """The recorded lock with its heartbeat `heartbeat_age` s old (and another holder host/pid)."""
    record, mtime, now = LOCK.strip().splitlines()
    doc = json.loads(record)
    if host is not None:
        doc["host"] = host
    if pid is not None:
        doc["pid"] = pid
    return f"{json.dumps(doc)}\n{int(now) - heartbeat_age}\n{now}\n"


def state(lock: str | None = None, events: str | None = None, journal: str = ""):
    secs = sections()
    edit(secs, H, "lock", lock or "")
    edit(secs, H, "journal", journal)
    edit(secs, H, "events", events if events is not None else "")
    return run(secs, only=["state"])


def test_free_lock_and_no_events_are_ok():
    results = state()
    assert by(results, "state.lock", H).status == "ok" and "free" in by(results, "state.lock", H).message
    assert by(results, "state.last_reload", H).status == "ok"


def test_lock_of_a_killed_run_fails_naming_holder_age_and_unlock():
    killed = lock_text(4, host=socket.gethostname())  # a run of this control host whose pid is gone
    r = by(state(killed), "state.lock", H)
    doc = json.loads(killed.splitlines()[0])
    assert r.status == "failed"
    assert f"pid {doc['pid']}" in r.message and "sparkctl up" in r.message and "ago" in r.message
    assert "sparkctl unlock" in r.fix
    assert r.runbook == "docs/runbooks/state.lock.md"


def test_lock_without_heartbeat_fails_even_from_another_control_host():
    r = by(state(lock_text(600, host="other-control-host")), "state.lock", H)
    assert r.status == "failed" and "no heartbeat for 10 min" in r.message


def test_lock_of_a_live_run_is_ok_with_the_holder_named():
    import os

    live = lock_text(2, host=socket.gethostname(), pid=os.getpid())
    doc = json.loads(live.splitlines()[0])
    doc["pid_start"] = None  # this test process, whatever its start time
    live = json.dumps(doc) + "\n" + "\n".join(live.splitlines()[1:]) + "\n"
    r = by(state(live), "state.lock", H)
    assert r.status == "ok" and "held by a live run" in r.message


def test_interrupted_reload_lock_points_at_rollback_not_unlock():
    token = json.loads(LOCK.splitlines()[0])["token"]
    r = by(state(lock_text(600), journal=json.dumps({"kind": "reload", "lock_token": token})), "state.lock", H)
    assert r.status == "failed" and "sparkctl rollback" in r.fix and "unlock" not in r.fix


def test_unreadable_lock_warns():
    r = by(state("garbage\n"), "state.lock", H)
    assert r.status == "warn" and "unreadable" in r.message


def test_rolled_back_reload_warns_with_config_and_reason():
    last = json.loads(EVENTS.strip().splitlines()[-1])
    r = by(state(events=EVENTS), "state.last_reload", H)
    assert r.status == "warn"
    assert last["config_hash"] in r.message and "rolled back" in r.message and last["reason"][:40] in r.message
    assert "sparkctl rollback" in r.fix and r.runbook == "docs/runbooks/state.last_reload.md"


def test_a_failed_restart_says_nothing_serves_and_points_at_restart_not_rollback():
    # a restart is not rolled back (its config is the last good one): made up from the recorded event
    last = {**json.loads(EVENTS.strip().splitlines()[-1]), "command": "restart", "outcome": "restart failed"}
    r = by(state(events=EVENTS + json.dumps(last) + "\n"), "state.last_reload", H)
    assert r.status == "warn" and "restart failed" in r.message and "nothing serves" in r.message
    assert "sparkctl restart" in r.fix and "rollback" not in r.fix


def test_a_later_successful_change_settles_it():
    later = {**json.loads(EVENTS.strip().splitlines()[-1]), "command": "rollback", "outcome": "ok", "reason": None}
    r = by(state(events=EVENTS + json.dumps(later) + "\n"), "state.last_reload", H)
    assert r.status == "ok" and "rollback ok" in r.message


def test_not_gathered_is_skipped_not_ok():
    results = run(sections(), only=["state"])  # the healthy recording predates the lock fact
    assert by(results, "state.lock", H).status == "skipped"
