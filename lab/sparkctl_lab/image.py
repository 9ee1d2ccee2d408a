"""The runtime image `10.231.0.1:5000/sparkctl/vllm-sim:0.1`, built without Docker Hub.

Its root filesystem is assembled from this machine: Debian's python3.11 (or, where that is
missing, the interpreter running sparkctl), the libraries `ldd` names for it and its
extension modules, the standard library, a static busybox, and the runtime simulator
(the directory lab/sparkctl_lab/sim, whatever it holds at build time) under /opt/sparkctl.
The libraries vLLM's own image ships that sparkctl's gateway runs on (aiohttp, prometheus_client,
uvloop: vLLM 0.33 requires aiohttp>=3.14.4, prometheus_client and fastapi[standard], which brings
uvicorn[standard] and uvloop) are copied, with what they require, from the interpreter running
sparkctl into the image's dist-packages, so the lab's gateway runs from the runtime image as on
a real Spark; so is huggingface_hub (with `/usr/local/bin/hf`, its CLI, as pip installs it), which
vLLM's image ships and sparkctl's weights step runs, and the Python requirements of vllm-router,
the fleet's front door (fastapi, uvicorn, aiohttp, orjson, requests, setproctitle: vLLM's image
ships them), but not the router itself, as vLLM's image does not: sparkctl ships it to the door's
host from the wheel the lab's fleet file names (sparkctl_lab/router_wheel.py, fleet/router_launch.py),
as to a real node. `/usr/local/bin/vllm` and `/usr/local/bin/ray`
run `python3 -m sparkctl_lab.sim.vllm_cli` / `...ray_cli`. Every module in it is compiled to bytecode
by the image's own interpreter at build time, as pip and Debian compile what they install, so a
container start imports and compiles nothing. The tarball is imported into the head's
dockerd with `docker import`-style changes (ENV, CMD), pushed to the lab registry and removed
again, so every host starts without it, as fresh Sparks would.

Caching (CACHE_DIR, kept by `lab down`): the tarball and a snapshot of the registry storage,
both keyed by a hash of the sim sources, the interpreter and this builder's version. A warm
`lab up` restores the snapshot (no build, no push); changing a file under sim/ changes the
key, so the next `lab up` rebuilds and pushes.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from sparkctl_lab import paths
from sparkctl_lab import topology as topo

BUILDER_VERSION = "8"  # bump when the image layout below changes
SIM_DIR = Path(__file__).resolve().parent / "sim"
KEY_LABEL = "org.sparkctl.lab.image-key"
# what the gateway imports from vLLM's image (docs/gateway.md), and the Hub client vLLM's image ships
# (vLLM 0.33 requires huggingface_hub>=1.31.0; sparkctl's weights step runs its `hf download` in the
# image), and what vllm-router 0.1.17 requires (its Requires-Dist; the router itself, 71 MB with its
# Rust extension, is shipped by `fleet up`); their requirements come along
ROUTER_REQUIREMENTS = ("setproctitle", "aiohttp", "orjson", "uvicorn", "fastapi", "requests")
IMAGE_LIBRARIES = ("aiohttp", "prometheus_client", "uvloop", "huggingface_hub", *ROUTER_REQUIREMENTS)
ENTRYPOINTS = {"vllm": "sparkctl_lab.sim.vllm_cli", "ray": "sparkctl_lab.sim.ray_cli"}
# console scripts of the copied libraries, written as pip writes them: name -> module:function
CONSOLE_SCRIPTS = {"hf": "huggingface_hub.cli.hf:main"}
STDLIB_SKIP = {
    "test",
    "idlelib",
    "tkinter",
    "turtledemo",
    "ensurepip",
    "lib2to3",
    "site-packages",
    "dist-packages",
    "sitecustomize.py",
    "EXTERNALLY-MANAGED",
}
CHANGES = [
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV PYTHONPATH=/opt/sparkctl",
    "ENV PYTHONUNBUFFERED=1",
    "ENV LANG=C.UTF-8",
    # the lab reaches no public address: `hf` must not ask pypi.org for a newer version of itself
    "ENV HF_HUB_DISABLE_UPDATE_CHECK=1",
    "WORKDIR /",
    'CMD ["/bin/sh"]',
]


def python_source() -> tuple[Path, Path]:
    """(interpreter, stdlib dir): Debian's python3.11 when complete, else the one running us."""
    deb, lib = Path("/usr/bin/python3.11"), Path("/usr/lib/python3.11")
    if deb.exists() and (lib / "http" / "server.py").exists() and (lib / "lib-dynload").is_dir():
        return deb, lib
    ver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    base = Path(sys.base_prefix)
    return base / "bin" / ver, base / "lib" / ver


def sim_files() -> list[Path]:
    if not SIM_DIR.is_dir():
        return []
    return sorted(
        p for p in SIM_DIR.rglob("*") if p.is_file() and "__pycache__" not in p.parts and not p.name.endswith((".pyc", ".pyo"))
    )


def library_files() -> list[tuple[str, Path]]:
    """(path inside dist-packages, file here) of IMAGE_LIBRARIES and what they require (markers
    evaluated here, extras left out), from the interpreter running the lab."""
    import importlib.metadata as md
    import re as _re

    from packaging.requirements import Requirement

    seen: dict[str, md.Distribution] = {}
    todo = list(IMAGE_LIBRARIES)
    while todo:
        name = todo.pop()
        key = _re.sub(r"[-_.]+", "-", name).lower()
        if key in seen:
            continue
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue  # uvloop is optional for the gateway
        seen[key] = dist
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    out = []
    for dist in seen.values():
        for f in dist.files or []:
            if "__pycache__" in f.parts or f.parts[0].endswith(".dist-info") and f.name == "RECORD" or ".." in f.parts:
                continue
            src = Path(dist.locate_file(f))
            if src.is_file():
                out.append((str(f), src))
    return sorted(out)


def image_key() -> str:
    h = hashlib.sha256(f"builder {BUILDER_VERSION}\n".encode())
    py, lib = python_source()
    st = py.resolve().stat()
    h.update(f"python {py} {st.st_size} {st.st_mtime_ns} {lib}\n".encode())
    for f in sim_files():
        h.update(f"{f.relative_to(SIM_DIR)}\n".encode())
        h.update(f.read_bytes())
    for rel, src in library_files():  # by path and size: two virtualenvs with the same wheels build the same image
        h.update(f"lib {rel} {src.stat().st_size}\n".encode())
    return h.hexdigest()[:16]


def _usr(path: str) -> str:
    """Where a file goes in the merged-/usr image (/lib/x -> /usr/lib/x)."""
    d = os.path.realpath(os.path.dirname(path))
    for top in ("/lib", "/lib64", "/bin", "/sbin"):
        if d == top or d.startswith(top + "/"):
            d = "/usr" + d
    return os.path.join(d, os.path.basename(path))


def ldd_paths(files: list[Path]) -> set[str]:
    out: set[str] = set()
    r = subprocess.run(["ldd", *map(str, files)], capture_output=True, text=True)
    for line in r.stdout.splitlines():
        m = re.search(r"=>\s*(/\S+)", line) or re.match(r"\s*(/\S+)\s+\(0x", line)
        if m:
            out.add(m.group(1))
    return out


# Compiles each (source, path in the image) it reads as JSON from stdin into DIR/<n>.pyc, run by the
# image's own interpreter (its magic number); prints that interpreter's cache tag (cpython-311).
_COMPILE = """
import json, os, py_compile, sys
out = sys.argv[1]
for n, (src, name) in enumerate(json.load(sys.stdin)):
    py_compile.compile(src, cfile=os.path.join(out, f"{n}.pyc"), dfile="/" + name, quiet=2,
                       invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
print(sys.implementation.cache_tag)
"""


class _Tar:
    def __init__(self, tar: tarfile.TarFile):
        self.tar = tar
        self.dirs: set[str] = set()
        self.modules: list[tuple[str, str]] = []  # (source here, path in the image) of every .py copied
        self.written: dict[str, bytes] = {}  # path in the image -> source, of every .py written from bytes

    def _info(self, name: str, kind: bytes, mode: int) -> tarfile.TarInfo:
        ti = tarfile.TarInfo(name.lstrip("/"))
        ti.type, ti.mode, ti.uid, ti.gid, ti.mtime = kind, mode, 0, 0, int(time.time())
        return ti

    def dir(self, name: str, mode: int = 0o755) -> None:
        name = name.strip("/")
        if not name or name in self.dirs:
            return
        self.dir(os.path.dirname(name))
        self.dirs.add(name)
        self.tar.addfile(self._info(name, tarfile.DIRTYPE, mode))

    def _add(self, name: str, data: bytes, mode: int) -> None:
        self.dir(os.path.dirname(name.strip("/")))
        ti = self._info(name, tarfile.REGTYPE, mode)
        ti.size = len(data)
        self.tar.addfile(ti, io.BytesIO(data))

    def file(self, name: str, data: bytes, mode: int = 0o644) -> None:
        if name.endswith(".py"):
            self.written[name.lstrip("/")] = data
        self._add(name, data, mode)

    def copy(self, src: str | Path, name: str) -> None:
        if name.endswith(".py"):
            self.modules.append((str(src), name.lstrip("/")))
        self._add(name, Path(src).read_bytes(), os.stat(src).st_mode & 0o7777)

    def bytecode(self, python: Path) -> None:
        """Every module's bytecode, compiled by the image's interpreter (unchecked-hash: valid
        whatever the files' times in the image). Without it each container start compiled what it
        imported into a layer removed with the container: the simulator's ~0.4 s from container start
        to serving was mostly that, paid again by every engine, drafter and gateway (re)start."""
        import json
        import tempfile

        with tempfile.TemporaryDirectory(prefix="sparkctl-lab-pyc-") as out:
            modules = list(self.modules)
            for n, (name, data) in enumerate(sorted(self.written.items())):
                src = Path(out, f"written-{n}.py")
                src.write_bytes(data)
                modules.append((str(src), name))
            tag = subprocess.run(
                [str(python), "-c", _COMPILE, out], input=json.dumps(modules), capture_output=True, text=True, check=True
            ).stdout.strip()
            for n, (_, name) in enumerate(modules):
                pyc = Path(out, f"{n}.pyc")
                if pyc.exists():  # (a module that does not compile, e.g. Python 2 syntax in a library's extra, has none)
                    stem = os.path.basename(name)[: -len(".py")]
                    self._add(f"{os.path.dirname(name)}/__pycache__/{stem}.{tag}.pyc", pyc.read_bytes(), 0o644)

    def link(self, name: str, target: str) -> None:
        self.dir(os.path.dirname(name.strip("/")))
        ti = self._info(name, tarfile.SYMTYPE, 0o777)
        ti.linkname = target
        self.tar.addfile(ti)


def build_rootfs(out: Path) -> None:
    py, lib = python_source()
    ver = lib.name  # python3.11
    tmp = out.with_suffix(".partial")
    with tarfile.open(tmp, "w") as tf:
        t = _Tar(tf)
        for d in (
            "usr/bin",
            "usr/sbin",
            "usr/lib",
            "usr/lib64",
            "usr/local/bin",
            "etc",
            "root",
            "proc",
            "sys",
            "dev",
            "run",
            "var/tmp",
            "opt/sparkctl",
        ):
            t.dir(d, 0o700 if d == "root" else 0o755)
        t.dir("tmp", 0o1777)
        for top in ("bin", "sbin", "lib", "lib64"):
            t.link(top, f"usr/{top}")
        # busybox and its applets
        t.copy("/bin/busybox", "usr/bin/busybox")
        applets = subprocess.run(["/bin/busybox", "--list"], capture_output=True, text=True).stdout.split()
        for a in applets:
            if a != "busybox" and not a.startswith("python"):
                t.link(f"usr/bin/{a}", "busybox")
        # python, its libraries and its standard library
        t.copy(py.resolve(), f"usr/bin/{ver}")
        t.link("usr/bin/python3", ver)
        t.link("usr/bin/python", ver)
        dynload = sorted((lib / "lib-dynload").glob("*.so"))
        # glibc dlopens libgcc_s at thread exit/cancel (ldd cannot see it): without it a dying
        # Python aborts with "libgcc_s.so.1 must be installed for pthread_exit to work" (exit 139)
        libgcc = sorted(Path("/lib").glob("*-linux-gnu/libgcc_s.so.1"))[:1]
        # the copied libraries' own extension modules need theirs too (uvloop's links librt)
        extensions = [src for rel, src in library_files() if rel.endswith(".so") or ".so." in rel]
        # (a library a copied wheel bundles, e.g. a `<name>.libs/` folder, is copied with its wheel, not again)
        bundled = {str(src) for _, src in library_files()}
        for so in sorted(ldd_paths([py.resolve(), *dynload, *extensions]) - bundled | {str(p) for p in libgcc}):
            t.copy(os.path.realpath(so), _usr(so))
        for root, dirs, files in os.walk(lib):
            rel = os.path.relpath(root, lib)
            # (this machine's __pycache__ not: its timestamps name the files here, not in the image; bytecode() below)
            dirs[:] = sorted(
                d for d in dirs if d != "__pycache__" and not (rel == "." and (d in STDLIB_SKIP or d.startswith("config-")))
            )
            for f in sorted(files):
                if rel == "." and f in STDLIB_SKIP:
                    continue
                src = os.path.join(root, f)
                if os.path.islink(src) and not os.path.exists(src):
                    continue
                t.copy(src, os.path.normpath(f"usr/lib/{ver}/{rel}/{f}"))
        # the minimum of /etc a container expects
        t.file("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n")
        t.file("etc/group", b"root:x:0:\nnogroup:x:65534:\n")
        t.file("etc/nsswitch.conf", b"passwd: files\ngroup: files\nhosts: files dns\n")
        t.file("etc/os-release", b'PRETTY_NAME="sparkctl lab runtime (vllm-sim)"\nID=sparkctl-lab\n')
        # the simulator, under a bare `sparkctl_lab` package (nothing else of sparkctl is in the image)
        base = "opt/sparkctl/sparkctl_lab"
        t.file(f"{base}/__init__.py", b'"""sparkctl lab (only the runtime simulator is in this image)."""\n')
        t.dir(f"{base}/sim")
        for f in sim_files():
            t.copy(f, f"{base}/sim/{f.relative_to(SIM_DIR)}")
        # on sys.path without PYTHONPATH: Debian's site.py adds /usr/local/lib/python3.X/dist-packages,
        # any other build its prefix's site-packages
        libs = f"usr/local/lib/{ver}/dist-packages" if str(lib).startswith("/usr/lib/") else f"usr/lib/{ver}/site-packages"
        for rel, src in library_files():
            t.copy(src, f"{libs}/{rel}")
        for exe, module in ENTRYPOINTS.items():
            t.file(f"usr/local/bin/{exe}", f'#!/bin/sh\nexec python3 -m {module} "$@"\n'.encode(), 0o755)
        for exe, target in CONSOLE_SCRIPTS.items():
            module, func = target.split(":")
            script = (
                "#!/usr/bin/python3\nimport re\nimport sys\n"
                f"from {module} import {func}\n"
                "if __name__ == '__main__':\n"
                "    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n"
                f"    sys.exit({func}())\n"
            )
            t.file(f"usr/local/bin/{exe}", script.encode(), 0o755)
        t.bytecode(py)
    tmp.replace(out)


def tarball(key: str) -> Path:
    d = paths.CACHE_DIR / "image"
    d.mkdir(parents=True, exist_ok=True)
    out = d / f"vllm-sim-{key}.tar"
    if not out.exists():
        build_rootfs(out)
        for old in d.glob("vllm-sim-*.tar"):
            if old != out:
                old.unlink(missing_ok=True)
    return out


def snapshot_dir(key: str) -> Path:
    return paths.CACHE_DIR / "registry" / key


def restore_snapshot(key: str, storage: Path) -> bool:
    snap = snapshot_dir(key)
    if not snap.is_dir():
        return False
    shutil.rmtree(storage, ignore_errors=True)
    shutil.copytree(snap, storage, symlinks=True)
    return True


def save_snapshot(key: str, storage: Path) -> None:
    base = paths.CACHE_DIR / "registry"
    base.mkdir(parents=True, exist_ok=True)
    tmp = base / f".{key}.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(storage, tmp, symlinks=True)
    final = snapshot_dir(key)
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    for old in base.iterdir():
        if old != final:
            shutil.rmtree(old, ignore_errors=True)


def build_and_push(key: str, docker_socket: Path, progress=lambda msg: None) -> str:
    """Import the rootfs into a lab host's dockerd, push it to the lab registry, drop it there.

    Returns the pushed image's ID (config digest)."""
    import docker

    from sparkctl.errors import SparkctlError

    t0 = time.monotonic()
    tar = tarball(key)
    progress(f"rootfs {tar.stat().st_size // 2**20} MiB ready ({time.monotonic() - t0:.1f}s)")
    repo = f"{topo.REGISTRY}/{topo.IMAGE_REPO}"
    api = docker.APIClient(base_url=f"unix://{docker_socket}", timeout=300)
    try:
        api.import_image_from_file(str(tar), repository=repo, tag=topo.IMAGE_TAG, changes=CHANGES + [f"LABEL {KEY_LABEL}={key}"])
        image_id = api.inspect_image(f"{repo}:{topo.IMAGE_TAG}")["Id"]
        for event in api.push(repo, tag=topo.IMAGE_TAG, stream=True, decode=True):
            if "error" in event:
                raise SparkctlError(f"pushing {topo.IMAGE} failed: {event['error']}")
        api.remove_image(f"{repo}:{topo.IMAGE_TAG}", force=True)
    finally:
        api.close()
    progress(f"image {topo.IMAGE} pushed ({time.monotonic() - t0:.1f}s)")
    return image_id
