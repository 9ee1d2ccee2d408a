"""The gateway's code as sparkctl ships it to the head: the `sparkctl.gateway` package from this
installation (wheel or checkout), the names it shares with its launch (`sparkctl.launch.gateway`)
and the stream watch it shares with sparkctl's own first-token check (`sparkctl.sse`), nothing
else of sparkctl (`package_files`). Content-addressed: the directory on the head is named by the
hash of the files (`files_hash`), so the container's launch (and its config hash) names the
exact code it runs, a sparkctl upgrade that changes the gateway restarts it, and a rollback finds
its own version still there."""

from __future__ import annotations

import functools

from sparkctl.launch.gateway import CODE_ROOT


@functools.lru_cache(maxsize=None)
def package_files(packages: tuple[str, ...], top_init: bytes) -> dict[str, bytes]:
    """Relative path -> content of every .py file of sparkctl.<package> for each package, in a stable
    order, below a `sparkctl/__init__.py` of `top_init` (the shipped code imports only these packages).
    An entry `package/module.py` ships that one module and its package's `__init__.py` (`module.py`:
    a module of sparkctl's top level)."""
    from importlib import resources

    out = {"sparkctl/__init__.py": top_init}
    top = resources.files("sparkctl")
    for name in packages:
        if name.endswith(".py"):
            package = name.rpartition("/")[0]
            for rel in ([f"{package}/__init__.py"] if package else []) + [name]:
                out[f"sparkctl/{rel}"] = top.joinpath(rel).read_bytes()
            continue
        pkg = resources.files(f"sparkctl.{name}")
        for entry in sorted(pkg.iterdir(), key=lambda e: e.name):
            if entry.is_file() and entry.name.endswith(".py"):
                out[f"sparkctl/{name}/{entry.name}"] = entry.read_bytes()
    return out


@functools.lru_cache(maxsize=None)
def files_hash(packages: tuple[str, ...], top_init: bytes) -> str:
    """The name of their directory: a hash of every path and content, so a changed file is a new directory."""
    import hashlib

    h = hashlib.sha256()
    for rel, data in package_files(packages, top_init).items():
        h.update(f"{rel}\n{len(data)}\n".encode())
        h.update(data)
    return h.hexdigest()[:16]


# the package's top level: the gateway imports `sparkctl.gateway.*`, `sparkctl.launch.gateway` and
# `sparkctl.sse` only, so an empty `sparkctl` package above them is all it needs
TOP_INIT = b'"""sparkctl\'s gateway, shipped to the head by sparkctl (only sparkctl.gateway is here)."""\n'
PACKAGES = ("gateway", "launch/gateway.py", "sse.py")


def files() -> dict[str, bytes]:
    """Relative path -> content of every file the gateway needs, in a stable order."""
    return package_files(PACKAGES, TOP_INIT)


def code_hash() -> str:
    return files_hash(PACKAGES, TOP_INIT)


def directory() -> str:
    """Where this code lives on the head."""
    return f"{CODE_ROOT}/{code_hash()}"
