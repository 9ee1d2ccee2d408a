"""The lab's model hub: the Hugging Face Hub's HTTP API over the generated checkpoints (checkpoint.py).

The real `huggingface_hub` client (`HF_ENDPOINT=http://10.231.0.1:5080 hf download ...`,
snapshot_download, model_info) works against it as against huggingface.co: what it reads is
served as the Hub serves it.

  GET  /api/models/{repo}[/revision/{rev}]   model info; `blobs=true` (files_metadata) adds each
                                             sibling's size, blobId and, for LFS files, lfs {sha256,
                                             size, pointerSize}; `expand` keeps the properties named
  GET  /api/models/{repo}/tree/{rev}[/{path}]  `recursive`, `expand` (lastCommit)
  POST /api/models/{repo}/paths-info/{rev}    form `paths` (repeated), `expand`
  GET  /api/models/{repo}/refs | /commits/{rev}
  GET  /api/whoami-v2
  HEAD/GET /{repo}/resolve/{rev}/{path}       ETag (LFS: the sha256; otherwise the git blob sha1),
                                             X-Repo-Commit, X-Linked-Etag/X-Linked-Size (LFS),
                                             Content-Length, Accept-Ranges; Range (206, 416)
  GET  /_lab/stats                           the lab's own: requests and bytes served (not the Hub's)

Errors carry the Hub's X-Error-Code/X-Error-Message (the client maps them to its exceptions): an
unknown repo is RepoNotFound, 401 without a token and 404 with one (the Hub does not say which repos
exist); an unknown branch or commit RevisionNotFound (404); a missing file EntryNotFound (404, with
X-Repo-Commit); the gated repo's files GatedRepo, 401 without a token, 403 with a token not approved
for it (its info and file list stay public, as on the Hub); any unknown token 401 "Invalid credentials
in Authorization header". Revisions: `main` or a full commit sha (checkpoint.Store.commits).

Faults (FAULTS_FILE, JSON, re-read when it changes; `set_faults()`): {"cut_after": N, "cut_count": K}
ends the next K file bodies longer than N bytes after N bytes (the client resumes with a Range
request from its last whole 10 MiB chunk), {"rate": B} sends file bodies at B bytes/s.

In the lab it runs like the registry: `python -S -m sparkctl_lab.hub KEY` (procs.start_hub),
detached, on the runner's management address (topology.HUB: every lab host reaches it), bound once
the store is generated; LAB_DIR/hub holds its tokens, faults file and log (errors only, nothing per
request). Stdlib only.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import secrets
import signal
import socket
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from sparkctl_lab import checkpoint, paths
from sparkctl_lab import topology as topo
from sparkctl_lab.checkpoint import DRAFTER_REPO, GATED_REPO, TARGET_REPO  # noqa: F401  (the lab's repos)

HUB_DIR = paths.LAB_DIR / "hub"
TOKEN_FILE = HUB_DIR / "token"  # a token approved for the gated repo
UNAPPROVED_TOKEN_FILE = HUB_DIR / "token-unapproved"  # valid, but not on the gated repo's list
FAULTS_FILE = HUB_DIR / "faults.json"
LOG_FILE = HUB_DIR / "hub.log"
USER = "sparkctl-lab"
ENDPOINT = f"http://{topo.HUB}"  # this lab instance's
REPOS = (TARGET_REPO, DRAFTER_REPO, GATED_REPO)
SEND_CHUNK = 1 << 20


def endpoint(instance: int | None = None) -> str:
    """HF_ENDPOINT of lab `instance` (default: this process's, paths.INSTANCE)."""
    if instance is None:
        return ENDPOINT
    off = topo.OFFSETS[instance]
    return f"http://10.231.{off}.1:{topo.HUB_PORT}"


def store() -> checkpoint.Store:
    """The lab's store (what the hub serves), generated when missing."""
    return checkpoint.lab_store()


def commits(repo_id: str) -> list[str]:
    """The repo's commit shas, oldest first; the last is `main`."""
    return store().commits(repo_id)


def manifest(repo_id: str, revision: str = "main") -> dict[str, dict]:
    """path -> {"size", "sha256", "lfs", "blob_id"...} of the repo at `revision` (main or a commit sha),
    straight from the generator."""
    return store().manifest(repo_id, revision)


def token(unapproved: bool = False) -> str:
    return (UNAPPROVED_TOKEN_FILE if unapproved else TOKEN_FILE).read_text().strip()


def new_token() -> str:
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    return "hf_" + "".join(secrets.choice(alphabet) for _ in range(34))


def prepare() -> list[str]:
    """The lab's tokens (made once per LAB_DIR); what was made."""
    made = []
    HUB_DIR.mkdir(parents=True, exist_ok=True)
    for f in (TOKEN_FILE, UNAPPROVED_TOKEN_FILE):
        if not f.exists():
            tmp = f.with_name(f.name + ".tmp")
            tmp.write_text(new_token() + "\n")
            tmp.chmod(0o600)
            tmp.replace(f)
            made.append(f.name)
    return [f"hub tokens ({', '.join(made)})"] if made else []


def set_faults(cut_after: int | None = None, cut_count: int = 1, rate: int | None = None, path: Path = FAULTS_FILE) -> None:
    """Switch the lab hub's faults (none given: all off)."""
    doc = {}
    if cut_after is not None:
        doc.update(cut_after=cut_after, cut_count=cut_count)
    if rate is not None:
        doc["rate"] = rate
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc) + "\n")
    tmp.replace(path)


def code_key() -> str:
    """Which hub a running process is: the store's specs and this code (a change restarts it)."""
    h = hashlib.sha256(checkpoint.spec_key(checkpoint.LAB_SPECS).encode())
    for f in (Path(__file__), Path(checkpoint.__file__)):
        h.update(f.read_bytes())
    return h.hexdigest()[:12]


def healthy(address: str = topo.HUB, timeout: float = 1.0) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
        conn.request("GET", f"/api/models/{TARGET_REPO}")
        ok = conn.getresponse().status == 200
        conn.close()
        return ok
    except (OSError, http.client.HTTPException):
        return False


# ---- the API's documents ----------------------------------------------------------------------------


def _id24(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:24]


def _lfs(rec: dict) -> dict:
    return {"sha256": rec["sha256"], "size": rec["size"], "pointerSize": rec["pointer_size"]}


def _last_commits(repo: dict, rev: dict) -> dict[str, dict]:
    """path -> the commit (id, title, date) that last changed it, up to `rev`."""
    out: dict[str, dict] = {}
    for r in repo["revisions"]:
        for p, f in r["files"].items():
            if p not in out or out[p]["_sha256"] != f["sha256"]:
                out[p] = {"id": r["sha"], "title": r["title"], "date": r["date"], "_sha256": f["sha256"]}
        if r["sha"] == rev["sha"]:
            break
    return {p: {k: v for k, v in c.items() if k != "_sha256"} for p, c in out.items()}


def model_info(repo_id: str, repo: dict, rev: dict, blobs: bool, expand: list[str]) -> dict:
    siblings = []
    for p, f in sorted(rev["files"].items()):
        s = {"rfilename": p}
        if blobs:
            s.update(size=f["size"], blobId=f["blob_id"])
            if f["lfs"]:
                s["lfs"] = _lfs(f)
        siblings.append(s)
    stored = {f["sha256"]: f["size"] for r in repo["revisions"] for f in r["files"].values()}
    info = {
        "_id": _id24(repo_id),
        "id": repo_id,
        "modelId": repo_id,
        "author": repo_id.split("/")[0],
        "sha": rev["sha"],
        "lastModified": rev["date"],
        "createdAt": repo["revisions"][0]["date"],
        "private": False,
        "gated": "manual" if repo["gated"] else False,
        "disabled": False,
        "downloads": 0,
        "likes": 0,
        "library_name": "transformers",
        "tags": ["transformers", "safetensors", repo["config"]["model_type"], "text-generation"],
        "pipeline_tag": "text-generation",
        "config": {k: repo["config"][k] for k in ("architectures", "model_type")},
        "cardData": {"license": "mit", "library_name": "transformers"},
        "siblings": siblings,
        "spaces": [],
        "safetensors": repo["safetensors"],
        "usedStorage": sum(stored.values()),
    }
    if expand:
        info = {k: v for k, v in info.items() if k in ("_id", "id") or k in expand}
    return info


def _dirs(files: dict) -> set[str]:
    return {p.rsplit("/", i)[0] for p in files for i in range(1, p.count("/") + 1)}


def tree_entry(path: str, rev: dict, commits: dict | None) -> dict:
    f = rev["files"].get(path)
    if f is None:  # a folder: its oid is a hash of what it holds
        inside = "".join(f"{p} {r['blob_id']}\n" for p, r in sorted(rev["files"].items()) if p.startswith(path + "/"))
        entry = {"type": "directory", "oid": hashlib.sha1(inside.encode()).hexdigest(), "size": 0, "path": path}
        if commits is not None:
            last = max((c for p, c in commits.items() if p.startswith(path + "/")), key=lambda c: c["date"])
            entry["lastCommit"] = last
        return entry
    entry = {"type": "file", "oid": f["blob_id"], "size": f["size"], "path": path}
    if f["lfs"]:
        entry["lfs"] = {"oid": f["sha256"], "size": f["size"], "pointerSize": f["pointer_size"]}
    if commits is not None:
        entry["lastCommit"] = commits[path]
    return entry


def tree(rev: dict, under: str, recursive: bool, commits: dict | None) -> list[dict] | None:
    """The entries below `under` ("" = the root; None: no such folder)."""
    dirs = _dirs(rev["files"])
    if under and under not in dirs:
        return None
    prefix = under + "/" if under else ""
    names = [p for p in sorted(set(rev["files"]) | dirs) if p.startswith(prefix)]
    if not recursive:
        names = [p for p in names if "/" not in p[len(prefix) :]]
    return [tree_entry(p, rev, commits) for p in names]


# ---- the server -------------------------------------------------------------------------------------


class HubError(Exception):
    def __init__(self, status: int, message: str, code: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.code, self.headers = status, message, code, headers or {}


def _truthy(v: str | None) -> bool:
    return (v or "").lower() in ("1", "true", "yes")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the client pools connections
    server_version = "sparkctl-lab-hub"
    sys_version = ""
    server: HubServer

    def log_message(self, format, *args):  # nothing per request unless asked for
        if self.server.verbose:
            super().log_message(format, *args)

    # ---- replies ----
    def _send(self, status: int, body: bytes, ctype: str = "application/json; charset=utf-8", headers: dict | None = None):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, doc, status: int = 200, headers: dict | None = None):
        self._send(status, json.dumps(doc).encode(), headers=headers)

    def _error(self, e: HubError):
        headers = dict(e.headers)
        if e.code:
            headers["X-Error-Code"] = e.code
        headers["X-Error-Message"] = e.message
        self._json({"error": e.message}, e.status, headers)

    # ---- who asks, for what ----
    def _user(self) -> tuple[str, bool] | None:
        """(user, approved for the gated repo), or None without a token; a wrong token is refused."""
        auth = self.headers.get("Authorization")
        if not auth:
            return None
        tok = auth[7:].strip() if auth.lower().startswith("bearer ") else ""
        approved = self.server.tokens.get(tok)
        if approved is None:
            raise HubError(401, "Invalid credentials in Authorization header")
        return USER, approved

    def _repo(self, repo_id: str, user) -> dict:
        repo = self.server.store.repos.get(repo_id)
        if repo is None:
            raise HubError(404 if user else 401, "Repository not found", "RepoNotFound")
        return repo

    def _rev(self, repo_id: str, revision: str) -> dict:
        rev = self.server.store.revision(repo_id, revision)
        if rev is None:
            raise HubError(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        return rev

    def _query(self) -> dict[str, list[str]]:
        return urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)

    # ---- routing ----
    def do_GET(self):
        self._dispatch()

    def do_HEAD(self):
        self._dispatch()

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        self.body = self.rfile.read(length) if length else b""  # read whatever the route, for keep-alive
        self._dispatch()

    def _dispatch(self):
        parts = [urllib.parse.unquote(p) for p in urllib.parse.urlsplit(self.path).path.split("/")[1:]]
        try:
            user = self._user()
            if parts[:1] == ["api"]:
                self._api(parts[1:], user)
            elif parts[:2] == ["_lab", "stats"]:
                self._json(self.server.stats_doc())
            elif len(parts) >= 5 and parts[2] == "resolve" and self.command in ("GET", "HEAD"):
                self._resolve("/".join(parts[:2]), parts[3], "/".join(parts[4:]), user)
            elif len(parts) >= 6 and parts[0] in ("datasets", "spaces") and parts[3] == "resolve":
                raise HubError(404 if user else 401, "Repository not found", "RepoNotFound")
            else:
                raise HubError(404, "Sorry, we can't find the page you are looking for.")
        except HubError as e:
            self._error(e)

    def _api(self, parts: list[str], user):
        if parts == ["whoami-v2"]:
            if user is None:
                raise HubError(401, "Invalid username or password.")
            name, _ = user
            return self._json(
                {
                    "type": "user",
                    "id": _id24(name),
                    "name": name,
                    "fullname": "sparkctl lab",
                    "isPro": False,
                    "orgs": [],
                    "auth": {"type": "access_token", "accessToken": {"displayName": "lab", "role": "read"}},
                }
            )
        if len(parts) < 3 or parts[0] not in ("models", "datasets", "spaces"):
            raise HubError(404, "Sorry, we can't find the page you are looking for.")
        if parts[0] != "models":
            raise HubError(404 if user else 401, "Repository not found", "RepoNotFound")
        repo_id, rest = "/".join(parts[1:3]), parts[3:]
        repo = self._repo(repo_id, user)
        q = self._query()
        if not rest or rest[0] == "revision" and len(rest) == 2:
            rev = self._rev(repo_id, rest[1] if rest else "main")
            expand = q.get("expand", []) + q.get("expand[]", [])
            return self._json(model_info(repo_id, repo, rev, _truthy((q.get("blobs") or [""])[0]), expand))
        if rest[0] == "tree" and len(rest) >= 2 and self.command == "GET":
            rev = self._rev(repo_id, rest[1])
            commits = _last_commits(repo, rev) if _truthy((q.get("expand") or [""])[0]) else None
            entries = tree(rev, "/".join(rest[2:]).strip("/"), _truthy((q.get("recursive") or [""])[0]), commits)
            if entries is None:
                raise HubError(404, f"Entry not found: {'/'.join(rest[2:])} does not exist on {rest[1]}", "EntryNotFound")
            return self._json(entries)
        if rest[0] == "paths-info" and len(rest) == 2 and self.command == "POST":
            rev = self._rev(repo_id, rest[1])
            form = urllib.parse.parse_qs(self.body.decode())
            commits = _last_commits(repo, rev) if _truthy((form.get("expand") or [""])[0]) else None
            known = set(rev["files"]) | _dirs(rev["files"])
            return self._json([tree_entry(p, rev, commits) for p in form.get("paths", []) if p in known])
        if rest == ["refs"]:
            branch = {"name": "main", "ref": "refs/heads/main", "targetCommit": repo["refs"]["main"]}
            doc = {"branches": [branch], "converts": [], "tags": []}
            if q.get("include_prs"):
                doc["pullRequests"] = []
            return self._json(doc)
        if rest[0] == "commits" and len(rest) == 2:
            rev = self._rev(repo_id, rest[1])
            upto = [r for r in repo["revisions"]]
            upto = upto[: upto.index(rev) + 1]
            return self._json(
                [
                    {
                        "id": r["sha"],
                        "title": r["title"],
                        "message": "",
                        "authors": [{"user": USER, "avatar": ""}],
                        "date": r["date"],
                    }
                    for r in reversed(upto)
                ]
            )
        raise HubError(404, "Sorry, we can't find the page you are looking for.")

    def _resolve(self, repo_id: str, revision: str, path: str, user):
        repo = self._repo(repo_id, user)
        if repo["gated"] and not (user and user[1]):
            if user is None:
                msg = (
                    f"Access to model {repo_id} is restricted. You must have access to it and be authenticated "
                    "to access it. Please log in."
                )
                raise HubError(401, msg, "GatedRepo")
            msg = (
                f"Access to model {repo_id} is restricted and you are not in the authorized list. "
                f"Visit {self.server.endpoint}/{repo_id} to ask for access."
            )
            raise HubError(403, msg, "GatedRepo")
        rev = self._rev(repo_id, revision)
        f = rev["files"].get(path)
        if f is None:
            raise HubError(404, "Entry not found", "EntryNotFound", {"X-Repo-Commit": rev["sha"]})
        size = f["size"]
        etag = f["sha256"] if f["lfs"] else f["blob_id"]
        headers = {
            "ETag": f'"{etag}"',
            "X-Repo-Commit": rev["sha"],
            "Accept-Ranges": "bytes",
            "Content-Disposition": f"inline; filename*=UTF-8''{urllib.parse.quote(path.rsplit('/', 1)[-1])}",
        }
        if f["lfs"]:
            headers.update({"X-Linked-Etag": f'"{etag}"', "X-Linked-Size": str(size)})
        start, end, status = 0, size - 1, 200
        rng = self.headers.get("Range")
        if rng and self.command == "GET":
            span = _parse_range(rng, size)
            if span == "unsatisfiable":
                headers["Content-Range"] = f"bytes */{size}"
                return self._send(416, b"", "text/plain", headers)
            if span is not None:
                start, end = span
                status = 206
                headers["Content-Range"] = f"bytes {start}-{end}/{size}"
        ctype = "application/json" if path.endswith(".json") else "application/octet-stream"
        length = end - start + 1 if size else 0
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(length))
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        self.server.count("head" if self.command == "HEAD" else "get", path, 0)
        if self.command == "HEAD" or not length:
            return
        if status == 206:
            self.server.count("range", path, 0)
        self._send_file(self.server.store.blob(f["sha256"]), start, length, path)

    def _send_file(self, blob: Path, start: int, length: int, path: str):
        """The file's bytes straight from disk (sendfile, never the whole file in memory); a cut fault
        ends the connection early, a rate fault paces the chunks."""
        cut_after, rate = self.server.take_faults(length)
        sent = 0
        limit = length if cut_after is None else min(length, cut_after)
        t0 = time.monotonic()
        with open(blob, "rb") as src:
            while sent < limit:
                n = min(SEND_CHUNK, limit - sent)
                if rate:
                    n = min(n, max(1, rate // 10))
                n = self.connection.sendfile(src, start + sent, n)
                if n == 0:
                    break
                sent += n
                if rate:
                    ahead = sent / rate - (time.monotonic() - t0)
                    if ahead > 0:
                        time.sleep(ahead)
        self.server.count("bytes", path, sent)
        if sent < length:  # the fault: the peer sees the body end short
            self.server.count("cut", path, 0)
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def _parse_range(header: str, size: int):
    """(start, end) of a single `bytes=` range; None to ignore it (multiple ranges, malformed) and
    send it all; "unsatisfiable" for one that starts past the end."""
    unit, _, spec = header.partition("=")
    if unit.strip() != "bytes" or "," in spec:
        return None
    first, _, last = spec.strip().partition("-")
    try:
        if first == "":
            n = int(last)
            return (max(0, size - n), size - 1) if n > 0 and size else "unsatisfiable"
        start = int(first)
        end = int(last) if last else size - 1
    except ValueError:
        return None
    if start >= size or end < start:
        return "unsatisfiable"
    return start, min(end, size - 1)


class HubServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def __init__(
        self,
        address: tuple[str, int],
        store: checkpoint.Store,
        tokens: dict[str, bool],
        faults_file: Path | None = None,
        verbose: bool = False,
    ):
        super().__init__(address, Handler)
        self.store, self.tokens, self.faults_file, self.verbose = store, tokens, faults_file, verbose
        self.lock = threading.Lock()
        self.faults: dict = {}
        self._faults_stamp = None
        self._cuts_left = 0
        self.stats: dict = {"get": 0, "head": 0, "range": 0, "cut": 0, "bytes": 0, "files": {}}
        host, port = self.server_address[:2]
        self.endpoint = f"http://{host}:{port}"

    def handle_error(self, request, client_address):
        # a client that goes away mid-transfer is not the hub's error
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)

    def set_faults(self, cut_after: int | None = None, cut_count: int = 1, rate: int | None = None) -> None:
        with self.lock:
            self.faults = {"cut_after": cut_after, "rate": rate}
            self._cuts_left = cut_count if cut_after is not None else 0
            self.faults_file = None  # set here, not from a file

    def take_faults(self, length: int) -> tuple[int | None, int | None]:
        """(cut after N bytes for a body of `length` or None, rate or None); only a body longer than N
        is cut, and uses one of cut_count."""
        with self.lock:
            if self.faults_file is not None:
                try:
                    st = self.faults_file.stat()
                    stamp = (st.st_mtime_ns, st.st_size)
                except OSError:
                    stamp = None
                if stamp != self._faults_stamp:
                    self._faults_stamp = stamp
                    try:
                        doc = json.loads(self.faults_file.read_text()) if stamp else {}
                    except (OSError, ValueError):
                        doc = {}
                    self.faults = {"cut_after": doc.get("cut_after"), "rate": doc.get("rate")}
                    self._cuts_left = int(doc.get("cut_count", 1)) if doc.get("cut_after") is not None else 0
            cut = None
            if self._cuts_left > 0 and length > int(self.faults["cut_after"]):
                self._cuts_left -= 1
                cut = int(self.faults["cut_after"])
            return cut, self.faults.get("rate")

    def count(self, what: str, path: str, n: int) -> None:
        with self.lock:
            self.stats[what] += n if what == "bytes" else 1
            per = self.stats["files"].setdefault(path, {"get": 0, "bytes": 0})
            if what == "get":
                per["get"] += 1
            elif what == "bytes":
                per["bytes"] += n

    def stats_doc(self) -> dict:
        with self.lock:
            return json.loads(json.dumps(self.stats))


def serve(
    store: checkpoint.Store,
    host: str = "127.0.0.1",
    port: int = 0,
    tokens: dict[str, bool] | None = None,
    faults_file: Path | None = None,
    verbose: bool = False,
) -> HubServer:
    """A hub serving `store` on host:port (0: a port the kernel picks; read it from .endpoint), in a
    thread of this process; .shutdown() and .server_close() stop it."""
    srv = HubServer((host, port), store, tokens or {}, faults_file, verbose)
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()
    return srv


def _read_tokens() -> dict[str, bool]:
    out = {}
    for f, approved in ((TOKEN_FILE, True), (UNAPPROVED_TOKEN_FILE, False)):
        try:
            out[f.read_text().strip()] = approved
        except OSError:
            pass
    return out


def main() -> int:
    """The lab's hub process (procs.start_hub): generate the store if needed, then serve on topo.HUB."""
    s = checkpoint.ensure(checkpoint.LAB_SPECS)
    srv = HubServer(
        (topo.RUNNER_ADDRESS, topo.HUB_PORT), s, _read_tokens(), FAULTS_FILE, verbose=bool(os.environ.get("SPARKCTL_HUB_VERBOSE"))
    )
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # raised in serve_forever's wait: no polling
    sys.stderr.write(f"{time.strftime('%H:%M:%S')} hub: serving {s.root} on {srv.endpoint}\n")
    sys.stderr.flush()
    try:
        srv.serve_forever(poll_interval=3600)
    finally:
        srv.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
