"""The runtime's log lines an operator greps for (vllm-interface.md, seeds 000/002), found on the host.

The scan runs on the host (awk over `docker logs`), so only matching lines cross the network:
a container that has run for weeks can have gigabytes of log. Startup lines (KV pool size, MoE
backend) are kept from the start, bad signs are capped per kind, the newest speculative decoding
line is kept. `classify` turns the lines into facts the checks read.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Optional

# Lower-case substrings the host-side awk keeps (each at most PER_KIND times).
# Order matters: a line is kept under the first kind it matches ("Using 'x' ... MoE backend out of
# potential backends: [... 'marlin' ...]" is a backend line, not a Marlin fallback).
KINDS = {
    "moe_backend": "moe backend",
    "marlin": "marlin",
    "device_assert": "device-side assert triggered",
    "engine_fatal": "enginecore encountered a fatal error",
    "engine_start": "enginecore failed to start",
    "worker_died": "died unexpectedly",
    "kv_pool": "gpu kv cache size",
    "ready": "starting vllm server",
    "compile": "compil",
}
PER_KIND = 5
SPEC_MARK = "SpecDecoding metrics"


def awk_program() -> str:
    """The host-side filter: matching lines (at most PER_KIND per kind), then the newest spec-decode line."""
    conds = "\n".join(
        f'  if (index(l, "{needle}") && c["{kind}"]++ < {PER_KIND}) {{ print; next }}' for kind, needle in KINDS.items()
    )
    return (
        "{ if (index($0, \"" + SPEC_MARK + "\")) { spec = $0; next }\n"
        "  l = tolower($0)\n" + conds + "\n}\n"
        "END { if (spec != \"\") print spec }"
    )


def scan_command(container_ids: str = "$ids") -> str:
    """Shell: for each container id in $ids print '@@ctr <id>' and its matching log lines."""
    return f'for c in {container_ids}; do echo "@@ctr $c"; docker logs "$c" 2>&1 | awk {shlex.quote(awk_program())}; done'


_KV = re.compile(r"GPU KV cache size:\s*([\d,]+)\s*tokens")
_ACCEPT = re.compile(r"Mean acceptance length:\s*([\d.]+)")
_BACKEND = re.compile(r"Using '([\w-]+)'.*MoE backend")


@dataclass
class LogFacts:
    """What one container's log says."""

    container: str
    kv_pool_tokens: Optional[int] = None
    moe_backend: Optional[str] = None
    ready: bool = False
    spec_mean_acceptance: Optional[float] = None
    compile_cache_hit: bool = False  # "Directly load the compiled graph(s) ... from the cache"
    compile_cache_miss: bool = False  # "Compiling a graph for compile range ..."
    marlin: list[str] = field(default_factory=list)
    device_assert: list[str] = field(default_factory=list)
    engine_fatal: list[str] = field(default_factory=list)
    worker_died: list[str] = field(default_factory=list)

    @property
    def fatal(self) -> list[str]:
        return self.device_assert + self.worker_died + self.engine_fatal


def parse_scan(text: str) -> dict[str, LogFacts]:
    """Output of `scan_command` -> LogFacts per container id."""
    out: dict[str, LogFacts] = {}
    cur: Optional[LogFacts] = None
    for raw in text.splitlines():
        line = raw.rstrip()
        if line.startswith("@@ctr "):
            cid = line.split(None, 1)[1].strip()
            cur = out.setdefault(cid, LogFacts(cid))
            continue
        if cur is None or not line.strip():
            continue
        classify(cur, line)
    return out


def classify(facts: LogFacts, line: str) -> None:
    low = line.lower()
    if SPEC_MARK in line:
        m = _ACCEPT.search(line)
        if m:
            facts.spec_mean_acceptance = float(m.group(1))
        return
    if m := _KV.search(line):
        facts.kv_pool_tokens = int(m.group(1).replace(",", ""))
    if m := _BACKEND.search(line):
        facts.moe_backend = m.group(1).replace("-", "_")
    if KINDS["ready"] in low:
        facts.ready = True
    if "leveraging the marlin kernel" in low or ("marlin" in low and "fall" in low):
        facts.marlin.append(line.strip())
    if "directly load the compiled graph" in low:
        facts.compile_cache_hit = True
    elif "compiling a graph for" in low:
        facts.compile_cache_miss = True
    if KINDS["device_assert"] in low:
        facts.device_assert.append(line.strip())
    if KINDS["engine_fatal"] in low or KINDS["engine_start"] in low:
        facts.engine_fatal.append(line.strip())
    if KINDS["worker_died"] in low:
        facts.worker_died.append(line.strip())
