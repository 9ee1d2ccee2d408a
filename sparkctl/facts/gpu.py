"""GPU facts from `nvidia-smi --query-gpu=... --format=csv,noheader,nounits` and compute apps."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

from sparkctl.facts.base import Reading, fact, host_fields

if TYPE_CHECKING:
    from sparkctl.facts.host import HostFacts

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


# lines by which nvidia-smi names why it failed; what follows them is detail (e.g. the library version)
_CAUSES = (
    "failed to initialize nvml",
    "nvidia-smi has failed",
    "unable to determine the device handle",
    "gpu is lost",
    "not found",
    "no such file",
    "permission denied",
)


def failure_reason(rc: int, text: str) -> str:
    """The line that names why nvidia-smi failed, with the rest as detail: `Failed to initialize NVML:
    Driver/library version mismatch` is followed by `NVML library version: 580.173`, which alone says nothing."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    if not lines:
        return f"nvidia-smi exit {rc}"
    cause = next((ln for ln in lines if any(c in ln.lower() for c in _CAUSES)), lines[-1])
    rest = [ln for ln in lines if ln != cause and ln != "No devices were found"]
    return (cause + (f" ({'; '.join(rest)})" if rest else ""))[:300]


def parse_gpus(rc: int, text: str) -> tuple[list[GPU], Optional[str]]:
    """GPUs, or ([], reason) when nvidia-smi failed or found none ("No devices were found")."""
    if rc != 0:
        return [], failure_reason(rc, text)
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


@host_fields
class GpuFields:
    """The HostFacts attributes this module's facts fill (a host where one was not read keeps the default)."""

    gpus: Optional[list[GPU]] = None  # None: not read, or nvidia-smi failed (gpu_error)
    gpu_error: Optional[str] = None
    gpu_apps: list[GPUApp] = field(default_factory=list)
    app_cgroups: dict[int, str] = field(default_factory=dict)  # pid -> its cgroup lines


# --- the facts (facts/base.py) ---------------------------------------------------------------

NVIDIA_SMI_GPUS = f"nvidia-smi --query-gpu={GPU_QUERY} --format=csv,noheader,nounits"
NVIDIA_SMI_APPS = f"nvidia-smi --query-compute-apps={APPS_QUERY} --format=csv,noheader,nounits"
APPS_SPLIT = "@@cgroups"  # between the compute apps and each app's /proc/PID/cgroup


@fact(
    "gpus",
    lambda t: NVIDIA_SMI_GPUS if t.host.gpu is not None else None,
    background=True,
)
def _gpus(f: HostFacts, r: Reading) -> None:
    found, err = parse_gpus(r.rc, r.out)
    if err and err != "No devices were found":
        f.gpu_error = err
    else:
        f.gpus = found


APPS_PROBE = (
    f'out=$({NVIDIA_SMI_APPS}); rc=$?; printf "%s\\n" "$out"; echo {APPS_SPLIT}; '
    'for p in $(printf "%s\\n" "$out" | cut -d, -f2 | tr -d " "); do '
    '[ "$p" -eq "$p" ] 2>/dev/null && printf "%s %s\\n" "$p" "$(tr "\\n" " " < /proc/$p/cgroup 2>/dev/null)"; done; exit $rc'
)


@fact(
    "gpu_apps",
    lambda t: APPS_PROBE if t.host.gpu is not None else None,
    background=True,
)  # pid -> its cgroup lines
def _gpu_apps(f: HostFacts, r: Reading) -> None:
    apps_text, _, cgroups = r.out.partition(APPS_SPLIT)
    f.gpu_apps = parse_apps(r.rc, apps_text)
    for pid, _, cgroup in (line.strip().partition(" ") for line in cgroups.splitlines()):
        if pid.isdigit():
            f.app_cgroups[int(pid)] = cgroup
