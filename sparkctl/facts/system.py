"""System facts: memory, disk, memlock limit, systemd-logind RemoveIPC, clock."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


def parse_meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo -> bytes per field (MemTotal, MemAvailable, ...)."""
    out = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            out[key.strip()] = int(parts[0]) * (1024 if len(parts) > 1 and parts[1] == "kB" else 1)
    return out


@dataclass(frozen=True)
class Disk:
    path: str
    mount: str
    size: int
    available: int


def parse_df(text: str, paths: list[str]) -> dict[str, Disk]:
    """`df -P -B1 PATH...` -> Disk per asked path (rows come back in the same order)."""
    rows = [ln.split() for ln in text.splitlines()[1:] if ln.strip()]
    out = {}
    for path, row in zip(paths, rows):
        if len(row) >= 6 and row[1].isdigit():
            out[path] = Disk(path, row[5], int(row[1]), int(row[3]))
    return out


def parse_memlock(text: str) -> Optional[int]:
    """`ulimit -l` -> KiB, or -1 for unlimited, None if unreadable."""
    value = text.strip().splitlines()[-1].strip() if text.strip() else ""
    if value == "unlimited":
        return -1
    return int(value) if value.isdigit() else None


def parse_remove_ipc(text: str) -> Optional[bool]:
    """Effective RemoveIPC from logind.conf then logind.conf.d/*.conf (last wins); None = unset (systemd default: yes)."""
    value = None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("RemoveIPC="):
            value = line.split("=", 1)[1].strip().lower() in ("yes", "true", "1", "on")
    return value
