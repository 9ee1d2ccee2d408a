"""Lab bring-up/teardown times and memory, for the closing note. Needs root; leaves the lab up.

    python benchmarks/lab_updown.py [--repeat N] [--keep-cache] [--json]

Measures, each N times (median shown):
  cold   `lab up` from nothing: no lab and no image caches (/var/cache/sparkctl-lab/{image,registry}
         removed, so the rootfs is built, imported and pushed; the SSH keys are kept so host
         identities stay stable for everyone else's known_hosts) -- skipped with --keep-cache
  warm   `lab up` after `lab down` with the caches kept (the usual case)
  noop   `lab up` on a lab that is already up
  down   `lab down` of an idle lab
then the idle memory of the lab's processes per host (init, sshd, dockerd, containerd) and
of the registry, as RSS (shared pages counted in each process) and PSS (shared split).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time


def timed(fn) -> float:
    t0 = time.monotonic()
    fn()
    return time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep-cache", action="store_true", help="skip the cold measurement (keeps the caches)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    from sparkctl_lab import api, procs
    from sparkctl_lab.paths import CACHE_DIR

    times: dict[str, list[float]] = {"cold": [], "warm": [], "noop": [], "down": []}
    for _ in range(args.repeat):
        api.down()
        if not args.keep_cache:
            for sub in ("image", "registry"):
                shutil.rmtree(CACHE_DIR / sub, ignore_errors=True)
            times["cold"].append(timed(api.up))
            times["down"].append(timed(api.down))
        times["warm"].append(timed(api.up))
        times["noop"].append(timed(api.up))
        if args.keep_cache:
            times["down"].append(timed(api.down))
            api.up()

    time.sleep(3)  # let the daemons settle into idle

    def idle(pid: int) -> dict:
        """The process tree under pid: RSS and PSS in MiB, and how many processes."""
        return {
            "rss_mib": round(procs.rss_kib([pid]) / 1024, 1),
            "pss_mib": round(procs.pss_kib([pid]) / 1024, 1),
            "processes": len(procs.descendants([pid])),
        }

    st = api.status()
    memory = {name: idle(h["init_pid"]) for name, h in st["hosts"].items()}
    memory["registry"] = idle(st["registry"]["pid"])
    memory["total"] = {k: round(sum(v[k] for v in memory.values()), 1) for k in ("rss_mib", "pss_mib", "processes")}

    result = {
        "repeat": args.repeat,
        "seconds_median": {k: round(statistics.median(v), 2) for k, v in times.items() if v},
        "seconds_all": {k: [round(x, 2) for x in v] for k, v in times.items() if v},
        "memory_idle": memory,
        "machine": subprocess.run(["uname", "-srm"], capture_output=True, text=True).stdout.strip(),
        "cpus": os.cpu_count(),
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"lab up/down ({args.repeat} runs each, median; {result['machine']}, {result['cpus']} cpus)")
    for k, v in result["seconds_median"].items():
        print(f"  {k:<5} {v:6.2f} s   (all: {', '.join(f'{x:.2f}' for x in result['seconds_all'][k])})")
    print("idle memory (RSS counts shared pages in every process; PSS splits them)")
    for name, m in memory.items():
        print(f"  {name:<9} RSS {m['rss_mib']:7.1f} MiB   PSS {m['pss_mib']:7.1f} MiB   {m['processes']} processes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
