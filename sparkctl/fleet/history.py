"""`sparkctl fleet history`: every member's events (what `sparkctl history` reads from its head),
read at once and merged in time order, each naming its member."""

from __future__ import annotations


def merge_events(per_member: dict[str, list[dict]], last: int = 20) -> list[dict]:
    """The members' events oldest first, each with its `member`; the newest `last` (0: all).
    Times are the heads' UTC ISO seconds: a tie keeps the fleet's member order, then each head's own."""
    tagged = [
        (e.get("at") or "", i, j, {"member": name, **e})
        for i, (name, events) in enumerate(per_member.items())
        for j, e in enumerate(events)
    ]
    merged = [e for *_, e in sorted(tagged, key=lambda t: t[:3])]
    return merged[-last:] if last else merged


def fleet_history(fleet, last: int = 20) -> dict:
    from sparkctl.fleet.each import each_member
    from sparkctl.history import read_history

    outcomes = each_member(fleet.members, lambda m: read_history(m.inventory, last).to_dict())
    members = {}
    for name, o in outcomes.items():
        doc = o.value or {}
        members[name] = {
            "last_good": doc.get("last_good"),
            "interrupted": doc.get("interrupted"),
            "error": o.error.to_dict() if o.error is not None else None,
        }
    events = merge_events({n: (o.value or {}).get("events", []) for n, o in outcomes.items()}, last)
    return {
        "fleet": fleet.name,
        "events": events,
        "members": members,
        "failed_members": [n for n, o in outcomes.items() if not o.ok],
    }
