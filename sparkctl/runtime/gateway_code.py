"""The gateway's code as sparkctl ships it to the head: the `sparkctl.gateway` package from this
installation (wheel or checkout), nothing else of sparkctl. Content-addressed: the directory on the
head is named by the hash of the files, so the container's launch (and its config hash) names the
exact code it runs, a sparkctl upgrade that changes the gateway restarts it, and a rollback finds
its own version still there."""

from __future__ import annotations

import functools
import hashlib

# the package's top level: the gateway imports `sparkctl.gateway.*` only (relative imports), so
# an empty `sparkctl` package above it is all it needs
TOP_INIT = b'"""sparkctl\'s gateway, shipped to the head by sparkctl (only sparkctl.gateway is here)."""\n'
COMPLETE = ".complete"  # written last: a directory without it is a copy that was cut off


@functools.lru_cache(maxsize=1)
def files() -> dict[str, bytes]:
    """Relative path -> content of every file the gateway needs, in a stable order."""
    from importlib import resources

    pkg = resources.files("sparkctl.gateway")
    out = {"sparkctl/__init__.py": TOP_INIT}
    for entry in sorted(pkg.iterdir(), key=lambda e: e.name):
        if entry.is_file() and entry.name.endswith(".py"):
            out[f"sparkctl/gateway/{entry.name}"] = entry.read_bytes()
    return out


@functools.lru_cache(maxsize=1)
def code_hash() -> str:
    h = hashlib.sha256()
    for rel, data in files().items():
        h.update(f"{rel}\n{len(data)}\n".encode())
        h.update(data)
    return h.hexdigest()[:16]


def directory() -> str:
    """Where this code lives on the head."""
    from sparkctl.gateway.placement import CODE_ROOT

    return f"{CODE_ROOT}/{code_hash()}"
