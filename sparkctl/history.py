"""A cluster's records as its head keeps them (the state files under /var/lib/sparkctl/state):
its events, its last good config, the configs a rollback can go back to and an interrupted reload.
`sparkctl history` (cli/reload.py) and `sparkctl fleet history` (fleet/history.py) read them here."""

from __future__ import annotations


def history_doc(inv, last: int = 20) -> dict:
    """What `sparkctl history --json` prints: the head's events (newest `last`; 0: all it keeps),
    last good config, rollback targets and interrupted reload, in one read of the head (its error
    is raised as it came)."""
    from sparkctl.session import ClusterSession

    head = inv.hosts_with_role("head")[0]
    with ClusterSession(inv, [head]) as cluster:
        f = cluster.read(head, {"events", "journal", "history", "applied"})
    records = [
        {"n": len(f.history) - i, "file": h.get("file"), "config_hash": h.get("config_hash"), "applied_at": h.get("applied_at")}
        for i, h in enumerate(f.history)
    ]
    return {
        "events": f.events[-last:] if last else f.events,
        "last_good": (f.applied or {}).get("config_hash"),
        "rollback_targets": records,
        "interrupted": f.journal,
    }
