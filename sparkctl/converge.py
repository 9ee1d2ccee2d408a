"""Converge one cluster: a playbook's steps over its open SSH sessions, as `sparkctl up` runs them
(the cluster lock, the runner, the gateway's hold released when the run failed). `sparkctl up`
(cli/up.py) and `sparkctl fleet up` (fleet/up.py, one member per thread) both run it."""

from __future__ import annotations


def converge(inv, fleet, playbook: str, check: bool, *, live, force: bool = False, wait: float = 0, **options):
    """The playbook's steps on one cluster over its open SSH `fleet`, as `sparkctl up` runs them:
    the cluster lock (a changing run holds it, --check takes none), the runner, and the gateway's
    hold released when the run failed. `live` takes the runner's progress and results (a LiveReport,
    or `sparkctl fleet up`'s per-member lines). Returns (recap, ctx)."""
    from sparkctl.lock import cluster_lock
    from sparkctl.runner import build_stages, load_playbook, run_playbook
    from sparkctl.steps.base import RunContext

    stages = build_stages(load_playbook(playbook))
    # the lock is taken by the runner before the first change: a run with nothing to change
    # only reads it (in the facts round trip) and never writes it
    with cluster_lock(fleet, wait=wait, hold=not check) as lock:
        ctx = RunContext(
            inventory=inv, fleet=fleet, check_mode=check, force=force, options=options, progress=live.progress, lock=lock
        )
        recap = run_playbook(ctx, stages, playbook, on_result=live.result)
        if recap.failed and not check:  # no engine serves at the end of this run: a hold it sent goes
            from sparkctl.runtime.gateway_admin import release_after_failure

            released = release_after_failure(ctx)
            if released:
                live.note(f"gateway: {released}")
    return recap, ctx
