#!/usr/bin/env python3
"""Downtime of `sparkctl reload` on the lab against the runtime's own start, warm and cold.

    sudo SPARKCTL_ONLY_NETWORKS=127.0.0.0/8,10.231.0.0/16 .venv/bin/python benchmarks/reload.py [--runs 3] [--json]

A reload's downtime (`downtime_seconds` in `reload --json`: the window in which the engine served
no real completion, from the head's stop step on, probed from this machine; docs/reload.md) can never
be shorter than the runtime's own start (`runtime_start.seconds`: the head container started to
/health 200); what lies between is what sparkctl adds: the barrier and the drain (docker stop of the
head, then the worker), the runtime step before the head starts, and the probe's granularity.
Target: within 1 s.

warm: a change outside vLLM's compile hash (runtime.served_model_name, a new name each run): the
      compiled graphs load from the cache.
cold: a change the compile hash covers, to a value this cluster never served
      (runtime.max_num_batched_tokens, fresh each run, checked with `reload --check`): it compiles.

Each run reloads from the config the previous one applied; the last reload goes back to the lab's
own inventory, so the lab is left as it was. The lab test lock (tests/conftest.py) is held for the
whole run, so this never runs while a test session uses the lab. Prints figures (the median of
--runs each); asserts nothing (timings are not tests).
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
import sys
import tempfile
from pathlib import Path

import yaml

from labbench import INVENTORY, converge, log, require_lab, sparkctl

TARGET = 1.0  # seconds of downtime beyond the runtime's own start


def variant(workdir: Path, name: str, **runtime) -> Path:
    doc = yaml.safe_load(INVENTORY.read_text())
    doc["runtime"].update(runtime)
    out = workdir / f"{name}.yaml"
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


def fresh_cold(workdir: Path, name: str, current: Path) -> Path:
    """A max_num_batched_tokens this cluster never served: the plan must predict cold."""
    for _ in range(20):
        path = variant(workdir, name, max_num_batched_tokens=16384 + 8 * random.randrange(1, 50_000))
        _, doc = sparkctl("reload", "-i", str(current), "--config", str(path), "--check")
        if doc["plan"]["prediction"] == "cold":
            return path
    sys.exit("no fresh max_num_batched_tokens found that the plan predicts cold")


def step_seconds(doc: dict, step: str, host: str) -> float:
    return sum(r["seconds"] for r in doc["results"] if r["step"] == step and r["host"] == host)


def phase_seconds(doc: dict, phase: str) -> float:
    return sum((t["end"] or t["start"]) - t["start"] for t in doc["timeline"] if t["phase"] == phase)


def reload(current: Path, new: Path) -> dict:
    """One reload current -> new, and the figures of it."""
    rc, doc = sparkctl("reload", "-i", str(current), "--config", str(new), "--yes")
    if rc != 0 or doc["outcome"] != "ok":
        sys.exit(f"reload {current.name} -> {new.name} failed ({doc.get('outcome')}): {doc.get('reason')}")
    start = doc["runtime_start"]
    head_wait = step_seconds(doc, "runtime", "head")
    return {
        "from": current.name, "to": new.name,
        "prediction": doc["plan"]["prediction"], "start_cache": start["cache"].split(" ")[0],
        "downtime_seconds": doc["downtime_seconds"], "runtime_start_seconds": start["seconds"],
        "difference_seconds": round(doc["downtime_seconds"] - start["seconds"], 2),
        # where the difference goes: the drain (head then worker stop), the worker's start, and
        # the head's runtime step beyond its own start (docker start + the smoke completion)
        "drain_phase_seconds": round(phase_seconds(doc, "drain"), 2),
        "stop_head_seconds": step_seconds(doc, "stop", "head"), "stop_worker_seconds": step_seconds(doc, "stop", "worker"),
        "runtime_worker_seconds": step_seconds(doc, "runtime", "worker"),
        "runtime_head_beyond_start_seconds": round(head_wait - start["seconds"], 2),
        "restart_phase_seconds": round(phase_seconds(doc, "restart"), 2),
        "timeline": doc["timeline"],
    }  # fmt: skip


def summary(runs: list[dict]) -> dict:
    keys = ("downtime_seconds", "runtime_start_seconds", "difference_seconds", "drain_phase_seconds", "stop_head_seconds",
            "stop_worker_seconds", "runtime_worker_seconds", "runtime_head_beyond_start_seconds", "restart_phase_seconds")  # fmt: skip
    med = {k: round(statistics.median(r[k] for r in runs), 2) for k in keys}
    med["as_predicted"] = all(r["prediction"] == r["start_cache"] for r in runs)
    med["within_target"] = med["difference_seconds"] <= TARGET
    return med


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="reloads of each kind (the median is shown)")
    ap.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = ap.parse_args()
    lock = require_lab()  # noqa: F841 (held until exit)

    converge()
    runs: dict[str, list[dict]] = {"warm": [], "cold": []}
    current = INVENTORY
    with tempfile.TemporaryDirectory(prefix="sparkctl-bench-reload-") as tmp:
        workdir = Path(tmp)
        try:
            for kind, i in itertools.product(runs, range(args.runs)):  # warm runs first, then cold
                if kind == "warm":
                    new = variant(workdir, f"warm{i + 1}", served_model_name=f"deepseek-v4.1-flash-bench{i + 1}")
                else:
                    new = fresh_cold(workdir, f"cold{i + 1}", current)
                r = reload(current, new)
                runs[kind].append(r)
                current = new
                log(f"{kind} {i + 1}: downtime {r['downtime_seconds']} s, start {r['runtime_start_seconds']} s")
        finally:
            if current != INVENTORY:  # leave the lab as it was
                log("reloading back to the lab's own inventory ...")
                rc, doc = sparkctl("reload", "-i", str(current), "--config", str(INVENTORY), "--yes")
                if rc != 0:
                    log(f"reload back to {INVENTORY} failed ({doc.get('outcome')}): {doc.get('reason')}")

    result = {"runs_each": args.runs, "target_seconds": TARGET, "median": {k: summary(v) for k, v in runs.items()}, "runs": runs}
    if args.json:
        print(json.dumps(result, indent=2))
    for line in table(result):  # with --json, on stderr: stdout holds the one JSON document
        print(line, file=sys.stderr if args.json else sys.stdout)


def table(result: dict) -> list[str]:
    out = [
        f"sparkctl reload on the lab, median of {result['runs_each']} each (seconds)",
        f"{'':6} {'downtime':>9} {'runtime start':>14} {'difference':>11}   {'drain':>6} {'worker start':>13} {'head extra':>11}  as predicted",
    ]
    for kind, m in result["median"].items():
        out.append(
            f"{kind:6} {m['downtime_seconds']:9.2f} {m['runtime_start_seconds']:14.2f} {m['difference_seconds']:11.2f}"
            f"   {m['drain_phase_seconds']:6.2f} {m['runtime_worker_seconds']:13.2f} {m['runtime_head_beyond_start_seconds']:11.2f}"
            f"  {'yes' if m['as_predicted'] else 'NO'}"
        )
    for kind, m in result["median"].items():
        out.append(
            f"{kind}: difference {m['difference_seconds']:.2f} s, target <= {TARGET:.1f} s: {'within' if m['within_target'] else 'OVER'}"
        )
    out.append("drain: timeline phase (docker stop head, then worker); worker start: the worker's runtime step;")
    out.append("head extra: the head's runtime step beyond its own start (docker start, smoke completion)")
    return out


if __name__ == "__main__":
    main()
