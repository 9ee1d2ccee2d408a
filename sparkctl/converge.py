"""Converge one cluster: a playbook's steps over its open SSH sessions, as `sparkctl up` runs them
(the cluster lock, the runner, the gateway's hold released when the run failed). `sparkctl up`
(cli/up.py) and `sparkctl fleet up` (fleet/up.py, one member per thread) both run it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from sparkctl.inventory.models import Inventory
    from sparkctl.runner import Recap
    from sparkctl.steps.base import RunContext, RunOptions
    from sparkctl.transport.ssh import Fleet


def converge(
    inv: Inventory,
    fleet: Fleet,
    playbook: str,
    check: bool,
    *,
    live: Any,
    force: bool = False,
    wait: float = 0,
    options: Optional[RunOptions] = None,
) -> tuple[Recap, RunContext]:
    """The playbook's steps on one cluster over its open SSH `fleet`, as `sparkctl up` runs them:
    the cluster lock (a changing run holds it, --check takes none), the runner, and the gateway's
    hold released when the run failed. `live` takes the runner's progress and results (a LiveReport,
    or `sparkctl fleet up`'s per-member lines). Returns (recap, ctx)."""
    from sparkctl.lock import cluster_lock
    from sparkctl.runner import build_stages, compensate, load_playbook, run_playbook
    from sparkctl.steps.base import RunContext, RunOptions

    stages = build_stages(load_playbook(playbook))
    # the lock is taken by the runner before the first change: a run with nothing to change
    # only reads it (in the facts round trip) and never writes it
    with cluster_lock(fleet, wait=wait, hold=not check) as lock:
        ctx = RunContext(
            inventory=inv,
            fleet=fleet,
            check_mode=check,
            force=force,
            options=options or RunOptions(),
            progress=live.progress,
            lock=lock,
        )
        recap = run_playbook(ctx, stages, playbook, on_result=live.result)
        if recap.failed and not check:  # no run comes after this one: the steps undo what they left
            for note in compensate(ctx, stages):
                live.note(note)
    return recap, ctx
