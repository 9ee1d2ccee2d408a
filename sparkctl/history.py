"""A cluster's records as its head keeps them (the state files under /var/lib/sparkctl/state):
its events, its last good config, the configs a rollback can go back to and an interrupted reload.
`sparkctl history` (cli/reload.py) and `sparkctl fleet history` (fleet/history.py) read them here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from sparkctl.records import Event, HistoryRecord, JournalRecord, dump


@dataclass(frozen=True)
class RollbackTarget:
    """A replaced record `rollback --to n` goes back to (1: the newest)."""

    n: int
    file: str
    config_hash: str
    applied_at: str


@dataclass(frozen=True)
class History:
    events: list[Event]  # oldest first
    last_good: Optional[str]  # the applied record's config hash, None: none recorded
    rollback_targets: list[RollbackTarget]  # oldest first, numbered as `rollback --to` counts them
    unreadable: list[str]  # replaced records that cannot be read (history/ file names): never a target
    interrupted: Optional[JournalRecord]  # a reload that did not end

    def to_dict(self) -> dict[str, Any]:
        """What `sparkctl history --json` prints."""
        return {
            "events": [dump(e) for e in self.events],
            "last_good": self.last_good,
            "rollback_targets": [t.__dict__ for t in self.rollback_targets],
            "unreadable_records": self.unreadable,
            "interrupted": dump(self.interrupted) if self.interrupted is not None else None,
        }


def read_history(inv, last: int = 20) -> History:
    """The head's events (newest `last`; 0: all it keeps), last good config, rollback targets and
    interrupted reload, in one read of the head (its error is raised as it came)."""
    from sparkctl.session import ClusterSession

    head = inv.hosts_with_role("head")[0]
    with ClusterSession(inv, [head]) as cluster:
        f = cluster.read(head, {"events", "journal", "history", "applied"})
    return History(
        events=f.events[-last:] if last else f.events,
        last_good=f.applied.config_hash if f.applied is not None else None,
        rollback_targets=rollback_targets(f.history),
        unreadable=[h.file for h in f.history if h.unreadable],
        interrupted=f.journal,
    )


def usable(history: list[HistoryRecord]) -> list[HistoryRecord]:
    """The replaced records a rollback can go back to, oldest first: `--to n` is the n-th newest."""
    return [h for h in history if not h.unreadable]


def rollback_targets(history: list[HistoryRecord]) -> list[RollbackTarget]:
    records = usable(history)
    return [RollbackTarget(len(records) - i, h.file, h.config_hash, h.applied_at) for i, h in enumerate(records)]
