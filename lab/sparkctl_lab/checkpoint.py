"""Model checkpoints for the lab's model hub (hub.py): small, deterministic, real safetensors.

A repo is what a Hugging Face model repo holds: sharded safetensors (8-byte little-endian header
length, a JSON header of dtype/shape/data_offsets per tensor, then the data) with
`model.safetensors.index.json` (or one `model.safetensors`), `config.json`, `generation_config.json`,
the tokenizer files, `.gitattributes`, a README and, for the target, an `original/` folder as Llama
repos have (params.json and a consolidated.00.pth nothing loads: include patterns matter, and fnmatch's
`*` crosses folders, so `*.json` also takes `original/params.json`). The
bytes come from random.Random(seed), so the same specs give the same files, hashes and commit
shas on every machine. A later revision of a repo rewrites exactly one shard (same size, other
bytes): what a reload to a new revision has to fetch.

Generated once into ROOT/<key>/ (CACHE_DIR/hub, kept by `lab down`; key = the specs and
GENERATOR_VERSION): blobs/<sha256> (one file per distinct content, as the hub stores LFS objects)
and manifest.json (per repo: gated, refs, and each revision's commit sha, date, title and files
with size, sha256, git blob id, LFS or not). Stdlib only: the hub runs with `python -S`.

    from sparkctl_lab import checkpoint
    store = checkpoint.ensure(checkpoint.LAB_SPECS)      # generates on a cold cache (~1-2 s)
    store.manifest(checkpoint.TARGET_REPO, "main")       # {path: {"size", "sha256", ...}}
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import random
import shutil
from pathlib import Path
from typing import NamedTuple

GENERATOR_VERSION = "2"  # bump when the files below change: a new key, a new store
KiB, MiB = 1 << 10, 1 << 20
TARGET_REPO = "deepseek-ai/DeepSeek-V4.1-Flash-lab"
DRAFTER_REPO = "sparkctl-lab/drafter-lab"
GATED_REPO = "sparkctl-lab/gated-lab"
# The hub's rule for what goes to LFS: these patterns (the .gitattributes every repo carries), and
# any file of 10 MiB or more (the hub refuses larger plain git blobs).
LFS_PATTERNS = ("*.safetensors", "*.bin", "*.pt", "*.pth", "*.model", "*.gguf")
LFS_MIN_SIZE = 10 * MiB
CHUNK = 4 * MiB  # how much random data is made and written at a time
TENSOR_ALIGN = 32 * KiB  # every shard's data is a multiple of this (8 tensors of whole 256-column rows)
ITEMSIZE = {"BF16": 2, "F16": 2, "F32": 4, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E8M0": 1}
EPOCH = "2026-05-04T09:00:00.000Z"  # the first revision's date; each later one a day after


class RepoSpec(NamedTuple):
    """One repo: id, bytes of tensor data over all shards (rounded up to TENSOR_ALIGN per shard),
    shards (1: a single model.safetensors, no index), revisions (each later one rewrites one shard),
    gated (downloads need an approved token), original (an original/ folder), kind (target |
    drafter: which config.json)."""

    repo_id: str
    weight_bytes: int
    shards: int
    revisions: int = 1
    gated: bool = False
    original: bool = False
    kind: str = "target"


def specs(target_bytes: int = 192 * MiB, drafter_bytes: int = 16 * MiB, gated_bytes: int = 8 * MiB) -> tuple[RepoSpec, ...]:
    """The lab's three repos at the given sizes (tests pass tiny ones)."""
    return (
        RepoSpec(TARGET_REPO, target_bytes, shards=6, revisions=2, original=True),
        RepoSpec(DRAFTER_REPO, drafter_bytes, shards=1, kind="drafter"),
        RepoSpec(GATED_REPO, gated_bytes, shards=2, gated=True),
    )


LAB_SPECS = specs()


def spec_key(repo_specs: tuple[RepoSpec, ...]) -> str:
    text = json.dumps([GENERATOR_VERSION, [list(s) for s in repo_specs]])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    """The pointer file git holds for an LFS object (its git blob id is the file's blobId)."""
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


def is_lfs(path: str, size: int) -> bool:
    from fnmatch import fnmatch

    return size >= LFS_MIN_SIZE or any(fnmatch(path.rsplit("/", 1)[-1], p) for p in LFS_PATTERNS)


def shard_names(spec: RepoSpec) -> list[str]:
    if spec.shards == 1:
        return ["model.safetensors"]
    return [f"model-{i + 1:05d}-of-{spec.shards:05d}.safetensors" for i in range(spec.shards)]


def changed_shard(spec: RepoSpec) -> int:
    """Which shard (0-based) each later revision rewrites."""
    return min(2, spec.shards - 1)


def _shard_bytes(spec: RepoSpec) -> int:
    per = -(-spec.weight_bytes // spec.shards)
    return max(TENSOR_ALIGN, -(-per // TENSOR_ALIGN) * TENSOR_ALIGN)


def _tensors(spec: RepoSpec, shard: int) -> list[tuple[str, str, int]]:
    """(name, dtype, bytes) of one shard's tensors: DeepSeek-style names, NVFP4-style dtypes (packed
    U8 experts with F8 scales, BF16 attention and norms). Fractions of the shard's bytes in 1/8ths."""
    size = _shard_bytes(spec)
    eighth = size // 8
    layer = shard  # one decoder layer per shard
    p = "model.mtp.0" if spec.kind == "drafter" else f"model.layers.{layer}"
    out = [
        (f"{p}.mlp.experts.w13_weight", "U8", 4 * eighth),
        (f"{p}.mlp.experts.w2_weight", "U8", 2 * eighth),
        (f"{p}.mlp.experts.w13_weight_scale", "F8_E4M3", eighth // 2),
        (f"{p}.mlp.experts.w2_weight_scale", "F8_E4M3", eighth // 4),
        (f"{p}.self_attn.wkv_a.weight", "BF16", eighth // 2),
        (f"{p}.self_attn.wo.weight", "BF16", 3 * eighth // 4 - 2 * KiB),
        (f"{p}.input_layernorm.weight", "BF16", KiB),
        (f"{p}.post_attention_layernorm.weight", "BF16", KiB),
    ]
    if shard == 0 and spec.kind == "target":  # the embedding lives in the first shard, the head in the last
        name, dtype, n = out[4]
        out[4] = ("model.embed_tokens.weight", dtype, n)
    if shard == spec.shards - 1 and spec.kind == "target":
        name, dtype, n = out[5]
        out[5] = ("lm_head.weight", dtype, n)
    return out


def _shape(dtype: str, nbytes: int) -> list[int]:
    n = nbytes // ITEMSIZE[dtype]
    return [n // 256, 256] if n % 256 == 0 and n >= 256 else [n]


def safetensors_header(tensors: list[tuple[str, str, int]]) -> bytes:
    """The 8-byte length and the JSON header (padded with spaces to 8 bytes, as safetensors writes it)."""
    meta: dict = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, dtype, n in tensors:
        meta[name] = {"dtype": dtype, "shape": _shape(dtype, n), "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(meta, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text


# ---- the small files ------------------------------------------------------------------------------

GITATTRIBUTES = "".join(f"{p} filter=lfs diff=lfs merge=lfs -text\n" for p in LFS_PATTERNS)


def _config(spec: RepoSpec) -> dict:
    if spec.kind == "drafter":
        return {
            "architectures": ["DeepSeekV4MTPModel"],
            "model_type": "deepseek_v4_mtp",
            "hidden_size": 4096,
            "num_hidden_layers": 1,
            "vocab_size": 129280,
            "torch_dtype": "bfloat16",
            "transformers_version": "5.17.0",
        }
    return {
        "architectures": ["DeepseekV4ForCausalLM"],
        "model_type": "deepseek_v4",
        "hidden_size": 4096,
        "num_hidden_layers": spec.shards,
        "num_attention_heads": 64,
        "n_routed_experts": 256,
        "num_experts_per_tok": 8,
        "vocab_size": 129280,
        "max_position_embeddings": 1048576,
        "torch_dtype": "bfloat16",
        "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16},
        "transformers_version": "5.17.0",
    }


def _small_files(spec: RepoSpec) -> dict[str, bytes]:
    def js(doc) -> bytes:
        return (json.dumps(doc, indent=2) + "\n").encode()

    name = spec.repo_id.split("/")[-1]
    files = {
        ".gitattributes": GITATTRIBUTES.encode(),
        "README.md": f"---\nlicense: mit\nlibrary_name: transformers\n---\n# {name}\n\nA generated sparkctl lab checkpoint.\n".encode(),
        "config.json": js(_config(spec)),
    }
    if spec.kind == "target":
        files["generation_config.json"] = js({"bos_token_id": 0, "eos_token_id": 1, "temperature": 0.6, "top_p": 0.95})
        vocab = {f"<tok{i}>": i for i in range(256)}
        files["tokenizer.json"] = js({"version": "1.0", "model": {"type": "BPE", "vocab": vocab, "merges": []}})
        files["tokenizer_config.json"] = js({"bos_token": "<tok0>", "eos_token": "<tok1>", "model_max_length": 1048576})
    if spec.original:
        files["original/params.json"] = js({"dim": 4096, "n_layers": spec.shards, "vocab_size": 129280})
    return files


# ---- generation -----------------------------------------------------------------------------------


class _Writer:
    """Writes contents into blobs/ by sha256 (content seen before is not written twice)."""

    def __init__(self, blobs: Path):
        self.blobs = blobs
        self.known: dict[str, dict] = {}  # content id -> file record

    def _record(self, path: str, sha256: str, size: int) -> dict:
        lfs = is_lfs(path, size)
        rec = {"size": size, "sha256": sha256, "lfs": lfs}
        if lfs:
            pointer = lfs_pointer(sha256, size)
            rec.update(blob_id=git_blob_sha1(pointer), pointer_size=len(pointer))
        return rec

    def small(self, path: str, data: bytes) -> dict:
        sha = hashlib.sha256(data).hexdigest()
        blob = self.blobs / sha
        if not blob.exists():
            blob.write_bytes(data)
        rec = self._record(path, sha, len(data))
        if not rec["lfs"]:
            rec["blob_id"] = git_blob_sha1(data)
        return rec

    def stream(self, path: str, content_id: str, head: bytes, seed: str, nbytes: int) -> dict:
        """head, then nbytes from random.Random(seed); content_id names it (same id, same bytes)."""
        if content_id in self.known:
            return dict(self.known[content_id])
        rng = random.Random(seed)
        h = hashlib.sha256(head)
        tmp = self.blobs / f".{content_id.replace('/', '_')}.partial"
        with open(tmp, "wb") as f:
            f.write(head)
            left = nbytes
            while left:
                chunk = rng.randbytes(min(CHUNK, left))
                h.update(chunk)
                f.write(chunk)
                left -= len(chunk)
        sha = h.hexdigest()
        tmp.replace(self.blobs / sha)
        rec = self._record(path, sha, len(head) + nbytes)
        self.known[content_id] = rec
        return dict(rec)


def _commit_sha(repo_id: str, files: dict[str, dict], parent: str | None, title: str) -> str:
    tree = "".join(f"{p} {r['blob_id']}\n" for p, r in sorted(files.items()))
    return hashlib.sha1(f"repo {repo_id}\nparent {parent}\n{title}\n{tree}".encode()).hexdigest()


def _date(i: int) -> str:
    return f"2026-05-{4 + i:02d}" + EPOCH[10:]


def _generate_repo(spec: RepoSpec, w: _Writer) -> dict:
    if spec.shards < 1 or spec.revisions < 1 or spec.kind not in ("target", "drafter"):
        raise ValueError(f"bad repo spec {spec}")
    names = shard_names(spec)
    small = {p: w.small(p, d) for p, d in _small_files(spec).items()}
    revisions = []
    parent = None
    params: dict[str, int] = {}
    for rev in range(spec.revisions):
        files = dict(small)
        weight_map, total = {}, 0
        for i, name in enumerate(names):
            tensors = _tensors(spec, i)
            head = safetensors_header(tensors)
            data = sum(n for _, _, n in tensors)
            # a shard keeps its bytes across revisions except the one each later revision rewrites
            version = rev if i == changed_shard(spec) else 0
            seed = f"{spec.repo_id}/{name}/{version}"
            files[name] = w.stream(name, seed, head, seed, data)
            for t, dtype, n in tensors:
                weight_map[t] = name
                total += n
                if rev == 0:
                    params[dtype] = params.get(dtype, 0) + n // ITEMSIZE[dtype]
        if spec.shards > 1:
            index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
            path = "model.safetensors.index.json"
            files[path] = w.small(path, (json.dumps(index, indent=2) + "\n").encode())
        if spec.original:  # the original training checkpoint, as Llama repos carry it: nothing loads it
            path = "original/consolidated.00.pth"
            seed = f"{spec.repo_id}/{path}"
            files[path] = w.stream(path, seed, b"", seed, max(TENSOR_ALIGN, _shard_bytes(spec) // 8))
        title = "Upload folder using huggingface_hub" if rev == 0 else f"Upload {names[changed_shard(spec)]}"
        sha = _commit_sha(spec.repo_id, files, parent, title)
        revisions.append({"sha": sha, "date": _date(rev), "title": title, "files": dict(sorted(files.items()))})
        parent = sha
    return {
        "gated": spec.gated,
        "kind": spec.kind,
        "refs": {"main": revisions[-1]["sha"]},
        "revisions": revisions,
        "config": _config(spec),
        "safetensors": {"parameters": params, "total": sum(params.values())},
    }


def generate(repo_specs: tuple[RepoSpec, ...], out: Path) -> None:
    """Write the store for these specs into `out` (which must not exist)."""
    out.mkdir(parents=True)
    w = _Writer(out / "blobs")
    w.blobs.mkdir()
    repos = {s.repo_id: _generate_repo(s, w) for s in repo_specs}
    doc = {"version": GENERATOR_VERSION, "specs": [list(s) for s in repo_specs], "repos": repos}
    (out / "manifest.json").write_text(json.dumps(doc, indent=1) + "\n")


class Store:
    """A generated store: its manifest, and where each file's bytes are."""

    def __init__(self, root: Path):
        self.root = root
        self.doc = json.loads((root / "manifest.json").read_text())
        self.repos: dict[str, dict] = self.doc["repos"]

    def blob(self, sha256: str) -> Path:
        return self.root / "blobs" / sha256

    def revision(self, repo_id: str, revision: str = "main") -> dict | None:
        """The revision record for a branch name or a full commit sha (None: no such repo/revision)."""
        repo = self.repos.get(repo_id)
        if repo is None:
            return None
        sha = repo["refs"].get(revision, revision)
        return next((r for r in repo["revisions"] if r["sha"] == sha), None)

    def commits(self, repo_id: str) -> list[str]:
        """Commit shas, oldest first (the last is main)."""
        return [r["sha"] for r in self.repos[repo_id]["revisions"]]

    def manifest(self, repo_id: str, revision: str = "main") -> dict[str, dict]:
        """path -> {"size", "sha256", "lfs", "blob_id"[, "pointer_size"]} of every file at that revision."""
        rev = self.revision(repo_id, revision)
        if rev is None:
            raise KeyError(f"{repo_id}@{revision}")
        return {p: dict(r) for p, r in rev["files"].items()}


ROOT_NAME = "hub"


def default_root() -> Path:
    from sparkctl_lab import paths

    return paths.CACHE_DIR / ROOT_NAME


def ensure(repo_specs: tuple[RepoSpec, ...] = LAB_SPECS, root: Path | None = None) -> Store:
    """The store for these specs under `root` (default CACHE_DIR/hub), generated when missing. One
    process generates at a time (flock)."""
    root = default_root() if root is None else root
    root.mkdir(parents=True, exist_ok=True)
    final = root / spec_key(repo_specs)
    if not (final / "manifest.json").exists():
        with open(root / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (final / "manifest.json").exists():
                tmp = root / f".{final.name}.partial"
                shutil.rmtree(tmp, ignore_errors=True)
                generate(repo_specs, tmp)
                shutil.rmtree(final, ignore_errors=True)
                tmp.rename(final)
    return Store(final)


def prune(repo_specs: tuple[RepoSpec, ...] = LAB_SPECS, root: Path | None = None) -> list[str]:
    """Remove the stores of other specs under root (the lab's cache keeps its current one only; call
    it while no hub of another lab may still serve an older one). Returns the keys removed."""
    root = default_root() if root is None else root
    keep = spec_key(repo_specs)
    gone = []
    for old in root.iterdir() if root.is_dir() else ():
        if old.is_dir() and old.name != keep and not old.name.startswith("."):  # not a generation under way
            with contextlib.suppress(OSError):
                shutil.rmtree(old)
                gone.append(old.name)
    return gone


def lab_store() -> Store:
    """The lab's store (LAB_SPECS in CACHE_DIR/hub), generated when missing."""
    return ensure(LAB_SPECS)


if __name__ == "__main__":  # python -m sparkctl_lab.checkpoint: generate the lab's store, print where it is
    print(ensure(LAB_SPECS).root)
