"""The gateway's code as sparkctl ships it to the head: the `sparkctl.gateway` package from this
installation (wheel or checkout), nothing else of sparkctl. Content-addressed: the directory on the
head is named by the hash of the files, so the container's launch (and its config hash) names the
exact code it runs, a sparkctl upgrade that changes the gateway restarts it, and a rollback finds
its own version still there."""

from __future__ import annotations

from sparkctl.runtime.code_ship import COMPLETE, files_hash, package_files

__all__ = ["COMPLETE", "files", "code_hash", "directory"]

# the package's top level: the gateway imports `sparkctl.gateway.*` only (relative imports), so
# an empty `sparkctl` package above it is all it needs
TOP_INIT = b'"""sparkctl\'s gateway, shipped to the head by sparkctl (only sparkctl.gateway is here)."""\n'
PACKAGES = ("gateway",)


def files() -> dict[str, bytes]:
    """Relative path -> content of every file the gateway needs, in a stable order."""
    return package_files(PACKAGES, TOP_INIT)


def code_hash() -> str:
    return files_hash(PACKAGES, TOP_INIT)


def directory() -> str:
    """Where this code lives on the head."""
    from sparkctl.gateway.placement import CODE_ROOT

    return f"{CODE_ROOT}/{code_hash()}"
