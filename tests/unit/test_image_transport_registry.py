"""Tag -> manifest digest and image ID, replaying the lab registry's recorded answers
(tests/unit/recorded/image_transport/registry-lab.json) through httpx's MockTransport."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from sparkctl.transport.registry import ACCEPT, Reference, RegistryUnreachable, TagNotFound, resolve

REC = json.loads((Path(__file__).parent / "recorded" / "image_transport" / "registry-lab.json").read_text())
IMAGE = "10.231.0.1:5000/sparkctl/vllm-sim:0.1"


@pytest.fixture(autouse=True)
def fenced(monkeypatch):
    monkeypatch.setenv("SPARKCTL_ONLY_NETWORKS", "127.0.0.0/8,10.231.0.0/16")


def recorded(https_works: bool = True) -> httpx.MockTransport:
    """The registry as recorded (plain HTTP); https:// refused unless asked otherwise."""
    by_key = {(e["method"], httpx.URL(e["url"]).path): e for e in REC["exchanges"]}
    for e in list(by_key.values()):  # a registry serves a manifest by its digest as well
        if e["status"] == 200:
            by_key[(e["method"], httpx.URL(e["url"]).path.rsplit("/", 1)[0] + "/" + e["headers"]["docker-content-digest"])] = e

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.scheme == "https" and not https_works:
            raise httpx.ConnectError("[SSL: WRONG_VERSION_NUMBER] wrong version number", request=request)
        assert request.headers["accept"] == ACCEPT
        e = by_key.get((request.method, request.url.path))
        if e is None:
            return httpx.Response(404, json={"errors": [{"code": "NAME_UNKNOWN"}]})
        return httpx.Response(e["status"], headers=e["headers"], content=e["body"].encode())

    return httpx.MockTransport(handler)


def recorded_manifest() -> tuple[str, dict]:
    e = next(e for e in REC["exchanges"] if e["method"] == "GET" and e["status"] == 200)
    return e["headers"]["docker-content-digest"], json.loads(e["body"])


def test_tag_resolves_to_the_registry_digest_and_the_config_digest_as_image_id():
    digest, manifest = recorded_manifest()
    r = resolve(IMAGE, insecure=True, transport=recorded())
    assert r.manifest_digest == digest
    assert r.image_id == manifest["config"]["digest"]
    assert r.identity.startswith("content:sha256:")


def test_a_pinned_digest_is_checked_against_what_the_registry_serves():
    digest, manifest = recorded_manifest()
    assert resolve(f"{IMAGE}@{digest}", insecure=True, transport=recorded()).image_id == manifest["config"]["digest"]


def test_a_missing_tag_is_not_found_not_unreachable():
    with pytest.raises(TagNotFound) as exc:
        resolve("10.231.0.1:5000/sparkctl/vllm-sim:nope", insecure=True, transport=recorded())
    assert "HTTP 404" in exc.value.message and "runtime.image" in exc.value.fix


def test_plain_http_registry_needs_insecure():
    with pytest.raises(RegistryUnreachable) as exc:
        resolve(IMAGE, transport=recorded(https_works=False))
    assert "10.231.0.1:5000" in exc.value.message
    assert resolve(IMAGE, insecure=True, transport=recorded(https_works=False)).image_id.startswith("sha256:")


def test_no_answer_is_unreachable():
    def refuse(request):
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    with pytest.raises(RegistryUnreachable) as exc:
        resolve(IMAGE, insecure=True, transport=httpx.MockTransport(refuse))
    assert "Connection refused" in exc.value.message


def test_the_fence_applies_to_registries(monkeypatch):
    from sparkctl.errors import InputError

    with pytest.raises(InputError):
        resolve("192.168.1.5:5000/x:1", transport=recorded())


@pytest.mark.parametrize(
    "image, expected",
    [
        (IMAGE, ("10.231.0.1:5000", "sparkctl/vllm-sim", "0.1", None)),
        ("nvcr.io/nvidia/vllm:25.09-py3", ("nvcr.io", "nvidia/vllm", "25.09-py3", None)),
        ("ubuntu", ("docker.io", "library/ubuntu", "latest", None)),
        ("eugr/spark-vllm:1@sha256:" + "0" * 64, ("docker.io", "eugr/spark-vllm", "1", "sha256:" + "0" * 64)),
    ],
)
def test_references_parse_as_docker_does(image, expected):
    r = Reference.parse(image)
    assert (r.registry, r.repository, r.tag, r.digest) == expected


@pytest.mark.parametrize("ref", [
    "vllm/vllm-openai:v0.33.0", "nvcr.io/nvidia/vllm:25.09-py3", "localhost:5000/x/y:1", "ubuntu",
    "10.231.0.1:5000/sparkctl/vllm-sim:0.33.0", "ubuntu@sha256:abc", "registry:5000/a", "a/b/c",
    "index.docker.io/library/x:2", "host.example/a:b@sha256:ff", "localhost/a",
])  # fmt: skip
def test_a_reference_is_read_as_docker_py_reads_it(ref):
    from docker.auth import resolve_repository_name
    from docker.utils import parse_repository_tag

    name, _, digest = ref.partition("@")
    repo, tag = parse_repository_tag(name)
    registry, repository = resolve_repository_name(repo)
    if registry == "docker.io" and "/" not in repository:
        repository = f"library/{repository}"
    got = Reference.parse(ref)
    assert (got.registry, got.repository, got.tag, got.digest) == (registry, repository, tag or "latest", digest or None)
