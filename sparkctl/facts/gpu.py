"""GPU facts from `nvidia-smi --query-gpu=... --format=csv,noheader,nounits` and compute apps."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from typing import Optional

GPU_QUERY = "index,name,driver_version,memory.total,memory.used,uuid,pci.bus_id"
APPS_QUERY = "gpu_uuid,pid,process_name,used_memory"


@dataclass(frozen=True)
class GPU:
    index: int
    name: str
    driver: str
    memory_total_mib: Optional[int]  # None on GB10: unified memory reads "[N/A]"
    memory_used_mib: Optional[int]
    uuid: str
    bus_id: str


@dataclass(frozen=True)
class GPUApp:
    gpu_uuid: str
    pid: int
    process: str
    used_mib: Optional[int]


def _num(value: str) -> Optional[int]:
    value = value.strip()
    try:
        return int(float(value))
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


def _rows(text: str) -> list[list[str]]:
    return [[c.strip() for c in row] for row in csv.reader(io.StringIO(text)) if row and any(c.strip() for c in row)]


def parse_gpus(rc: int, text: str) -> tuple[list[GPU], Optional[str]]:
    """GPUs, or ([], reason) when nvidia-smi failed or found none ("No devices were found")."""
    if rc != 0:
        return [], (text.strip().splitlines() or [f"nvidia-smi exit {rc}"])[-1]
    gpus = []
    for row in _rows(text):
        if len(row) < 7:
            return [], f"unexpected nvidia-smi output: {','.join(row)}"
        gpus.append(GPU(int(row[0]), row[1], row[2], _num(row[3]), _num(row[4]), row[5], row[6]))
    if not gpus:
        return [], "No devices were found"
    return gpus, None


def parse_apps(rc: int, text: str) -> list[GPUApp]:
    if rc != 0:
        return []
    return [GPUApp(row[0], int(row[1]), row[2], _num(row[3])) for row in _rows(text) if len(row) >= 4 and row[1].isdigit()]
