"""The cluster's state on the head, under /var/lib/sparkctl/state (one place names the files).

- applied.json   the last good config: what `up`/`reload` applied and saw serving (inventory with
                 secrets as digests, launch, hashes, image IDs, how the start went). Replaced
                 atomically; the previous one moves to history/ (kept for `rollback --to N`).
- events.jsonl   one line per applied config, reload, rollback or restart: time, hash, who,
                 outcome, warm/cold, start seconds, downtime (`sparkctl history`).
- journal.json   a reload in progress, phase by phase; removed when it ends. Found by the next
                 command that touches the cluster if sparkctl died mid-way (`reload --resume`,
                 `rollback`).
- lock           the cluster lock (sparkctl/lock.py).
- keeper.json    the keeper's state on the head (sparkctl/keeper/loop.py): what it watches, its
                 recent recoveries, and why it gave up if it did (doctor and `status` read it).
Read through the fact layer (facts `applied`, `journal`, `events`, `history`); written here.
"""

from __future__ import annotations

import getpass
import json
import re
import shlex
import socket
import time
from typing import TYPE_CHECKING, Any, Optional

from sparkctl.records import Event, HistoryRecord, RuntimeStart, dump, loads_event

if TYPE_CHECKING:
    from sparkctl.records import AppliedRecord

STATE_DIR = "/var/lib/sparkctl/state"
APPLIED = f"{STATE_DIR}/applied.json"
HISTORY_DIR = f"{STATE_DIR}/history"
EVENTS = f"{STATE_DIR}/events.jsonl"
JOURNAL = f"{STATE_DIR}/journal.json"
LOCK = f"{STATE_DIR}/lock"  # the cluster lock (sparkctl/lock.py)
KEEPER = f"{STATE_DIR}/keeper.json"  # the keeper's state: watching, recovering, gave up (sparkctl/keeper/)
HISTORY_KEEP = 20
EVENTS_SHOWN = 200  # the newest events the `events` fact reads


def who() -> str:
    """user@control-host of this run (never a secret)."""
    try:
        user = getpass.getuser()
    except Exception:  # no passwd entry (containers)
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def event(
    command: str, outcome: str, config_hash: str, runtime_start: Optional[RuntimeStart], compile_key: str, **extra: Any
) -> Event:
    """One events.jsonl line: what `sparkctl history` shows (extra fields of records.Event; they may
    override at/by)."""
    start = runtime_start or RuntimeStart()
    return Event.model_validate(
        {
            "at": now(),
            "by": who(),
            "command": command,
            "outcome": outcome,
            "config_hash": config_hash,
            "cache": (start.cache or "").split(" ")[0] or None,
            "start_seconds": start.seconds,
            "compile_key": compile_key,
            **extra,
        }
    )


def write_json(session, path: str, doc: Any) -> None:
    """Atomically replace a state file (the state dir is root-only)."""
    session.run(f"mkdir -p {HISTORY_DIR} && chmod 700 {STATE_DIR}").check("state directory")
    session.put_bytes((json.dumps(doc, indent=2) + "\n").encode(), path, mode=0o600)


def append_event(session, event: Event) -> None:
    """One line in events.jsonl (redacted by the caller; a line is small, so one shell append)."""
    line = json.dumps(dump(event), separators=(",", ":"), sort_keys=True)
    session.run(f"mkdir -p {STATE_DIR} && chmod 700 {STATE_DIR} && printf '%s\\n' {shlex.quote(line)} >> {EVENTS}").check(
        "state events"
    )


def remove(session, path: str) -> None:
    session.run(f"rm -f {shlex.quote(path)}").check(f"remove {path}")


def history_name(record: AppliedRecord) -> str:
    """The history file a replaced record is kept under: <applied_at>-<config hash>.json."""
    return f"{record.applied_at.replace(':', '')}-{record.config_hash}.json"


def archive_command(previous: Optional[str]) -> str:
    """Shell: move applied.json into history/ (as `previous`), keep the newest HISTORY_KEEP."""
    keep = f"ls -1t {HISTORY_DIR} | tail -n +{HISTORY_KEEP + 1} | sed 's|^|{HISTORY_DIR}/|' | xargs -r rm -f"
    move = f"if [ -f {APPLIED} ]; then mv {APPLIED} {shlex.quote(HISTORY_DIR + '/' + previous)}; fi && " if previous else ""
    return f"mkdir -p {HISTORY_DIR} && chmod 700 {STATE_DIR} && {move}{keep}"


def parse_events(text: str) -> list[Event]:
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            e = loads_event(line)
            if e is not None:  # a torn last line (killed mid-append) is skipped, not fatal
                out.append(e)
    return out


def parse_history(text: str) -> list[HistoryRecord]:
    """`history` fact: '@@file NAME' then the file's JSON, oldest first (a file that is not a
    record is listed as unreadable: never a rollback target)."""
    parts = re.split(r"^@@file (.*)\n?", text, flags=re.M)  # [before, name, body, name, body, ...]
    out = []
    for name, body in zip(parts[1::2], parts[2::2]):
        try:
            out.append(HistoryRecord.model_validate({**json.loads(body), "file": name.strip()}))
        except (ValueError, TypeError):  # not JSON, not an object, not a record (ValidationError is a ValueError)
            out.append(HistoryRecord(file=name.strip(), unreadable=True))
    return out


HISTORY_PROBE = f'cd {HISTORY_DIR} 2>/dev/null && for f in $(ls -1tr); do echo "@@file $f"; cat "$f"; done; true'
