"""The lab's model hub (lab/sparkctl_lab/hub.py) as the real huggingface_hub client sees it.

A hub on 127.0.0.1 (port 0: the kernel's pick) serves tiny generated checkpoints (checkpoint.py);
everything is asked through the client's own functions: model_info, snapshot_download,
hf_hub_download, its resuming http_get, and the exceptions it maps the hub's errors to.
"""

from __future__ import annotations

import hashlib
import http.client
import json
from pathlib import Path

import pytest
from huggingface_hub import HfApi, hf_hub_download, snapshot_download
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.file_download import http_get
from huggingface_hub.utils import disable_progress_bars

from sparkctl_lab import checkpoint, hub
from sparkctl_lab.checkpoint import DRAFTER_REPO, GATED_REPO, TARGET_REPO, KiB, MiB
from sparkctl_lab.sim import weights

# tiny, but the drafter is over 10 MiB: the client keeps a download's bytes in 10 MiB chunks, so
# only a cut after the first chunk leaves it something to resume from
SPECS = checkpoint.specs(target_bytes=192 * KiB, drafter_bytes=12 * MiB, gated_bytes=64 * KiB)
TOKEN, UNAPPROVED = "hf_labApprovedTokenForTheGatedRepoxx", "hf_labValidTokenNotOnTheGatedListxx"


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> checkpoint.Store:
    return checkpoint.ensure(SPECS, root=tmp_path_factory.mktemp("hub"))


@pytest.fixture
def server(store):
    disable_progress_bars()
    srv = hub.serve(store, tokens={TOKEN: True, UNAPPROVED: False})
    yield srv
    srv.shutdown()
    srv.server_close()


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def files_in(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and ".cache" not in p.parts}


def test_the_same_specs_give_the_same_files_and_commits_and_a_new_revision_changes_one_shard(store, tmp_path):
    again = checkpoint.ensure(SPECS, root=tmp_path)
    assert again.repos == store.repos  # every size, sha256 and commit sha: deterministic
    old, new = store.commits(TARGET_REPO)
    assert all(len(c) == 40 and int(c, 16) >= 0 for c in (old, new)) and old != new
    before, after = store.manifest(TARGET_REPO, old), store.manifest(TARGET_REPO, "main")
    changed = [p for p in after if after[p]["sha256"] != before[p]["sha256"]]
    assert changed == ["model-00003-of-00006.safetensors"] and after[changed[0]]["size"] == before[changed[0]]["size"]
    assert store.manifest(TARGET_REPO) == after and store.revision(TARGET_REPO, "v9") is None


def test_model_info_lists_every_file_with_the_digest_of_the_bytes_it_serves(server, store, tmp_path):
    api = HfApi(endpoint=server.endpoint, token=False)
    old, new = store.commits(TARGET_REPO)
    info = api.model_info(TARGET_REPO, files_metadata=True)
    assert info.sha == new and api.model_info(TARGET_REPO, revision=old).sha == old
    assert info.safetensors.total > 0 and info.gated is False
    out = Path(
        snapshot_download(TARGET_REPO, endpoint=server.endpoint, token=False, local_dir=tmp_path / "m", cache_dir=tmp_path / "c")
    )
    assert files_in(out) == {s.rfilename for s in info.siblings}
    for s in info.siblings:
        data = (out / s.rfilename).read_bytes()
        assert s.size == len(data)
        if s.rfilename.endswith((".safetensors", ".pth")):  # LFS: the sha256 of its bytes; git: the pointer's blob id
            assert s.lfs.sha256 == hashlib.sha256(data).hexdigest() and s.lfs.size == len(data)
            pointer = checkpoint.lfs_pointer(s.lfs.sha256, len(data))
            assert s.blob_id == checkpoint.git_blob_sha1(pointer) and s.lfs.pointer_size == len(pointer)
        else:  # a plain git file: its blob id
            assert s.lfs is None and s.blob_id == hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        if s.rfilename.endswith(".safetensors"):
            assert weights.header_error(str(out / s.rfilename)) is None  # real safetensors, whole
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert sorted(set(index["weight_map"].values())) == [f"model-0000{i}-of-00006.safetensors" for i in range(1, 7)]
    assert api.verify_repo_checksums(TARGET_REPO, local_dir=out).mismatches == []


def test_snapshot_download_takes_only_the_patterns_and_a_new_revision_fetches_only_its_changed_shard(server, store, tmp_path):
    old, _ = store.commits(TARGET_REPO)
    local = tmp_path / "model"

    def download(revision: str) -> Path:
        got = snapshot_download(
            TARGET_REPO,
            revision=revision,
            endpoint=server.endpoint,
            token=False,
            local_dir=local,
            cache_dir=tmp_path / "cache",
            allow_patterns=["*.json", "model-*.safetensors"],
        )
        return Path(got)

    out = download(old)
    want = {p for p in store.manifest(TARGET_REPO, old) if p.endswith(".json") or p.startswith("model-")}
    # fnmatch's `*` crosses folders: `*.json` takes original/params.json, not the original/ checkpoint
    assert files_in(out) == want and "original/params.json" in want and "original/consolidated.00.pth" not in want
    for p in want:
        assert sha256(out / p) == store.manifest(TARGET_REPO, old)[p]["sha256"]
    download("main")
    gets = {p: f["get"] for p, f in server.stats_doc()["files"].items()}
    assert gets.pop("model-00003-of-00006.safetensors") == 2 and set(gets.values()) == {1}
    assert (
        sha256(out / "model-00003-of-00006.safetensors")
        == store.manifest(TARGET_REPO)["model-00003-of-00006.safetensors"]["sha256"]
    )


def test_a_download_cut_short_resumes_with_a_range_request(server, store, tmp_path):
    want = store.manifest(DRAFTER_REPO)["model.safetensors"]
    server.set_faults(cut_after=11 * MiB, cut_count=1)
    path = hf_hub_download(DRAFTER_REPO, "model.safetensors", endpoint=server.endpoint, token=False, local_dir=tmp_path / "d")
    assert sha256(Path(path)) == want["sha256"]
    stats = server.stats_doc()
    assert stats["cut"] == 1 and stats["range"] == 1
    assert stats["bytes"] < 11 * MiB + want["size"]  # the second request did not start over


def test_the_clients_http_get_completes_a_partially_present_file(server, store, tmp_path):
    want = store.manifest(DRAFTER_REPO)["model.safetensors"]
    partial = tmp_path / "model.safetensors.incomplete"
    partial.write_bytes(store.blob(want["sha256"]).read_bytes()[: 5 * MiB])
    with open(partial, "ab") as f:
        http_get(
            f"{server.endpoint}/{DRAFTER_REPO}/resolve/main/model.safetensors", f, resume_size=5 * MiB, expected_size=want["size"]
        )
    assert sha256(partial) == want["sha256"]
    assert server.stats_doc()["range"] == 1 and server.stats_doc()["bytes"] == want["size"] - 5 * MiB


def test_resolve_answers_with_the_headers_the_client_reads(server, store):
    host, port = server.server_address[:2]
    shard, config = store.manifest(TARGET_REPO)["model-00001-of-00006.safetensors"], store.manifest(TARGET_REPO)["config.json"]
    conn = http.client.HTTPConnection(host, port, timeout=5)

    def ask(method: str, path: str, **headers) -> http.client.HTTPResponse:
        conn.request(method, f"/{TARGET_REPO}/resolve/main/{path}", headers=headers)
        r = conn.getresponse()
        r.body = r.read()
        return r

    r = ask("HEAD", "model-00001-of-00006.safetensors")
    assert r.status == 200 and r.getheader("ETag") == f'"{shard["sha256"]}"' == r.getheader("X-Linked-Etag")
    assert r.getheader("X-Linked-Size") == r.getheader("Content-Length") == str(shard["size"])
    assert r.getheader("X-Repo-Commit") == store.commits(TARGET_REPO)[-1] and r.getheader("Accept-Ranges") == "bytes"
    r = ask("HEAD", "config.json")
    assert r.getheader("ETag") == f'"{config["blob_id"]}"' and r.getheader("X-Linked-Etag") is None
    r = ask("GET", "model-00001-of-00006.safetensors", Range="bytes=100-199")
    assert r.status == 206 and r.getheader("Content-Range") == f"bytes 100-199/{shard['size']}"
    assert r.body == store.blob(shard["sha256"]).read_bytes()[100:200]
    r = ask("GET", "model-00001-of-00006.safetensors", Range=f"bytes={shard['size']}-")
    assert r.status == 416 and r.getheader("Content-Range") == f"bytes */{shard['size']}"


def test_the_hubs_errors_reach_the_client_as_its_own_exceptions(server, store, tmp_path):
    ep = server.endpoint
    anonymous, user = HfApi(endpoint=ep, token=False), HfApi(endpoint=ep, token=TOKEN)
    # an unknown repo: 401 to anyone without a token (the hub does not say what exists), 404 with one
    with pytest.raises(RepositoryNotFoundError) as e:
        snapshot_download("nobody/nothing", endpoint=ep, token=False, local_dir=tmp_path / "x", cache_dir=tmp_path / "c")
    assert e.value.response.status_code == 401
    with pytest.raises(RepositoryNotFoundError) as e:
        user.model_info("nobody/nothing")
    assert e.value.response.status_code == 404
    with pytest.raises(RevisionNotFoundError):
        snapshot_download(
            TARGET_REPO, revision="v9", endpoint=ep, token=False, local_dir=tmp_path / "x", cache_dir=tmp_path / "c"
        )
    with pytest.raises(RevisionNotFoundError):
        anonymous.model_info(TARGET_REPO, revision="0" * 40)
    with pytest.raises(RemoteEntryNotFoundError):
        hf_hub_download(TARGET_REPO, "nope.json", endpoint=ep, token=False, cache_dir=tmp_path / "c")
    with pytest.raises(HfHubHTTPError) as e:  # a token the hub does not know, even for a public repo
        HfApi(endpoint=ep, token="hf_" + "x" * 34).model_info(TARGET_REPO)
    assert e.value.response.status_code == 401 and "Invalid credentials in Authorization header" in str(e.value)
    assert user.whoami()["name"] == hub.USER


def test_the_gated_repo_needs_an_approved_token(server, store, tmp_path):
    ep = server.endpoint
    assert HfApi(endpoint=ep, token=False).model_info(GATED_REPO).gated == "manual"  # its card is public
    for token, status in ((False, 401), (UNAPPROVED, 403)):
        with pytest.raises(GatedRepoError) as e:
            snapshot_download(GATED_REPO, endpoint=ep, token=token, local_dir=tmp_path / "no", cache_dir=tmp_path / "c")
        assert e.value.response.status_code == status
    out = Path(snapshot_download(GATED_REPO, endpoint=ep, token=TOKEN, local_dir=tmp_path / "yes", cache_dir=tmp_path / "c"))
    assert {p: sha256(out / p) for p in files_in(out)} == {p: f["sha256"] for p, f in store.manifest(GATED_REPO).items()}


def test_each_lab_instance_has_its_own_endpoint():
    assert [hub.endpoint(i) for i in range(3)] == [
        "http://10.231.0.1:5080",
        "http://10.231.128.1:5080",
        "http://10.231.16.1:5080",
    ]
    assert hub.endpoint() == hub.ENDPOINT
