"""Engram tables in the offload host's RAM: the mount, the placement record, the files.

`sparkctl up` (steps/engram.py) mounts a tmpfs of `size_gib` at `engram.target`, copies the
tables from `engram.source`, verifies every SHA-256 and writes `.sparkctl-placed` (the sums it
verified) into the mount. Doctor reads the mount, that record, the source's `SHA256SUMS` and
both file listings in the one round trip; re-hashing the RAM copy (minutes for ~220 GiB) is
left to `--deep`.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

from sparkctl.facts.base import Reading, Target, fact, host_fields
from sparkctl.facts.probe import mark_recorded

if TYPE_CHECKING:
    from sparkctl.facts.host import HostFacts

MARKER = ".sparkctl-placed"  # written by steps/engram.py after verifying the copy (sha256sum format)
STAT = ".sparkctl-placed.stat"  # "size ctime name" of every file as verified: what changed since is re-hashed
MANIFEST = "SHA256SUMS"
RAM_FS = ("tmpfs", "ramfs", "hugetlbfs")
# the table files of a placed copy (run inside it): not the marker, its stat record or the manifest
_TABLES = f"find . -type f ! -name '{MARKER}*' ! -name {MANIFEST}"


def engram_probe(source: str, target: str) -> str:
    s, t = shlex.quote(source), shlex.quote(target)
    listing = f"-type f ! -name {MARKER} -printf '%P %s\\n' | head -n 5000"
    return (
        f"echo @@mount; mountpoint -q {t} && df -B1 --output=fstype,size {t} | tail -n 1; "
        f"echo @@marker; cat {t}/{MARKER} 2>/dev/null; "
        f"echo @@sums; cat {s}/{MANIFEST} 2>/dev/null; "
        f"echo @@source; [ -d {s} ] && find {s} {listing}; "
        f"echo @@target; [ -d {t} ] && find {t} {listing}; true"
    )


def parse_sums(text: str) -> dict[str, str]:
    """sha256sum output (`HASH  name`, names possibly ./-prefixed or *binary) -> {name: hash}."""
    out = {}
    for line in text.splitlines():
        parts = line.split(None, 1)
        if len(parts) == 2 and len(parts[0]) == 64:
            out[parts[1].strip().lstrip("*").removeprefix("./")] = parts[0]
    return out


@dataclass(frozen=True)
class EngramFacts:
    mount_fs: Optional[str] = None  # filesystem type when target is a mount point
    mount_bytes: Optional[int] = None
    placed_sums: dict[str, str] = field(default_factory=dict)  # the marker up wrote after verifying
    source_sums: dict[str, str] = field(default_factory=dict)  # the source's SHA256SUMS, if it ships one
    source_files: dict[str, int] = field(default_factory=dict)
    target_files: dict[str, int] = field(default_factory=dict)

    @property
    def ram_backed(self) -> bool:
        return self.mount_fs in RAM_FS

    def tables(self, files: dict[str, int]) -> dict[str, int]:
        return {k: v for k, v in files.items() if k != MANIFEST}

    @property
    def target_bytes(self) -> int:
        return sum(self.tables(self.target_files).values())


def parse_engram(text: str) -> EngramFacts:
    from sparkctl.facts.probe import chunks as split

    chunks = split(text, ("mount", "marker", "sums", "source", "target"))

    def listing(text: str) -> dict[str, int]:
        rows = (line.rpartition(" ") for line in text.splitlines())
        return {name: int(size) for name, _, size in rows if size.isdigit() and name}

    mount = (chunks["mount"].strip().splitlines() or [""])[-1].split()  # df's last line: FSTYPE SIZE
    return EngramFacts(
        mount_fs=mount[0] if mount else None,
        mount_bytes=int(mount[1]) if len(mount) > 1 and mount[1].isdigit() else None,
        placed_sums=parse_sums(chunks["marker"]),
        source_sums=parse_sums(chunks["sums"]),
        source_files=listing(chunks["source"]),
        target_files=listing(chunks["target"]),
    )


def source_sums_command(source: str) -> str:
    """Shell: the source's sums computed, only when it ships no SHA256SUMS (the `engram` fact reads that)."""
    s = shlex.quote(source)
    return (
        f"cd {s} && if [ ! -f {MANIFEST} ]; then "
        f"find . -type f ! -name {MANIFEST} ! -name {MARKER} | sort | xargs -r sha256sum; fi"
    )


def checksum_command(target: str) -> str:
    """Shell (--deep): hash every file of the RAM copy, to compare against the placement record."""
    t = shlex.quote(target)
    return f"cd {t} && {_TABLES} | sort | xargs -r sha256sum"


def changed_checksum_command(target: str) -> str:
    """Shell (every `up`): hash only the files whose size or ctime differ from what was verified
    at placement (any write, even one flipped byte, moves ctime; a user cannot set it back);
    print `unchanged NAME` for the others. Hashing all of ~220 GiB on every run would take minutes."""
    t = shlex.quote(target)
    return (
        f"cd {t} && {_TABLES} -printf '%s %C@ %P\\n' | sort -k3 | {mark_recorded(STAT)} | "
        "while read -r seen size ctime name; do "
        'if [ "$seen" = u ]; then echo "unchanged $name"; else sha256sum -- "$name"; fi; done'
    )


def stat_command(target: str) -> str:
    """Shell: the `size ctime name` record of every file, written next to the marker after verifying."""
    t = shlex.quote(target)
    return f"cd {t} && {_TABLES} -printf '%s %C@ %P\\n' | sort -k3 > {STAT}"


def parse_changed_sums(text: str, placed: dict[str, str]) -> dict[str, str]:
    """`changed_checksum_command` output -> {name: sha256}: re-hashed files, and for unchanged
    ones the hash verified at placement."""
    out = parse_sums(text)
    for line in text.splitlines():
        if line.startswith("unchanged "):
            name = line[len("unchanged ") :].strip()
            if name in placed:
                out[name] = placed[name]
    return out


@host_fields
class EngramFields:
    """The HostFacts attributes this module's facts fill (a host where one was not read keeps the default)."""

    engram: Optional[EngramFacts] = None
    engram_hashes: Optional[dict[str, str]] = (
        None  # SHA-256 per file of the RAM copy (re-hashed where changed, or all with --deep)
    )
    engram_rehashed: list[str] = field(default_factory=list)  # files whose size/ctime moved since placement
    engram_source_hashes: Optional[dict[str, str]] = None  # the source's SHA256SUMS, else computed


# --- the facts (facts/base.py) ---------------------------------------------------------------


def _placed_here(t: Target):
    """The inventory's Engram placement when this host holds it, else None."""
    e = t.inventory.engram
    return e if e and e.host == t.name else None


@fact("engram", lambda t: engram_probe(e.source, e.target) if (e := _placed_here(t)) else None)
def _engram(f: HostFacts, r: Reading) -> None:
    f.engram = parse_engram(r.out)


# `up` re-hashes what changed since placement; `doctor --deep` re-hashes every byte (minutes for ~220 GiB)
@fact(
    "engram_hashes",
    lambda t: changed_checksum_command(e.target) if (e := _placed_here(t)) else None,
    background=True,
    after=("engram",),
)
def _engram_hashes(f: HostFacts, r: Reading) -> None:  # re-hashed where size or ctime moved, else the placement's sums
    if not r.ok:
        f.errors["engram_hashes"] = r.last_line()
    f.engram_hashes = parse_changed_sums(r.out, f.engram.placed_sums if f.engram else {})
    f.engram_rehashed = sorted(parse_sums(r.out))


@fact(
    "engram_rehash",
    lambda t: checksum_command(e.target) if (e := _placed_here(t)) else None,
    background=True,
    after=("engram_hashes",),
)  # fills engram_hashes: the --deep reading wins
def _engram_rehash(f: HostFacts, r: Reading) -> None:  # --deep: every file hashed again
    if not r.ok:
        f.errors["engram_hashes"] = r.last_line()
    f.engram_hashes = parse_sums(r.out)


@fact(
    "engram_source_hashes",
    lambda t: source_sums_command(e.source) if (e := _placed_here(t)) else None,
    background=True,
)  # the source's SHA256SUMS, else computed
def _engram_source_hashes(f: HostFacts, r: Reading) -> None:
    if not r.ok:
        f.errors[r.key] = r.last_line()
    f.engram_source_hashes = parse_sums(r.out) if r.ok else None
