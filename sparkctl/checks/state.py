"""state (the head's record of changing runs): the cluster lock and how the last reload ended.

Both answer on-call's "why is nothing changing?": a lock left by a run that is gone refuses every
`up`, `down` and `reload`; a reload that rolled back leaves the old config serving, so the change
someone made did not happen, although everything looks healthy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sparkctl.checks.base import Context, fail, head_host, host_check, ok, skipped, warn
from sparkctl.reload_outcome import NOT_APPLIED, Outcome

if TYPE_CHECKING:
    from sparkctl.facts.host import HostFacts

READS = frozenset({"lock", "journal", "events"})

UNLOCK_FIX = (
    "no sparkctl run is changing this cluster: break the lock with `sparkctl unlock --yes`, then "
    "`sparkctl doctor` (the gone run may have stopped half-way)"
)


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


@host_check("state.lock", "the cluster lock is free or held by a live run (not left by a run that is gone)", scope=head_host)
def lock(ctx: Context, host: str, f: HostFacts):
    if "lock" not in f.sections:
        return skipped("the lock was not read")
    if "lock" in f.errors:
        return warn(f.errors["lock"], "if no sparkctl run is changing this cluster, `sparkctl unlock --yes` removes it")
    holder = f.lock
    if holder is None:
        return ok("the cluster lock is free")
    data: dict[str, Any] = {"holder": holder.to_dict()}
    beat = f"heartbeat {_duration(holder.heartbeat_age)} ago" if holder.heartbeat_age is not None else "no heartbeat read"
    why = holder.gone()
    if why is None:
        return ok(f"held by a live run: {holder.describe()}, {beat}", **data)
    if f.journal is not None and f.journal.lock_token == holder.token:  # an interrupted reload: finishing it takes its lock over
        fix = (
            "an interrupted reload holds it: `sparkctl rollback --yes` (back to the last good config) or "
            "`sparkctl reload --resume --config NEW` take the lock over"
        )
    else:
        fix = UNLOCK_FIX
    return fail(
        f"the cluster lock is held by {holder.describe()}, and that run is gone: {why}; every up, down and "
        "reload is refused until it is broken",
        fix,
        **data,
    )


@host_check("state.last_reload", "the last reload, restart or rollback applied its config (did not roll back)", scope=head_host)
def last_reload(ctx: Context, host: str, f: HostFacts):
    if "events" not in f.sections:
        return skipped("the events were not read")
    if not f.events:
        return ok("no applied config or reload recorded yet")
    last = f.events[-1]  # newest last; a later successful up/reload/restart/rollback settles a failed one
    command, outcome = last.command or "?", last.outcome or "?"
    when = f"{last.at or '?'} by {last.by or '?'}"
    if outcome not in NOT_APPLIED:
        return ok(f"last change: {command} {outcome} ({when}), config {last.config_hash}")
    what = f"the last {command} ({when}) to config {last.config_hash} {outcome}"
    reason = last.reason or "no reason recorded"
    serving = last.from_config
    if outcome == Outcome.ROLLED_BACK:
        now = f"the last good config {serving} serves again" if serving else "the last good config serves again"
    elif outcome in (Outcome.FAILED, Outcome.NOTHING_STOPPED):
        now = f"nothing was stopped: config {serving} still serves" if serving else "nothing was stopped"
    elif outcome == Outcome.RESTART_FAILED:
        now = "nothing serves until the cause is fixed and the cluster restarted (`sparkctl restart`)"
    else:
        now = "and the rollback failed too: see `sparkctl history` for what runs on each host"
    fix = (
        "read why (`sparkctl history`, `sparkctl doctor`), fix the cause on the hosts and `sparkctl restart --yes`"
        if outcome == Outcome.RESTART_FAILED
        else "read why (`sparkctl history`), correct the new config and `sparkctl reload --config NEW`; or keep the "
        "last good config and settle on it: `sparkctl rollback --yes` (restarts nothing that already runs it)"
    )
    return warn(
        f"{what}: {reason}; {now}" + ("" if outcome == Outcome.RESTART_FAILED else ", the change did not happen"),
        fix,
        command=command,
        outcome=outcome,
        config_hash=last.config_hash,
        from_config=serving,
        reason=reason,
    )
