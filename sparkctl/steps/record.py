"""Record step: what was applied, kept on the head, so a later reload can roll back to it.

`/var/lib/sparkctl/state/applied.json` holds the inventory (secrets redacted), the rendered
launch, the config hash, image IDs and time. It is replaced atomically (temp file + rename) and
the previous record moves to `history/`, newest last, at most HISTORY_KEEP kept.
"""

from __future__ import annotations

from sparkctl import __version__, state
from sparkctl.inventory.models import Inventory
from sparkctl.records import AppliedRecord, Event, dump
from sparkctl.runtime.compile_cache import compile_key
from sparkctl.steps.base import Change, Plan, RunContext, Step
from sparkctl.transport.redact import redact_obj, state_digests


def record_document(ctx: RunContext) -> AppliedRecord:
    launch = ctx.launch
    head = ctx.facts.get(ctx.inventory.hosts_with_role("head")[0])
    previous = head.applied if head is not None else None
    start = ctx.outputs.runtime_start
    if start is None and previous and previous.config_hash == launch.config_hash:
        start = previous.runtime_start  # nothing restarted: how the running runtime started
    decode = ctx.outputs.decode_tokens_per_s or (previous.decode_tokens_per_s if previous else None)
    record = AppliedRecord(
        cluster=ctx.inventory.cluster.name,
        config_hash=launch.config_hash,
        group_hashes=launch.group_hashes,
        images=ctx.outputs.image_ids,
        applied_at=state.now(),
        applied_by=state.who(),
        command=ctx.options.event,
        runtime_start=start,
        decode_tokens_per_s=decode,  # the baseline `reload --min-throughput-ratio` compares with
        # the same under load, by concurrency: the last measured at each
        decode_by_streams={**(previous.decode_by_streams if previous else {}), **ctx.outputs.decode_by_streams},
        sparkctl_version=__version__,
        inventory=ctx.inventory.model_dump(mode="json"),
        launch=launch.model_dump(mode="json"),
    )
    # a secret is stored as its digest: a change stays visible, the value never is
    return AppliedRecord.model_validate(redact_obj(dump(record), digests=state_digests(ctx.inventory.cluster.name)))


def event_of(record: AppliedRecord, outcome: str, **extra) -> Event:
    """The events.jsonl line for an applied record."""
    return state.event(
        record.command,
        outcome,
        record.config_hash,
        record.runtime_start,
        compile_key(record.inventory),
        at=record.applied_at,
        by=record.applied_by,
        **extra,
    )


class RecordStep(Step):
    name = "record"
    facts = frozenset({"applied"})

    def hosts(self, inv: Inventory) -> list[str]:
        return inv.hosts_with_role("head")

    def plan_host(self, ctx: RunContext, host: str) -> Plan:
        config_hash = ctx.launch.config_hash
        current = ctx.facts[host].applied
        images = ctx.outputs.image_ids or None
        restarted = ctx.outputs.restart is not None and bool(ctx.outputs.restart.groups or ctx.force)
        # a field outside the launch (alerts, gates) changes no hash but is still what was applied:
        # unrecorded, the next reload would diff against the old value again
        inventory = redact_obj(ctx.inventory.model_dump(mode="json"), digests=state_digests(ctx.inventory.cluster.name))
        same_inventory = current is not None and current.inventory == inventory
        if (
            current
            and current.config_hash == config_hash
            and same_inventory
            and (images is None or current.images == images)
            and not restarted
        ):
            return self.noop(host, f"{state.APPLIED} already records config {config_hash} ({current.applied_at})")
        what = "first record" if current is None else f"replaces config {current.config_hash}"
        if current and current.config_hash == config_hash and not same_inventory:
            what += ", inventory fields outside the launch changed"
        # the replaced record is kept for `rollback --to N` only when it is another config
        other = current is not None and (current.config_hash != config_hash or not same_inventory)
        previous = state.history_name(current) if current is not None and other else None
        return self.changes(
            host, [Change("record", f"record config {config_hash} in {state.APPLIED} ({what})", {"previous": previous})]
        )

    def apply(self, ctx: RunContext, plan: Plan) -> str:
        session = ctx.session(plan.host)
        record = record_document(ctx)
        session.run(state.archive_command(plan.changes[0].data.get("previous"))).check("state history")
        state.write_json(session, state.APPLIED, dump(record))
        if ctx.options.event == "up":  # reload/restart/rollback log their own event at the end
            state.append_event(session, event_of(record, "applied"))
        return f"recorded config {record.config_hash} in {state.APPLIED}"
