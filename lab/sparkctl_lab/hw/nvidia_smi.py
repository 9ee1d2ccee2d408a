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

# field -> (header, unit); aliases map onto these
GPU_FIELDS = {
    "index": ("index", None),
    "name": ("name", None),
    "uuid": ("uuid", None),
    "pci.bus_id": ("pci.bus_id", None),
    "driver_version": ("driver_version", None),
    "count": ("count", None),
    "memory.total": ("memory.total [MiB]", "MiB"),
    "memory.used": ("memory.used [MiB]", "MiB"),
    "memory.free": ("memory.free [MiB]", "MiB"),
    "temperature.gpu": ("temperature.gpu", None),
    "utilization.gpu": ("utilization.gpu [%]", "%"),
    "utilization.memory": ("utilization.memory [%]", "%"),
    "power.draw": ("power.draw [W]", "W"),
    "power.limit": ("power.limit [W]", "W"),
    "pstate": ("pstate", None),
    "persistence_mode": ("persistence_mode", None),
    "compute_cap": ("compute_cap", None),
    "serial": ("serial", None),
}
GPU_ALIASES = {"gpu_name": "name", "gpu_uuid": "uuid", "gpu_bus_id": "pci.bus_id", "persistence-mode": "persistence_mode"}

APP_FIELDS = {
    "pid": ("pid", None),
    "process_name": ("process_name", None),
    "used_memory": ("used_gpu_memory [MiB]", "MiB"),
    "gpu_uuid": ("gpu_uuid", None),
    "gpu_bus_id": ("gpu_bus_id", None),
    "gpu_name": ("gpu_name", None),
}
APP_ALIASES = {"name": "process_name", "used_gpu_memory": "used_memory"}

NA = "[N/A]"


def _is_gb10(g: dict) -> bool:
    return g["memory_total"] is None


def gpu_value(field: str, g: dict, host, faults: dict, count: int):
    """(value, unit) for one --query-gpu field."""
    gb10 = _is_gb10(g)
    return {
        "index": (g["index"], None),
        "name": (g["name"], None),
        "uuid": (g["uuid"], None),
        "pci.bus_id": (g["bus_id"], None),
        "driver_version": (state.driver(host, faults), None),
        "count": (count, None),
        "memory.total": (NA, None) if gb10 else (g["memory_total"], "MiB"),
        "memory.used": (NA, None) if gb10 else (g["memory_used"], "MiB"),
        "memory.free": (NA, None) if gb10 else (g["memory_total"] - g["memory_used"], "MiB"),
        "temperature.gpu": (42 if gb10 else 35, None),
        "utilization.gpu": (0, "%"),
        "utilization.memory": (NA, None) if gb10 else (0, "%"),
        "power.draw": ("4.71" if gb10 else "20.45", "W"),
        "power.limit": (NA, None) if gb10 else ("350.00", "W"),
        "pstate": ("P8", None),
        "persistence_mode": ("Enabled" if gb10 else "Disabled", None),
        "compute_cap": ("12.1" if gb10 else "8.6", None),
        "serial": (NA, None) if not gb10 else ("1654925012345", None),
    }[field]


def app_value(field: str, p: dict, g: dict):
    return {
        "pid": (p["pid"], None),
        "process_name": (p.get("name", "python3"), None),
        "used_memory": (int(p.get("used_mib", 0)), "MiB"),
        "gpu_uuid": (g["uuid"], None),
        "gpu_bus_id": (g["bus_id"], None),
        "gpu_name": (g["name"], None),
    }[field]


def _fmt(value, unit, nounits: bool) -> str:
    if unit is None or nounits or value == NA:
        return str(value)
    return f"{value} {unit}"


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
            row((f" {g['index']:>3}  {g['name']}", ("On" if gb10 else "Off") + " "),
                (f"   {g['bus_id']}", "Off "), ("", "N/A ")),
            row((" N/A   42C    P8" if gb10 else " 30%   35C    P8", ("4W /  N/A " if gb10 else "20W /  350W ")),
                (f" {mem}" if gb10 else "", "" if gb10 else mem + " "), ("      0%", "Default ")),
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
                f"NVIDIA-SMI version  : {state.driver(host, faults)}\nNVML version        : "
                f"{state.driver(host, faults).rsplit('.', 1)[0]}\nDRIVER version      : {state.driver(host, faults)}\n"
                f"CUDA Version        : {host.cuda}\n"
            )
            return 0
        elif a in ("-h", "--help"):
            out.write("NVIDIA System Management Interface -- v" + state.driver(host, faults) + "\n\n"
                      "Supported here (sparkctl lab): -L, -i, --query-gpu, --query-compute-apps, --format, --version\n")
            return 0
        else:
            err.write("\nInvalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n\n")
            return 2

    gpus = state.gpus(host, faults)
    if not gpus:
        out.write(NO_DEVICES + "\n")
        return 6
    if ids is not None:
        bad = [x for x in ids if x < 0 or x >= len(gpus)]
        if bad:
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
        err.write(f'"{fmt}" is not a valid format. Please run \'nvidia-smi -h\' for help.\n')
        return 2
    noheader, nounits = parsed
    fields_spec = query_gpu if mode == "query-gpu" else query_apps
    table_, aliases = (GPU_FIELDS, GPU_ALIASES) if mode == "query-gpu" else (APP_FIELDS, APP_ALIASES)
    fields = []
    for f in (fields_spec or "").split(","):
        f = f.strip()
        key = aliases.get(f, f)
        if key not in table_:
            out.write(f'Field "{f}" is not a valid field to query.\n\n')
            return 2
        fields.append(key)
    rows = []
    if mode == "query-gpu":
        for g in gpus:
            rows.append([_fmt(*gpu_value(f, g, host, faults, len(gpus)), nounits) for f in fields])
    else:
        for g in gpus:
            for p in g["processes"]:
                rows.append([_fmt(*app_value(f, p, g), nounits) for f in fields])
    if not noheader:
        out.write(", ".join(table_[f][0] for f in fields) + "\n")
    for r in rows:
        out.write(", ".join(r) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
