"""Data files sparkctl reads at run time: playbooks, templates, runbooks and the example inventories.

They live at the repository's top level (playbooks/, templates/, docs/runbooks/, inventories/), where people look
for them; `sparkctl/data/` links to them so they ship inside the package, and they are always read
through importlib.resources, so an installed wheel (pip, pipx) finds them as a checkout does.
"""

from __future__ import annotations

from importlib import resources
from importlib.abc import Traversable

KINDS = ("playbooks", "templates", "runbooks", "inventories")


def data_dir(kind: str) -> Traversable:
    if kind not in KINDS:
        raise ValueError(f"unknown data kind {kind!r}")
    return resources.files("sparkctl") / "data" / kind


def read_text(kind: str, name: str) -> str | None:
    """The file's text, or None when the package holds no such file."""
    f = data_dir(kind) / name
    return f.read_text() if f.is_file() else None


def names(kind: str, suffix: str = "") -> list[str]:
    d = data_dir(kind)
    return sorted(p.name for p in d.iterdir() if p.is_file() and p.name.endswith(suffix)) if d.is_dir() else []
