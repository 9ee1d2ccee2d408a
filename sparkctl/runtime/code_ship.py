"""Ship a tree of files (the gateway's code, the fleet door's) to a content-addressed directory on
a host: one tarball over SFTP, unpacked beside its final place and renamed into it, so a copy cut
off half-way is never taken for the code (the marker `complete` is written last).

`package_files` and `files_hash` say what is shipped: some packages of sparkctl (wheel or
checkout) under an empty `sparkctl` top level, and the hash that names their directory.
"""

from __future__ import annotations

import functools

from sparkctl.errors import HostError

COMPLETE = ".complete"  # written last: a directory without it is a copy that was cut off


@functools.lru_cache(maxsize=None)
def package_files(packages: tuple[str, ...], top_init: bytes) -> dict[str, bytes]:
    """Relative path -> content of every .py file of sparkctl.<package> for each package, in a stable
    order, below a `sparkctl/__init__.py` of `top_init` (the shipped code imports only these packages)."""
    from importlib import resources

    out = {"sparkctl/__init__.py": top_init}
    for name in packages:
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


def ship(session, host: str, files: dict[str, bytes], final: str, root: str, complete: str, what: str) -> None:
    import io
    import shlex
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for rel, data in files.items():
            info = tarfile.TarInfo(rel)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    r = session.run(["mkdir", "-p", "-m", "0755", root])
    if not r.ok:
        raise HostError(f"{host}: cannot create {root}: {r.stderr.strip()}", fix="check the disk and permissions")
    tar_path = f"{final}.tar"
    session.put_bytes(buf.getvalue(), tar_path)
    part, q = f"{final}.partial", shlex.quote
    r = session.run(
        f"rm -rf {q(part)} && mkdir -p {q(part)} && tar -xf {q(tar_path)} -C {q(part)} && "
        f"touch {q(part)}/{complete} && rm -rf {q(final)} && mv {q(part)} {q(final)}; rc=$?; "
        f"rm -f {q(tar_path)}; exit $rc"
    )
    if not r.ok:
        raise HostError(
            f"{host}: cannot unpack {what} in {final}: {r.stderr.strip()}", fix=f"check the disk and permissions on {host}"
        )
