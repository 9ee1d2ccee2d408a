"""What the weights step asks the hub, with the real huggingface_hub client against the lab's hub
(sparkctl_lab/hub.py on loopback, tiny generated checkpoints): the manifest of the inventory's
revision and patterns, and each bad input as a clear error naming the field and the fix."""

from __future__ import annotations

import pytest

from sparkctl.inventory.models import Weights
from sparkctl.weights.hub import HubError, manifest
from sparkctl_lab import checkpoint, hub

TINY = checkpoint.specs(target_bytes=6 * 32 * 1024, drafter_bytes=32 * 1024, gated_bytes=2 * 32 * 1024)
TOKEN = "hf_" + "a" * 34


@pytest.fixture(scope="module")
def lab_hub(tmp_path_factory):
    store = checkpoint.ensure(TINY, root=tmp_path_factory.mktemp("hub"))
    srv = hub.serve(store, tokens={TOKEN: True})
    yield srv, store
    srv.shutdown()
    srv.server_close()


def weights(srv, **kw) -> Weights:
    return Weights(**{"repo": checkpoint.TARGET_REPO, "revision": "main", "endpoint": srv.endpoint, **kw})


def test_the_manifest_is_the_hubs_sizes_and_digests_of_the_selected_files(lab_hub):
    srv, store = lab_hub
    w = weights(srv, exclude=["original/*"])
    m = manifest(w, w)
    want = store.manifest(checkpoint.TARGET_REPO, "main")
    assert m.commit == store.commits(checkpoint.TARGET_REPO)[-1] and m.revision == "main"
    assert set(m.files) == {n for n in want if not n.startswith("original/")}
    for name, f in m.files.items():
        assert f.size == want[name]["size"]
        if want[name]["lfs"]:
            assert f.sha256 == want[name]["sha256"] and f.git is None
        else:
            assert f.git == want[name]["blob_id"] and f.sha256 is None


def test_a_commit_pins_an_older_revision(lab_hub):
    srv, store = lab_hub
    old, new = store.commits(checkpoint.TARGET_REPO)
    a, b = manifest(weights(srv, revision=old), weights(srv, revision=old)), manifest(weights(srv), weights(srv))
    assert a.commit == old and b.commit == new
    assert sum(a.files[n] != b.files[n] for n in a.files) == 1  # the later revision rewrote one shard


@pytest.mark.parametrize(
    "kw, words",
    [
        ({"repo": "deepseek-ai/No-Such-Model"}, "weights.repo: deepseek-ai/No-Such-Model on http"),
        ({"revision": "v9"}, "weights.revision: 'v9' is not a branch, tag or commit"),
        ({"repo": checkpoint.GATED_REPO}, "is gated and $HF_TOKEN is not set"),
        ({"include": ["*.gguf"]}, "select no file"),
    ],
)
def test_bad_sources_are_refused_naming_the_field(lab_hub, monkeypatch, kw, words):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    srv, _ = lab_hub
    w = weights(srv, **kw)
    with pytest.raises(HubError) as e:
        manifest(w, w)
    assert words in e.value.message and e.value.fix


def test_a_gated_repo_lists_with_the_token_from_the_variable_the_inventory_names(lab_hub, monkeypatch):
    srv, _ = lab_hub
    monkeypatch.setenv("LAB_HUB_TOKEN", TOKEN)
    w = weights(srv, repo=checkpoint.GATED_REPO, access_env="LAB_HUB_TOKEN")
    assert manifest(w, w).files


def test_an_unreachable_hub_is_named_with_its_address():
    w = Weights(repo="a/b", revision="main", endpoint="http://127.0.0.1:9")
    with pytest.raises(HubError, match="cannot reach the model hub http://127.0.0.1:9"):
        manifest(w, w)
