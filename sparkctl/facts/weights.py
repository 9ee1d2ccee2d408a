"""A node's copy of a checkpoint: which files it holds, what sparkctl verified, what changed since.

`sparkctl up` (steps/weights.py) places a checkpoint's files at its path on a node and writes two
records beside them once every file's digest matched the hub's manifest:
- `.sparkctl-weights.json`: the source (repo, revision as the inventory says it, the commit) and
  the manifest it verified against (file -> size and the hub's digest: the LFS sha256, or the git
  blob id of a small file);
- `.sparkctl-weights.stat`: `size ctime name` of every file as verified. Any write moves a file's
  ctime (a user cannot set it back), so a file whose line no longer matches is re-hashed by the
  `weights_hashes` fact; the others keep the digest verified at placement. A no-op `up` hashes
  nothing: hashing ~167 GB takes minutes.
The probe also reads the staging folder beside the path (a copy or download under way or cut:
what is there is resumed), the previous version kept beside it (a change of repo or revision moves
the old copy there whole, so a rollback needs no download), symbolic links (a copied hub cache's
links may point nowhere) and the free bytes of the filesystem that holds the path.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

from sparkctl.facts.base import Reading, Target, fact, host_fields
from sparkctl.facts.probe import mark_recorded

if TYPE_CHECKING:
    from sparkctl.facts.host import HostFacts
    from sparkctl.placement import Checkpoint

RECORD = ".sparkctl-weights.json"
STAT = ".sparkctl-weights.stat"
HF_METADATA = ".cache"  # `hf download --local-dir` keeps its resume metadata here
GIT_HASHED_BELOW = 16 << 20  # files the hub keeps in git (not LFS) are small: their digest is a git blob id
# the checkpoint's own files, run inside its folder: not sparkctl's records, not the hub client's metadata
_FILES = f"find . \\( -path ./{HF_METADATA} -prune \\) -o -type f ! -name '.sparkctl-weights*' -printf '%s %C@ %P\\n'"


def staging_path(path: str) -> str:
    """Where a copy is built before it is moved into place: beside the path, on its filesystem, so
    the final move is a rename; hidden, so nothing mistakes it for a model."""
    parent, _, name = path.rstrip("/").rpartition("/")
    return f"{parent}/.{name}.sparkctl-staging"


def previous_path(path: str) -> str:
    """Where the version a change of repo or revision replaced at `path` is kept, whole, with its
    records: beside the path, on its filesystem, so putting it back is links and renames."""
    parent, _, name = path.rstrip("/").rpartition("/")
    return f"{parent}/.{name}.sparkctl-previous"


def weights_probe(path: str) -> str:
    p, s, v = shlex.quote(path), shlex.quote(staging_path(path)), shlex.quote(previous_path(path))
    return (
        f"echo @@dir; if [ -d {p} ]; then echo present; (cd {p} && {_FILES} | head -n 20000); "
        f"elif [ -e {p} ]; then echo not-a-directory; fi; "
        f"echo @@links; [ -d {p} ] && find {p} -type l -printf '%P -> %l\\n' | head -n 20; "
        f"echo @@record; cat {p}/{RECORD} 2>/dev/null; "
        f"echo @@staging; [ -d {s} ] && (cd {s} && {_FILES} | head -n 20000); "
        f"echo @@previous; [ -d {v} ] && (cd {v} && {_FILES} | head -n 20000); "
        f"echo @@previous_record; cat {v}/{RECORD} 2>/dev/null; echo @@previous_stat; cat {v}/{STAT} 2>/dev/null; "
        # the free bytes where the files will land: the path, else its nearest existing parent
        f'echo @@free; d={p}; while [ ! -d "$d" ]; do d=$(dirname "$d"); done; df -B1 --output=avail "$d" | tail -n 1; true'
    )


def hash_command(folder: str, only_changed: bool = True, names: Optional[list[str]] = None) -> str:
    """Shell: `s SHA256 name` for each file (and `g BLOBID name` for a small one, the hub's digest of
    a file kept in git), inside `folder`. `only_changed`: a file whose `size ctime name` is in the
    stat record prints `unchanged name` instead. `names`: only these files (after a copy)."""
    f = shlex.quote(folder)
    listing = (
        f"printf '%s\\n' {' '.join(shlex.quote(n) for n in names)} | while read -r name; do "
        f'[ -f "$name" ] && stat -c "%s %Z.0 %n" -- "$name"; done'
        if names is not None
        else f"{_FILES} | sort -k3"
    )
    each = (
        f"{listing} | {mark_recorded(STAT)} | while read -r seen size ctime name; do "
        'if [ "$seen" = u ]; then echo "unchanged $name"; continue; fi; '
        if only_changed
        else f"{listing} | while read -r size ctime name; do "
    )
    return (
        f"cd {f} && {each}" + 'echo "s $(sha256sum < "$name" | cut -c1-64) $name"; '
        f'if [ "$size" -lt {GIT_HASHED_BELOW} ]; then '
        # the git blob id: sha1 of "blob <size>\\0" + the bytes (what the hub lists for a non-LFS file)
        'echo "g $({ printf "blob %s\\000" "$size"; cat -- "$name"; } | sha1sum | cut -c1-40) $name"; fi; done'
    )


def stat_command(folder: str, only_stdin: bool = False) -> str:
    """Shell: the `size ctime name` record of every file, written after they were verified.
    `only_stdin`: of the files named on stdin (a line each) alone: the others are not vouched for."""
    f = shlex.quote(folder)
    if not only_stdin:
        return f"cd {f} && {_FILES} | sort -k3 > {STAT}.tmp && mv {STAT}.tmp {STAT}"
    pick = "awk 'NR == FNR { keep[$0] = 1; next } { n = $0; sub(/^[^ ]* [^ ]* /, \"\", n); if (n in keep) print }'"
    return (
        f"cd {f} && cat > {STAT}.names && {_FILES} | sort -k3 | {pick} {STAT}.names - > {STAT}.tmp "
        f"&& mv {STAT}.tmp {STAT} && rm -f {STAT}.names"
    )


@dataclass(frozen=True)
class ManifestFile:
    """One file of a checkpoint as the hub lists it: its size and the digest the hub gives for it."""

    size: int
    sha256: Optional[str] = None  # LFS files: the hub's sha256 of the content
    git: Optional[str] = None  # files kept in git: the blob id

    def matches(self, digests: "FileDigests") -> bool:
        if self.sha256:
            return digests.sha256 == self.sha256
        return bool(self.git) and digests.git == self.git

    def comparable(self, digests: "FileDigests") -> bool:
        """`digests` hold the kind this file is listed by (a record of another source may hold only a
        git blob id where a folder's SHA256SUMS lists a sha256): else it must be hashed again."""
        return bool(self.sha256 and digests.sha256) or bool(not self.sha256 and self.git and digests.git)

    def to_dict(self) -> dict:
        return {"size": self.size, **({"sha256": self.sha256} if self.sha256 else {}), **({"git": self.git} if self.git else {})}


@dataclass(frozen=True)
class FileDigests:
    sha256: Optional[str] = None
    git: Optional[str] = None
    rehashed: bool = True  # hashed in this run (False: the digest verified at placement, file unchanged since)


@dataclass(frozen=True)
class WeightsRecord:
    """What `up` verified at this path: the source and the manifest (.sparkctl-weights.json)."""

    repo: str
    revision: str  # as the inventory said it (a branch stays a branch)
    commit: str
    files: dict[str, ManifestFile]
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()

    def names(self, ckpt: Checkpoint) -> bool:
        """The record is of this checkpoint: the inventory's repo, its revision (or that revision's
        commit) and the same file patterns."""
        return (
            self.repo == ckpt.repo
            and ckpt.revision in (self.revision, self.commit)
            and (self.include, self.exclude) == (tuple(ckpt.include), tuple(ckpt.exclude))
        )

    def to_json(self) -> str:
        doc = {
            "repo": self.repo,
            "revision": self.revision,
            "commit": self.commit,
            "include": list(self.include),
            "exclude": list(self.exclude),
            "files": {n: m.to_dict() for n, m in sorted(self.files.items())},
        }
        return json.dumps(doc, indent=1) + "\n"


def parse_record(text: str) -> Optional[WeightsRecord]:
    try:
        doc = json.loads(text)
        files = {str(n): ManifestFile(int(m["size"]), m.get("sha256"), m.get("git")) for n, m in doc["files"].items()}
        patterns = tuple(str(p) for p in doc.get("include", ())), tuple(str(p) for p in doc.get("exclude", ()))
        return WeightsRecord(str(doc["repo"]), str(doc["revision"]), str(doc["commit"]), files, *patterns)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None  # absent, cut or hand-edited: nothing is taken as verified


@dataclass(frozen=True)
class PreviousCopy:
    """The version kept beside a path since a change of repo or revision (previous_path)."""

    record: Optional[WeightsRecord]  # what it was verified as
    files: dict[str, int] = field(default_factory=dict)  # name -> size
    unchanged: frozenset[str] = frozenset()  # files whose `size ctime name` is still as its stat record holds

    def holds(self, name: str, wanted: ManifestFile) -> bool:
        """`name` is here as verified, with the digest `wanted` lists: it can be linked, not fetched."""
        rec = self.record
        return (
            rec is not None and name in self.unchanged and rec.files.get(name) == wanted and self.files.get(name) == wanted.size
        )


@dataclass(frozen=True)
class WeightsCopy:
    """One checkpoint path on one node."""

    path: str
    present: bool = False
    not_a_directory: bool = False
    files: dict[str, int] = field(default_factory=dict)  # name -> size
    links: tuple[str, ...] = ()  # `name -> target` of symbolic links inside
    record: Optional[WeightsRecord] = None
    staging: dict[str, int] = field(default_factory=dict)  # name -> size in the staging folder
    free_bytes: Optional[int] = None
    previous: Optional[PreviousCopy] = None

    @property
    def bytes(self) -> int:
        return sum(self.files.values())


def _listing(text: str) -> dict[str, int]:
    out = {}
    for line in text.splitlines():
        size, _, rest = line.partition(" ")
        _, _, name = rest.partition(" ")
        if size.isdigit() and name:
            out[name] = int(size)
    return out


def parse_weights(path: str, text: str) -> WeightsCopy:
    from sparkctl.facts.probe import chunks as split

    chunks = split(text, ("dir", "links", "record", "staging", "previous", "previous_record", "previous_stat", "free"))
    head, _, listing = chunks["dir"].partition("\n")
    free = chunks["free"].strip().splitlines()
    previous = None
    if chunks["previous"].strip():
        same = set(chunks["previous"].splitlines()) & set(chunks["previous_stat"].splitlines())
        previous = PreviousCopy(
            record=parse_record(chunks["previous_record"]) if chunks["previous_record"].strip() else None,
            files=_listing(chunks["previous"]),
            unchanged=frozenset(ln.split(" ", 2)[2] for ln in same if ln.count(" ") >= 2),
        )
    return WeightsCopy(
        path=path,
        present=head.strip() == "present",
        not_a_directory=head.strip() == "not-a-directory",
        files=_listing(listing),
        links=tuple(ln.strip() for ln in chunks["links"].splitlines() if ln.strip()),
        record=parse_record(chunks["record"]) if chunks["record"].strip() else None,
        staging=_listing(chunks["staging"]),
        free_bytes=int(free[-1]) if free and free[-1].strip().isdigit() else None,
        previous=previous,
    )


SUMS = "SHA256SUMS"  # a folder source's list of files and digests (`sha256sum` output)


def source_probe(directory: str) -> str:
    """Shell: a folder source (weights.directory) on the download host: its files' sizes and its SHA256SUMS."""
    d = shlex.quote(directory)
    return (
        f"echo @@dir; if [ -d {d} ]; then echo present; (cd {d} && find . -type f ! -name {SUMS} -printf '%s %P\\n' "
        f"| head -n 20000); fi; echo @@sums; cat {d}/{SUMS} 2>/dev/null; true"
    )


@dataclass(frozen=True)
class SourceFolder:
    """A folder that holds a checkpoint on the download host, and what its SHA256SUMS says of it."""

    directory: str
    present: bool = False
    files: dict[str, int] = field(default_factory=dict)  # name -> size
    sums: Optional[dict[str, str]] = None  # name -> sha256 (None: no SHA256SUMS)
    sums_digest: str = ""  # sha256 of the SHA256SUMS text: which version of the folder it lists


def parse_sums(text: str) -> dict[str, str]:
    """`sha256sum` output (`DIGEST  name`, or `DIGEST *name` in binary mode) -> {name: digest}."""
    out = {}
    for line in text.splitlines():
        digest, _, name = line.strip().partition(" ")
        name = name.lstrip(" *").removeprefix("./")
        if len(digest) == 64 and all(c in "0123456789abcdefABCDEF" for c in digest) and name:
            out[name] = digest.lower()
    return out


def parse_source(directory: str, text: str) -> SourceFolder:
    import hashlib

    from sparkctl.facts.probe import chunks as split

    chunks = split(text, ("dir", "sums"))
    head, _, listing = chunks["dir"].partition("\n")
    sums = chunks["sums"]
    return SourceFolder(
        directory=directory,
        present=head.strip() == "present",
        files={name: size for size, name in (_size_and_name(ln) for ln in listing.splitlines()) if name},
        sums=parse_sums(sums) if sums.strip() else None,
        sums_digest=hashlib.sha256(sums.encode()).hexdigest() if sums.strip() else "",
    )


def _size_and_name(line: str) -> tuple[int, str]:
    size, _, name = line.partition(" ")
    return (int(size), name) if size.isdigit() else (0, "")


def parse_hashes(text: str, record: Optional[WeightsRecord] = None) -> dict[str, FileDigests]:
    """`hash_command` output -> {name: digests}: the re-hashed files, and for unchanged ones the
    digest the record verified at placement."""
    sha: dict[str, str] = {}
    git: dict[str, str] = {}
    out: dict[str, FileDigests] = {}
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "unchanged":
            m = record.files.get(rest) if record else None
            if m is not None:
                out[rest] = FileDigests(m.sha256, m.git, rehashed=False)
            continue
        digest, _, name = rest.partition(" ")
        if kind == "s" and len(digest) == 64 and name:
            sha[name] = digest
        elif kind == "g" and len(digest) == 40 and name:
            git[name] = digest
    for name in sha.keys() | git.keys():
        out[name] = FileDigests(sha.get(name), git.get(name))
    return out


@host_fields
class WeightsFields:
    """The HostFacts attributes this module's facts fill (a host where one was not read keeps the default)."""

    weights_source: Optional[SourceFolder] = None  # the folder source on the download host
    weights: dict[str, WeightsCopy] = field(default_factory=dict)  # path -> WeightsCopy
    weights_hashes: dict[str, dict[str, FileDigests]] = field(default_factory=dict)  # path -> {file: digests}


# --- the facts (facts/base.py) ---------------------------------------------------------------


def paths_here(t: Target) -> list[str]:
    """The checkpoint folders this host must hold: runtime.model on every engine node, the
    drafter's on its host (placement.py), whether or not sparkctl places them."""
    from sparkctl.placement import model_folders

    return [path for host, path in model_folders(t.inventory) if host == t.name]


def _per_path(t: Target, command, placed_only: bool = False) -> Optional[dict[int, str]]:
    # digests only where sparkctl placed the files (`weights` set): they are compared to its record
    if placed_only and t.inventory.weights is None:
        return None
    paths = paths_here(t)
    return {i: command(p) for i, p in enumerate(paths)} or None


def _source_here(t: Target) -> Optional[str]:
    """The folder source (weights.directory) when this host is the download host that holds it."""
    from sparkctl.placement import download_host

    w = t.inventory.weights
    return source_probe(w.directory) if w is not None and w.directory and download_host(t.inventory) == t.name else None


@fact("weights_source", _source_here)
def _weights_source(f: HostFacts, r: Reading) -> None:
    w = r.target.inventory.weights
    assert w is not None and w.directory is not None  # _source_here probes only then
    f.weights_source = parse_source(w.directory, r.out)


@fact("weights", lambda t: _per_path(t, weights_probe))
def _weights(f: HostFacts, r: Reading) -> None:  # path -> WeightsCopy
    path = paths_here(r.target)[r.index]
    f.weights[path] = parse_weights(path, r.out)


# every `up`: the files whose size or ctime moved since they were verified; doctor --deep: every file
@fact(
    "weights_hashes",
    lambda t: _per_path(t, hash_command, placed_only=True),
    background=True,
    after=("weights",),
)
def _weights_hashes(f: HostFacts, r: Reading) -> None:  # path -> {file: digests}
    path = paths_here(r.target)[r.index]
    copy = f.weights.get(path)
    if not r.ok and copy is not None and copy.present:
        f.errors[f"weights_hashes {path}"] = r.last_line()
    f.weights_hashes[path] = parse_hashes(r.out, copy.record if copy else None)


@fact(
    "weights_rehash",
    lambda t: _per_path(t, lambda p: hash_command(p, only_changed=False), placed_only=True),
    background=True,
    after=("weights_hashes",),
)  # fills weights_hashes: the --deep reading wins
def _weights_rehash(f: HostFacts, r: Reading) -> None:
    path = paths_here(r.target)[r.index]
    f.weights_hashes[path] = parse_hashes(r.out)
