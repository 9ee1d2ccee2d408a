"""The fleet door's code as sparkctl ships it to the door's host: the `sparkctl.fleetdoor` package
and the `sparkctl.gateway` modules it builds on (pass-through headers, the OpenAI-shaped 503, the
admin socket's client), nothing else of sparkctl. Content-addressed like the gateway's code
(runtime/gateway_code.py): the directory is named by the files' hash, so the container's launch
names the exact code it runs and a sparkctl whose door code changed restarts it."""

from __future__ import annotations

from sparkctl.fleetdoor.placement import CODE_ROOT
from sparkctl.runtime.code_ship import COMPLETE, files_hash, package_files

__all__ = ["COMPLETE", "files", "code_hash", "directory"]

TOP_INIT = b'"""sparkctl\'s fleet door, shipped by sparkctl (only sparkctl.fleetdoor and sparkctl.gateway are here)."""\n'
PACKAGES = ("fleetdoor", "gateway")


def files() -> dict[str, bytes]:
    """Relative path -> content of every file the door needs, in a stable order."""
    return package_files(PACKAGES, TOP_INIT)


def code_hash() -> str:
    return files_hash(PACKAGES, TOP_INIT)


def directory() -> str:
    return f"{CODE_ROOT}/{code_hash()}"
