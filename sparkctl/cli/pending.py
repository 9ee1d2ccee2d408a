"""Commands that later issues fill in. They say so plainly and exit 1; they never pretend."""

from __future__ import annotations

import typer

from sparkctl.cli.options import InventoryOpt, JsonOpt

# command name -> (help, the issue that builds it, None when no issue is filed yet)
PENDING = {
    "up": ("Converge the cluster to the inventory: fabric, images, caches, Engram, runtime.", 5),
    "status": ("What runs where, config hash, health, tok/s, acceptance, KV usage.", 5),
    "down": ("Drain and stop the runtime; images, caches and Engram tables stay.", 5),
    "render": ("Print every host's launch exactly as `up` would start it.", 5),
    "doctor": ("Run every named check on all hosts in parallel, with the fix for each failure.", 4),
    "bench": ("Measure tok/s, TTFT, speculative acceptance and mixed traffic on an endpoint.", 6),
}


def _make(name: str, issue: int):
    def command(inventory: InventoryOpt = None, json_out: JsonOpt = False) -> None:
        from sparkctl.errors import NotImplementedYet

        where = f"planned in issue #{issue}" if issue else "planned, no issue filed yet"
        raise NotImplementedYet(
            f"`sparkctl {name}` is not implemented yet ({where})",
            fix="nothing was changed; use `sparkctl inventory` and `sparkctl lab` for now",
        )

    return command


def register(app: typer.Typer, skip: set[str] = frozenset()) -> None:
    """Add a placeholder for every pending command the app does not already have."""
    have = {c.name for c in app.registered_commands} | set(skip)
    for name, (help_text, issue) in PENDING.items():
        if name not in have:
            tag = f"issue #{issue}" if issue else "planned"
            app.command(name, help=f"{help_text} [not implemented yet: {tag}]")(_make(name, issue))
