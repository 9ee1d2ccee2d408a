"""The fleet door's code as sparkctl ships it to the door's host: the `sparkctl.fleetdoor` package
and the `sparkctl.gateway` modules it builds on (pass-through headers, the OpenAI-shaped 503, the
admin socket's client), nothing else of sparkctl. Content-addressed like the gateway's code
(runtime/gateway_code.py): the directory is named by the files' hash, so the container's launch
names the exact code it runs and a sparkctl whose door code changed restarts it."""

from __future__ import annotations

import functools
import hashlib

from sparkctl.fleetdoor.placement import CODE_ROOT

TOP_INIT = b'"""sparkctl\'s fleet door, shipped by sparkctl (only sparkctl.fleetdoor and sparkctl.gateway are here)."""\n'
COMPLETE = ".complete"  # written last: a directory without it is a copy that was cut off
PACKAGES = ("fleetdoor", "gateway")


@functools.lru_cache(maxsize=1)
def files() -> dict[str, bytes]:
    """Relative path -> content of every file the door needs, in a stable order."""
    from importlib import resources

    out = {"sparkctl/__init__.py": TOP_INIT}
    for pkg_name in PACKAGES:
        pkg = resources.files(f"sparkctl.{pkg_name}")
        for entry in sorted(pkg.iterdir(), key=lambda e: e.name):
            if entry.is_file() and entry.name.endswith(".py"):
                out[f"sparkctl/{pkg_name}/{entry.name}"] = entry.read_bytes()
    return out


@functools.lru_cache(maxsize=1)
def code_hash() -> str:
    h = hashlib.sha256()
    for rel, data in files().items():
        h.update(f"{rel}\n{len(data)}\n".encode())
        h.update(data)
    return h.hexdigest()[:16]


def directory() -> str:
    return f"{CODE_ROOT}/{code_hash()}"
