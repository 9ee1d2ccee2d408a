"""The head's state files as facts (sparkctl/state.py names them): the applied record, a reload's
journal, the events log, the replaced records, and the cluster lock's holder (sparkctl/lock.py)."""

from __future__ import annotations

from dataclasses import field
from typing import TYPE_CHECKING, Optional, TypeVar

from sparkctl import state
from sparkctl.facts.base import Reading, Target, fact, host_fields
from sparkctl.records import AppliedRecord, Event, HistoryRecord, JournalRecord, Record, RecordError, read_record

if TYPE_CHECKING:
    from sparkctl.facts.host import HostFacts
    from sparkctl.lock import Holder


R = TypeVar("R", bound=Record)


def _on_head(snippet: str):
    return lambda t: snippet if t.host.role == "head" else None


def read_state_file(f: HostFacts, r: Reading, model: type[R], path: str) -> Optional[R]:
    """The record a state file holds (records.py), None when it is absent; a record that cannot be
    read is the fact's error (what doctor and the commands show), not a traceback."""
    try:
        return read_record(model, r.out, path)
    except RecordError as exc:
        f.errors[r.key] = exc.message
        return None


@host_fields
class StateFields:
    """The HostFacts attributes this module's facts fill (a host where one was not read keeps the default)."""

    applied: Optional[AppliedRecord] = None  # the head's record of the last `sparkctl up` (whole applied.json)
    journal: Optional[JournalRecord] = None  # a reload in progress (or interrupted)
    events: list[Event] = field(default_factory=list)  # applied configs, reloads, rollbacks, oldest first
    history: list[HistoryRecord] = field(default_factory=list)  # replaced applied records, oldest first
    lock: Optional[Holder] = None  # the lock's holder, None when the lock is free


@fact("applied", _on_head(f"cat {state.APPLIED} 2>/dev/null || true"))
def _applied(f: HostFacts, r: Reading) -> None:  # the head's record of the last `sparkctl up` (whole applied.json)
    f.applied = read_state_file(f, r, AppliedRecord, state.APPLIED)


@fact("journal", _on_head(f"cat {state.JOURNAL} 2>/dev/null || true"))
def _journal(f: HostFacts, r: Reading) -> None:  # a reload in progress (or interrupted)
    f.journal = read_state_file(f, r, JournalRecord, state.JOURNAL)


@fact("events", _on_head(f"tail -n {state.EVENTS_SHOWN} {state.EVENTS} 2>/dev/null || true"))
def _events(f: HostFacts, r: Reading) -> None:  # applied configs, reloads, rollbacks, oldest first
    f.events = state.parse_events(r.out)


@fact("history", _on_head(state.HISTORY_PROBE))
def _history(f: HostFacts, r: Reading) -> None:  # replaced applied records, oldest first
    f.history = state.parse_history(r.out)


def _lock_probe(t: Target) -> Optional[str]:
    from sparkctl.lock import probe

    # the holder record, the lock's mtime and the head's clock (lock.parse_holder reads these three)
    return probe() if t.host.role == "head" else None


@fact("lock", _lock_probe)  # the holder (sparkctl.lock.Holder), None when the lock is free
def _lock(f: HostFacts, r: Reading) -> None:
    if not r.out.strip():
        return
    from sparkctl.lock import parse_holder
    from sparkctl.transport.redact import redact

    f.lock = parse_holder(r.out)
    if f.lock is None:
        f.errors[r.key] = f"unreadable lock file {state.LOCK}: {redact(r.out.strip())[:200]}"
