"""Which node holds which checkpoint, and where it comes from.

The target model (`weights`) sits at `runtime.model` on every node that runs the engine: the
download host (default: the head) fetches it from the hub once (or copies it from a folder it
already holds, `weights.directory`), every other engine node copies it from there over the fabric. The drafter's checkpoint (`weights.drafter`) sits at
`speculative.model` on the drafter's host, which downloads it itself: no other node needs it.

A rule of the inventory alone, below the facts (facts/weights.py asks it which folders a node
holds), the weights step and doctor's weights checks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Union

from sparkctl.inventory.models import HubCheckpoint, Inventory


@dataclass(frozen=True)
class FolderCheckpoint:
    """A checkpoint in a folder on the download host (weights.directory), listed by its SHA256SUMS.
    Named like a hub checkpoint in records and messages: `host:folder`, revision SHA256SUMS."""

    host: str
    directory: str
    revision: str = "SHA256SUMS"
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()

    @property
    def repo(self) -> str:
        return f"{self.host}:{self.directory}"


Checkpoint = Union[HubCheckpoint, FolderCheckpoint]


@dataclass(frozen=True)
class Placement:
    host: str
    path: str  # the same path on the node and in the container (the launch mounts it as it is)
    checkpoint: Checkpoint
    kind: Literal["model", "drafter"]
    source_host: str  # the node that downloads it; the others copy from there

    @property
    def downloads(self) -> bool:
        return self.host == self.source_host


def engine_hosts(inv: Inventory) -> list[str]:
    return inv.hosts_with_role("head") + inv.hosts_with_role("worker")


def download_host(inv: Inventory) -> str:
    w = inv.weights
    return (w.download_host if w and w.download_host else None) or inv.hosts_with_role("head")[0]


def placements(inv: Inventory) -> list[Placement]:
    """Every (host, path) a checkpoint must be placed at, the downloading host of each first."""
    w = inv.weights
    if w is None:
        return []
    src = download_host(inv)
    model = inv.runtime.model
    ckpt: Checkpoint = w.hub or FolderCheckpoint(src, w.directory or "")
    out = [Placement(src, model, ckpt, "model", src)]
    out += [Placement(h, model, ckpt, "model", src) for h in engine_hosts(inv) if h != src]
    spec = inv.runtime.speculative
    if w.drafter and spec and spec.model and spec.drafter_host:
        out.append(Placement(spec.drafter_host, spec.model, w.drafter, "drafter", spec.drafter_host))
    return out


def model_folders(inv: Inventory) -> list[tuple[str, str]]:
    """(host, folder) of every checkpoint a node must hold for the launch to start: runtime.model on
    every engine node, an absolute speculative.model on the drafter's host; placed by sparkctl
    (`weights`) or by the operator."""
    out = [(h, inv.runtime.model) for h in engine_hosts(inv) if inv.runtime.model.startswith("/")]
    spec = inv.runtime.speculative
    if spec and spec.model and spec.model.startswith("/") and spec.drafter_host:
        out.append((spec.drafter_host, spec.model))
    return out
