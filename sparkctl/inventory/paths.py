"""An inventory as dotted field paths ("runtime.port"): how reload diffs two configs and how the
compile key picks the fields vLLM's compile hash covers."""

from __future__ import annotations

from typing import Any


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """{"runtime": {"port": 1}} -> {"runtime.port": 1}; lists stay values (a rail list is one field)."""
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out if out or not prefix else {prefix[:-1]: {}}
    return {prefix[:-1]: obj}
