"""keeper (the supervisor on the head, docs/keeper.md): is it installed and running, and has it
given up on a crash loop? On-call's "why does the front door answer 503 and nobody restarts it?"."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparkctl.checks.base import Context, fail, head_host, host_check, ok, skipped, warn
from sparkctl.records import KeeperRecord, dump
from sparkctl.state import KEEPER

if TYPE_CHECKING:
    from sparkctl.facts.host import HostFacts

READS = frozenset({"keeper", "keeper_unit"})


@host_check("keeper.state", "the keeper runs on the head and has not given up on a crash loop", scope=head_host, runbook=True)
def keeper_state(ctx: Context, host: str, f: HostFacts):
    from sparkctl.launch.keeper import UNIT

    unit = f.keeper_unit
    if unit is None:
        return skipped(f"the keeper's unit was not read: {f.errors.get('keeper_unit', 'no answer')}")
    if not ctx.inventory.keeper.enabled:
        if unit.installed:
            return warn(f"keeper.enabled is false, but {UNIT} is still installed on {host}", "`sparkctl up` removes it")
        return ok("off (keeper.enabled: false): a crashed engine stays down until someone runs `sparkctl restart`")
    if not unit.installed:
        return warn(
            f"{UNIT} is not installed on {host}: nothing brings the cluster back after a crash or a reboot",
            "`sparkctl up` installs it (`sparkctl up --check` shows the plan)",
        )
    if unit.active != "active":
        return fail(
            f"{UNIT} is installed but {unit.enabled}, {unit.active}: nothing brings the cluster back by itself",
            f"read its log on {host}: `journalctl -u {UNIT} -n 50`; `sparkctl up` restarts it",
        )
    if "keeper" in f.errors:  # its state file is not a record this sparkctl reads: whether it gave up is unknown
        return warn(
            f"{UNIT} active, but {f.errors['keeper']}: whether it gave up is not known",
            f"the keeper rewrites it when its state changes; if it stays unreadable, remove it on {host} (`sudo rm {KEEPER}`)",
        )
    doc = f.keeper or KeeperRecord()
    if doc.state == "gave_up":
        return fail(
            f"the keeper gave up at {doc.since or '?'}: {doc.reason or 'no reason recorded'}; the front door "
            "answers 503 naming it until the cluster serves again",
            "find the cause (`sparkctl history` shows each recovery's cause and log lines; `sparkctl doctor --only "
            "runtime`), fix it, then `sparkctl restart`: the keeper watches again once the cluster serves",
            reason=doc.reason,
            cause=dump(doc.cause) if doc.cause else None,
            since=doc.since,
        )
    n = doc.recoveries_in_window
    seen = f", {n} recover{'y' if n == 1 else 'ies'} in the last {doc.window_s:g} s" if n else ""
    return ok(f"{UNIT} active: watching{seen}")
