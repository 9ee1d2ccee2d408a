"""A checkpoint's manifest: its source, the version placed, and every file's size and digest.

From the hub (weights/hub.py: each LFS file's sha256, the other files' git blob ids) or, for a
folder on the download host (`weights.directory`), from that folder's SHA256SUMS and its files'
sizes. Every copy on every node is verified against it before it is moved into place.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkctl.errors import SparkctlError
from sparkctl.facts.weights import SUMS, ManifestFile, SourceFolder


@dataclass(frozen=True)
class Manifest:
    repo: str  # the hub repo, or `host:folder` for a folder source
    revision: str
    commit: str  # the hub's commit, or the SHA256SUMS text's sha256: which version of the files
    files: dict[str, ManifestFile]

    @property
    def bytes(self) -> int:
        return sum(m.size for m in self.files.values())


class SourceError(SparkctlError):
    """The folder source cannot give a manifest: absent, no SHA256SUMS, a listed file missing."""


def folder_manifest(host: str, source: SourceFolder) -> Manifest:
    """The manifest of a folder source. Raises SourceError naming the folder and the fix."""
    where = f"weights.directory {source.directory} on {host}"
    make_sums = f"`cd {source.directory} && find . -type f ! -name {SUMS} -printf '%P\\0' | xargs -0 sha256sum > {SUMS}`"
    if not source.present:
        raise SourceError(f"{where} does not exist", fix="copy the checkpoint there, or fix weights.directory")
    if source.sums is None:
        raise SourceError(
            f"{where} has no {SUMS}: sparkctl verifies every copy against it",
            fix=f"write it once on {host} (from a copy you trust): {make_sums}",
        )
    missing = sorted(n for n in source.sums if n not in source.files)
    if missing:
        raise SourceError(
            f"{where}: {SUMS} names {len(missing)} file(s) the folder does not hold: {', '.join(missing[:3])}",
            fix=f"put them back, or write {SUMS} again from the files there: {make_sums}",
        )
    if not source.sums:
        raise SourceError(f"{where}: {SUMS} lists no file", fix=f"write it from the checkpoint's files: {make_sums}")
    files = {n: ManifestFile(source.files[n], sha256=digest) for n, digest in source.sums.items()}
    return Manifest(f"{host}:{source.directory}", SUMS, source.sums_digest, files)
