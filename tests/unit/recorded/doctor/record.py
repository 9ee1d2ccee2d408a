"""Re-record doctor's probe sections from the lab (root, lab up, no runtime running):

    python tests/unit/recorded/doctor/record.py

healthy.json: every probe section of every host of inventories/lab.yaml (copied here as
inventory.yaml), after tests/lab/test_doctor.py's prepare() (image pulled, cache dirs, Engram
placed). <fault>.json: for each lab fault of that test's FAULTS table, only the sections that
changed with the fault on (pings only when their result changed); the degraded rail changes none
(its traffic is recorded in ../bandwidth/). Container environments are
dropped from `docker inspect` output (they may hold secrets).
"""

import json
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[3]
sys.path.insert(0, str(REPO / "tests" / "lab"))

import test_doctor as td  # noqa: E402

from sparkctl.facts.host import background_keys, probes_for  # noqa: E402
from sparkctl.facts.probe import gather  # noqa: E402
from sparkctl.inventory.loader import load_inventory  # noqa: E402
from sparkctl.transport.ssh import Fleet  # noqa: E402
from sparkctl_lab import api  # noqa: E402

VOLATILE = {"clock", "meminfo", "disk"}


def snap(inv) -> dict:
    with Fleet(inv) as fleet:
        res = fleet.map(lambda s: gather(s, probes_for(inv, s.name), background=background_keys(probes_for(inv, s.name))))
    out = {}
    for host, o in res.items():
        assert o.ok, o.error
        secs = {}
        for key, sec in o.value.items():
            text = sec.out
            if key == "containers" and text.strip().startswith("["):
                items = json.loads(text)
                for it in items:
                    (it.get("Config") or {}).pop("Env", None)
                text = json.dumps(items, indent=1)
            secs[key] = {"rc": sec.rc, "out": text}
        out[host] = secs
    return out


def main() -> None:
    inv = load_inventory(td.LAB_INVENTORY)
    td.prepare(api)
    api.clear_faults()
    healthy = snap(inv)
    shutil.copy(td.LAB_INVENTORY, HERE / "inventory.yaml")
    (HERE / "healthy.json").write_text(json.dumps(healthy, indent=1) + "\n")
    for name, ((host, kind, target, value), expected) in td.FAULTS.items():
        if {check for check, _, _ in expected} == {"fabric.bandwidth"}:
            continue  # a degraded rail changes no probe section: tests/unit/recorded/bandwidth/ records its traffic
        api.clear_faults()
        api.fault(host, kind, target, value)
        time.sleep(0.5)  # the simulated sysfs follows link changes through a netlink watcher
        faulty = snap(inv)
        api.clear_faults()
        diff = {}
        for h, secs in faulty.items():
            changed = {
                k: v for k, v in secs.items()
                if k not in VOLATILE and healthy[h].get(k) != v
                and not (k.startswith("ping.") and v["rc"] == healthy[h][k]["rc"])
            }  # fmt: skip
            if changed:
                diff[h] = changed
        (HERE / f"{name}.json").write_text(json.dumps(diff, indent=1) + "\n")
        print(name, {h: sorted(d) for h, d in diff.items()})


if __name__ == "__main__":
    main()
