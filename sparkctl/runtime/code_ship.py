"""Ship a tree of files (the gateway's code, the fleet door's) to a content-addressed directory on
a host: one tarball over SFTP, unpacked beside its final place and renamed into it, so a copy cut
off half-way is never taken for the code (launch/names.py SHIPPED_COMPLETE is written last).

What the gateway's tree holds and the hash that names its directory: launch/gateway_code.py.
"""

from __future__ import annotations

from sparkctl.errors import HostError
from sparkctl.launch.names import SHIPPED_COMPLETE


def ship(session, host: str, files: dict[str, bytes], final: str, root: str, what: str) -> None:
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
        f"touch {q(part)}/{SHIPPED_COMPLETE} && rm -rf {q(final)} && mv {q(part)} {q(final)}; rc=$?; "
        f"rm -f {q(tar_path)}; exit $rc"
    )
    if not r.ok:
        raise HostError(
            f"{host}: cannot unpack {what} in {final}: {r.stderr.strip()}", fix=f"check the disk and permissions on {host}"
        )
