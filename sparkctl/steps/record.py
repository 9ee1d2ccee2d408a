"""Record step: what was applied, kept on the head, so a later reload can roll back to it.

`/var/lib/sparkctl/state/applied.json` holds the inventory (secrets redacted), the rendered
launch, the config hash, image IDs and time. It is replaced atomically (temp file + rename) and
the previous record moves to `history/`, newest last, at most HISTORY_KEEP kept.
"""

from __future__ import annotations

import json
import shlex
import time

from sparkctl import __version__
from sparkctl.facts.host import APPLIED, STATE_DIR
from sparkctl.inventory.models import Inventory
from sparkctl.steps.base import Change, Plan, RunContext, Step
from sparkctl.transport.redact import redact_obj

HISTORY_KEEP = 20


def record_document(ctx: RunContext) -> dict:
    launch = ctx.launch
    return redact_obj(
        {
            "cluster": ctx.inventory.cluster.name,
            "config_hash": launch.config_hash,
            "images": ctx.outputs.image_ids,
            "applied_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "sparkctl_version": __version__,
            "inventory": ctx.inventory.model_dump(mode="json"),
            "launch": launch.model_dump(mode="json"),
        },
        digests=True,  # a secret is stored as its digest: a change stays visible, the value never is
    )


class RecordStep(Step):
    name = "record"
    description = "applied config, hash and image IDs recorded on the head, with history"

    facts = frozenset({"applied"})

    def hosts(self, inv: Inventory) -> list[str]:
        return inv.hosts_with_role("head")

    def plan_host(self, ctx: RunContext, host: str) -> Plan:
        config_hash = ctx.launch.config_hash
        current = ctx.facts[host].applied
        images = ctx.outputs.image_ids or None
        if current and current.get("config_hash") == config_hash and (images is None or current.get("images") == images):
            return self.noop(host, f"{APPLIED} already records config {config_hash} ({current.get('applied_at')})")
        what = "first record" if current is None else f"replaces config {current.get('config_hash')}"
        previous = None
        if current:  # history file named after the record it keeps: <applied_at>-<config hash>.json
            previous = f"{str(current.get('applied_at', 'unknown')).replace(':', '')}-{current.get('config_hash', 'unknown')}.json"
        return self.changes(
            host, [Change("record", f"record config {config_hash} in {APPLIED} ({what})", {"previous": previous})]
        )

    def apply(self, ctx: RunContext, plan: Plan) -> str:
        session = ctx.fleet[plan.host]
        doc = record_document(ctx)
        previous = plan.changes[0].data.get("previous") or f"{doc['applied_at'].replace(':', '')}-unreadable.json"
        session.run(
            f"mkdir -p {STATE_DIR}/history && chmod 700 {STATE_DIR} && "
            f"if [ -f {APPLIED} ]; then mv {APPLIED} {shlex.quote(STATE_DIR + '/history/' + previous)}; fi && "
            f"ls -1t {STATE_DIR}/history | tail -n +{HISTORY_KEEP + 1} | sed 's|^|{STATE_DIR}/history/|' | xargs -r rm -f"
        ).check("state history")
        session.put_bytes((json.dumps(doc, indent=2) + "\n").encode(), APPLIED, mode=0o600)
        return f"recorded config {doc['config_hash']} in {APPLIED}"
