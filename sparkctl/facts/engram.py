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
from typing import Optional

MARKER = ".sparkctl-placed"  # written by steps/engram.py after verifying the copy
MANIFEST = "SHA256SUMS"
RAM_FS = ("tmpfs", "ramfs", "hugetlbfs")
_PARTS = ("mount", "marker", "sums", "source", "target")


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
    part = None
    chunks: dict[str, list[str]] = {p: [] for p in _PARTS}
    for line in text.splitlines():
        if line.startswith("@@") and line[2:] in chunks:
            part = line[2:]
        elif part and line.strip():
            chunks[part].append(line)

    def listing(lines: list[str]) -> dict[str, int]:
        files = {}
        for ln in lines:
            name, _, size = ln.rpartition(" ")
            if size.isdigit() and name:
                files[name] = int(size)
        return files

    mount = chunks["mount"][-1].split() if chunks["mount"] else []
    return EngramFacts(
        mount_fs=mount[0] if mount else None,
        mount_bytes=int(mount[1]) if len(mount) > 1 and mount[1].isdigit() else None,
        placed_sums=parse_sums("\n".join(chunks["marker"])),
        source_sums=parse_sums("\n".join(chunks["sums"])),
        source_files=listing(chunks["source"]),
        target_files=listing(chunks["target"]),
    )


def checksum_command(target: str) -> str:
    """Shell (--deep): hash the RAM copy's files, to compare against the placement record."""
    t = shlex.quote(target)
    return f"cd {t} && find . -type f ! -name {MARKER} ! -name {MANIFEST} | sort | xargs -r sha256sum"
