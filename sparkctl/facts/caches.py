"""The persistent kernel cache on a node: does it exist, and does it hold compiled graphs?

vLLM writes torch.compile artefacts to `<cache root>/torch_compile_cache/<hash>/rank_<r>_<dp>/<prefix>/`
(vllm-interface.md), and the index `vllm_compile_cache.py` in the prefix directory last, so a hash
without an index is an interrupted compile (a miss). The hash covers vLLM version, model, cache,
parallel and scheduler config and VLLM_* env: only vLLM can compute it, so doctor reports which
hashes are complete and relates them to the last applied config.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

from sparkctl.facts.base import Reading, fact, host_fields

if TYPE_CHECKING:
    from sparkctl.facts.host import HostFacts

COMPILE_DIR = "torch_compile_cache"
CUDA_DIR = "cuda_cache"  # launch.CUDA_CACHE_DIR: the CUDA driver's JIT cache (CUDA_CACHE_PATH)
EXTENSIONS_DIR = "torch_extensions"  # launch.TORCH_EXTENSIONS_DIR
AOT_DIR = "torch_aot_compile"
INDEX = "vllm_compile_cache.py"


def cache_probe(host_path: str) -> str:
    p = shlex.quote(host_path)
    c = shlex.quote(f"{host_path}/{COMPILE_DIR}")
    return (
        f"if [ -d {p} ]; then echo present; elif [ -e {p} ]; then echo not-a-directory; exit 0; else echo missing; exit 0; fi; "
        f"[ -d {c} ] && cd {c} && {{ find . -mindepth 1 -maxdepth 1 -type d | sed 's/^/d /'; "
        f"find . -mindepth 4 -maxdepth 4 -name {INDEX} | sed 's/^/i /'; }} | head -n 1000; "
        # the CUDA driver's JIT cache and torch extensions on the volume (launch.cache_env): KiB used
        f'for d in {CUDA_DIR} {EXTENSIONS_DIR}; do [ -d {p}/$d ] && echo "k $d $(du -sk {p}/$d | cut -f1)"; done; true'
    )


@dataclass(frozen=True)
class CacheFacts:
    present: bool
    hashes: tuple[str, ...] = ()  # compile hash directories (excluding AOT)
    complete: dict[str, tuple[str, ...]] = field(default_factory=dict)  # hash -> ranks with an index
    not_a_directory: bool = False  # the path exists as something else (a file): mkdir cannot help
    kib: dict[str, int] = field(default_factory=dict)  # cuda_cache / torch_extensions -> KiB on the volume

    @property
    def warm_hashes(self) -> list[str]:
        return sorted(self.complete)

    @property
    def partial_hashes(self) -> list[str]:
        return sorted(h for h in self.hashes if h not in self.complete)


def parse_cache(rc: int, text: str) -> CacheFacts:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines or lines[0] != "present":
        return CacheFacts(present=False, not_a_directory=bool(lines) and lines[0] == "not-a-directory")
    hashes: list[str] = []
    complete: dict[str, set[str]] = {}
    kib: dict[str, int] = {}
    for ln in lines[1:]:
        kind, _, path = ln.partition(" ")
        if kind == "k":
            name, _, size = path.partition(" ")
            if size.strip().isdigit():
                kib[name] = int(size)
            continue
        parts = path.removeprefix("./").split("/")
        if not parts or parts[0] in ("", AOT_DIR):
            continue
        if kind == "d":
            hashes.append(parts[0])
        elif kind == "i" and len(parts) >= 2:
            complete.setdefault(parts[0], set()).add(parts[1])
    return CacheFacts(True, tuple(sorted(hashes)), {h: tuple(sorted(r)) for h, r in complete.items()}, kib=kib)


@host_fields
class CacheFields:
    """The HostFacts attributes this module's facts fill (a host where one was not read keeps the default)."""

    cache: Optional[CacheFacts] = None  # None: no runtime container here, or not read


# --- the facts (facts/base.py) ---------------------------------------------------------------


def _cache_probe(t) -> str | None:
    from sparkctl.facts.docker import host_images

    # only where a runtime container runs (the cache volume is mounted into it)
    return cache_probe(t.inventory.caches.host_path) if host_images(t) else None


@fact("cache", _cache_probe)
def _cache(f: HostFacts, r: Reading) -> None:
    f.cache = parse_cache(r.rc, r.out)
