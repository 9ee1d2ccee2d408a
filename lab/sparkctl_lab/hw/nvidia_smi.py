"""`nvidia-smi` for a lab host: GB10 on the Sparks, two RTX 3090s on the offload host.

Answers the way the real tool does for the forms sparkctl and operators use: the default
table, `-L`, `--query-gpu=...` / `--query-compute-apps=...` with `--format=csv[,noheader][,nounits]`,
`-i`, `--version`. Faults (state.py) remove GPUs, change the driver or add a foreign process.
"""

from __future__ import annotations

import sys
import time

from sparkctl_lab.hw import state

NO_DEVICES = "No devices were found"

# the fields --query-gpu / --query-compute-apps answer; aliases map onto them
GPU_FIELDS = (
    "index",
    "name",
    "uuid",
    "pci.bus_id",
    "driver_version",
    "count",
    "memory.total",
    "memory.used",
    "memory.free",
    "temperature.gpu",
    "utilization.gpu",
    "utilization.memory",
    "power.draw",
    "power.limit",
    "pstate",
    "persistence_mode",
    "compute_cap",
    "serial",
)
GPU_ALIASES = {"gpu_name": "name", "gpu_uuid": "uuid", "gpu_bus_id": "pci.bus_id", "persistence-mode": "persistence_mode"}
APP_FIELDS = ("pid", "process_name", "used_memory", "gpu_uuid", "gpu_bus_id", "gpu_name")
APP_ALIASES = {"name": "process_name", "used_gpu_memory": "used_memory"}
# a field with a unit has it in its CSV header ("memory.total [MiB]") and after each value unless nounits
UNITS = {
    "memory.total": "MiB",
    "memory.used": "MiB",
    "memory.free": "MiB",
    "utilization.gpu": "%",
    "utilization.memory": "%",
    "power.draw": "W",
    "power.limit": "W",
    "used_memory": "MiB",
}
HEADERS = {"used_memory": "used_gpu_memory"}

NA = "[N/A]"


def _is_gb10(g: dict) -> bool:
    return g["memory_total"] is None


def gpu_values(g: dict, host, faults: dict, count: int) -> dict:
    """Every --query-gpu field of one GPU."""
    gb10 = _is_gb10(g)
    return {
        "index": g["index"],
        "name": g["name"],
        "uuid": g["uuid"],
        "pci.bus_id": g["bus_id"],
        "driver_version": state.driver(host, faults),
        "count": count,
        "memory.total": NA if gb10 else g["memory_total"],
        "memory.used": NA if gb10 else g["memory_used"],
        "memory.free": NA if gb10 else g["memory_total"] - g["memory_used"],
        "temperature.gpu": 42 if gb10 else 35,
        "utilization.gpu": 0,
        "utilization.memory": NA if gb10 else 0,
        "power.draw": "4.71" if gb10 else "20.45",
        "power.limit": NA if gb10 else "350.00",
        "pstate": "P8",
        "persistence_mode": "Enabled" if gb10 else "Disabled",
        "compute_cap": "12.1" if gb10 else "8.6",
        "serial": "1654925012345" if gb10 else NA,
    }


def app_values(p: dict, g: dict) -> dict:
    """Every --query-compute-apps field of one process on GPU g."""
    return {
        "pid": p["pid"],
        "process_name": p.get("name", "python3"),
        "used_memory": int(p.get("used_mib", 0)),
        "gpu_uuid": g["uuid"],
        "gpu_bus_id": g["bus_id"],
        "gpu_name": g["name"],
    }


def _fmt(field: str, value, nounits: bool) -> str:
    if field not in UNITS or nounits or value == NA:
        return str(value)
    return f"{value} {UNITS[field]}"


def _header(field: str) -> str:
    name = HEADERS.get(field, field)
    return f"{name} [{UNITS[field]}]" if field in UNITS else name


def parse_format(spec: str | None) -> tuple[bool, bool] | None:
    if not spec:
        return None
    parts = [p.strip() for p in spec.split(",")]
    if "csv" not in parts or any(p not in ("csv", "noheader", "nounits") for p in parts):
        return None
    return "noheader" in parts, "nounits" in parts


def table(host, faults, gpus: list[dict]) -> str:
    now = time.strftime("%a %b %d %H:%M:%S %Y")
    drv = state.driver(host, faults)
    bar = "+" + "-" * 89 + "+"
    sep = "+" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+"

    def cell(left: str, right: str, width: int) -> str:
        return left + " " * max(1, width - len(left) - len(right)) + right

    def row(a: tuple[str, str], b: tuple[str, str], c: tuple[str, str]) -> str:
        return "|" + cell(*a, 41) + "|" + cell(*b, 24) + "|" + cell(*c, 22) + "|"

    head = f" NVIDIA-SMI {drv}              Driver Version: {drv}      CUDA Version: {host.cuda}"
    lines = [
        f"{now}       ",
        bar,
        "|" + head.ljust(89) + "|",
        sep,
        row((" GPU  Name", "Persistence-M "), (" Bus-Id", "Disp.A "), (" Volatile", "Uncorr. ECC ")),
        row((" Fan  Temp   Perf", "Pwr:Usage/Cap "), ("", "Memory-Usage "), (" GPU-Util", "Compute M. ")),
        row(("", ""), ("", ""), ("", "MIG M. ")),
        "|" + "=" * 41 + "+" + "=" * 24 + "+" + "=" * 22 + "|",
    ]
    for g in gpus:
        gb10 = _is_gb10(g)
        mem = "Not Supported" if gb10 else f"{g['memory_used']}MiB /  {g['memory_total']}MiB"
        lines += [
            row((f" {g['index']:>3}  {g['name']}", ("On" if gb10 else "Off") + " "), (f"   {g['bus_id']}", "Off "), ("", "N/A ")),
            row(
                (" N/A   42C    P8" if gb10 else " 30%   35C    P8", ("4W /  N/A " if gb10 else "20W /  350W ")),
                (f" {mem}" if gb10 else "", "" if gb10 else mem + " "),
                ("      0%", "Default "),
            ),
            row(("", ""), ("", ""), ("", "N/A ")),
            sep,
        ]
    lines += [
        "",
        bar,
        "| Processes:".ljust(90) + "|",
        "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |",
        "|        ID   ID                                                               Usage      |",
        "|" + "=" * 89 + "|",
    ]
    procs = [(g, p) for g in gpus for p in g["processes"]]
    if not procs:
        lines.append("|  No running processes found".ljust(90) + "|")
    for g, p in procs:
        left = f"|  {g['index']:>3}   N/A  N/A  {p['pid']:>15}      C   {p.get('name', 'python3')}"
        right = f"{int(p.get('used_mib', 0))}MiB |"
        lines.append(left + " " * max(1, 91 - len(left) - len(right)) + right)
    lines.append(bar)
    return "\n".join(lines) + "\n"


def _option(argv: list[str], i: int, name: str) -> tuple[str | None, int]:
    a = argv[i]
    if a.startswith(name + "="):
        return a.split("=", 1)[1], i + 1
    if i + 1 < len(argv):
        return argv[i + 1], i + 2
    return None, i + 1


def main(argv: list[str]) -> int:
    host = state.current_host()
    faults = state.load_faults(host.name)
    drv = state.driver(host, faults)
    out, err = sys.stdout, sys.stderr
    query_gpu = query_apps = fmt = None
    ids: list[int] | None = None
    mode = "table"
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-L", "--list-gpus"):
            mode, i = "list", i + 1
        elif a.startswith("--query-gpu"):
            query_gpu, i = _option(argv, i, "--query-gpu")
            mode = "query-gpu"
        elif a.startswith("--query-compute-apps"):
            query_apps, i = _option(argv, i, "--query-compute-apps")
            mode = "query-apps"
        elif a.startswith("--format"):
            fmt, i = _option(argv, i, "--format")
        elif a in ("-i", "--id") or a.startswith("--id="):
            v, i = _option(argv, i, "--id")
            try:
                ids = [int(x) for x in (v or "").split(",")]
            except ValueError:
                err.write(f"Invalid device ID: {v}\n")
                return 2
        elif a == "--version":
            out.write(
                f"NVIDIA-SMI version  : {drv}\nNVML version        : {drv.rsplit('.', 1)[0]}\n"
                f"DRIVER version      : {drv}\nCUDA Version        : {host.cuda}\n"
            )
            return 0
        elif a in ("-h", "--help"):
            out.write(
                f"NVIDIA System Management Interface -- v{drv}\n\n"
                "Supported here (sparkctl lab): -L, -i, --query-gpu, --query-compute-apps, --format, --version\n"
            )
            return 0
        else:
            err.write("\nInvalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n\n")
            return 2

    gpus = state.gpus(host, faults)
    if not gpus:
        out.write(NO_DEVICES + "\n")
        return 6
    if ids is not None:
        if any(x < 0 or x >= len(gpus) for x in ids):
            out.write(NO_DEVICES + "\n")
            return 6
        gpus = [g for g in gpus if g["index"] in ids]

    if mode == "list":
        for g in gpus:
            out.write(f"GPU {g['index']}: {g['name']} (UUID: {g['uuid']})\n")
        return 0
    if mode == "table":
        out.write(table(host, faults, gpus))
        return 0

    parsed = parse_format(fmt)
    if fmt is None:
        err.write("Missing --format option. Please run 'nvidia-smi -h' for help.\n")
        return 2
    if parsed is None:
        err.write(f"\"{fmt}\" is not a valid format. Please run 'nvidia-smi -h' for help.\n")
        return 2
    noheader, nounits = parsed
    known, aliases = (GPU_FIELDS, GPU_ALIASES) if mode == "query-gpu" else (APP_FIELDS, APP_ALIASES)
    fields = []
    for f in ((query_gpu if mode == "query-gpu" else query_apps) or "").split(","):
        key = aliases.get(f.strip(), f.strip())
        if key not in known:
            out.write(f'Field "{f.strip()}" is not a valid field to query.\n\n')
            return 2
        fields.append(key)
    if mode == "query-gpu":
        rows = [gpu_values(g, host, faults, len(gpus)) for g in gpus]
    else:
        rows = [app_values(p, g) for g in gpus for p in g["processes"]]
    if not noheader:
        out.write(", ".join(_header(f) for f in fields) + "\n")
    for r in rows:
        out.write(", ".join(_fmt(f, r[f], nounits) for f in fields) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
