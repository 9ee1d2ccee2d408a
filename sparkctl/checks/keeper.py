"""keeper (the supervisor on the head, docs/keeper.md): is it installed and running, and has it
given up on a crash loop? On-call's "why does the front door answer 503 and nobody restarts it?"."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparkctl.checks.base import Context, fail, head_host, host_check, ok, skipped, warn

if TYPE_CHECKING:
    from sparkctl.facts.host import HostFacts

READS = frozenset({"keeper", "keeper_unit"})


@host_check("keeper.state", "the keeper runs on the head and has not given up on a crash loop", scope=head_host, runbook=True)
def keeper_state(ctx: Context, host: str, f: HostFacts):
    from sparkctl.keeper.unit import UNIT

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
    doc = f.keeper or {}
    if doc.get("state") == "gave_up":
        return fail(
            f"the keeper gave up at {doc.get('since', '?')}: {doc.get('reason', 'no reason recorded')}; the front door "
            "answers 503 naming it until the cluster serves again",
            "find the cause (`sparkctl history` shows each recovery's cause and log lines; `sparkctl doctor --only "
            "runtime`), fix it, then `sparkctl restart`: the keeper watches again once the cluster serves",
            **{k: doc.get(k) for k in ("reason", "cause", "since")},
        )
    n = doc.get("recoveries_in_window", 0)
    seen = f", {n} recover{'y' if n == 1 else 'ies'} in the last {doc.get('window_s', 0):g} s" if n else ""
    return ok(f"{UNIT} active: watching{seen}")
