"""Re-record what a node's dockerd answers about the lab registry's image (root, a lab up and
converged: every host holds the image, pulled):

    SPARKCTL_LAB_INSTANCE=1 python tests/unit/recorded/image_transport/record_distribution.py

Writes distribution-lab.json: the Engine API's GET /distribution/{name}/json (docker-py's
`inspect_distribution`, the call sparkctl makes over SSH) as the head's dockerd answers it, for
- the image's tag (one image: the manifest's digest and the config's platform);
- a multi-platform tag: an index listing the same image for linux/amd64 and linux/arm64, pushed
  for the recording under `index-sample` and deleted after it;
- a missing tag, and a registry port nothing listens on (docker's errors: status + message);
and `docker image inspect` of the image on the head (pulled by tag) and on the offload host after
pulling the index tag (what docker records as RepoDigests in each case). Changes nothing else.
"""

import json
import sys
from pathlib import Path

import docker
import httpx

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[3]
sys.path.insert(0, str(REPO / "lab"))

from sparkctl_lab import topology as topo  # noqa: E402
from sparkctl_lab.paths import docker_socket  # noqa: E402

INDEX = "application/vnd.docker.distribution.manifest.list.v2+json"
MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"


def engine(host: str) -> docker.APIClient:
    return docker.APIClient(base_url=f"unix://{docker_socket(host)}", version="auto", timeout=30)


def error(call) -> dict:
    try:
        call()
    except docker.errors.APIError as exc:
        return {"status": exc.status_code, "explanation": exc.explanation}
    raise AssertionError("expected docker to refuse")


def main() -> None:
    head, offload = engine("head"), engine("offload")
    image = topo.IMAGE
    repo = f"{topo.REGISTRY}/{topo.IMAGE_REPO}"
    base = f"http://{topo.REGISTRY}/v2/{topo.IMAGE_REPO}"
    with httpx.Client(trust_env=False, timeout=5) as c:
        m = c.get(f"{base}/manifests/{topo.IMAGE_TAG}", headers={"Accept": MANIFEST})
        m.raise_for_status()
        entry = {"mediaType": MANIFEST, "digest": m.headers["docker-content-digest"], "size": len(m.content)}
        index = {"schemaVersion": 2, "mediaType": INDEX, "manifests": [
            {**entry, "platform": {"architecture": "amd64", "os": "linux"}},
            {**entry, "platform": {"architecture": "arm64", "os": "linux", "variant": "v8"}},
        ]}  # fmt: skip
        put = c.put(f"{base}/manifests/index-sample", content=json.dumps(index), headers={"Content-Type": INDEX})
        put.raise_for_status()
        index_digest = put.headers["docker-content-digest"]
        try:
            answers = {
                "tag": head.inspect_distribution(image),
                "index": head.inspect_distribution(f"{repo}:index-sample"),
            }
            errors = {
                "missing": error(lambda: head.inspect_distribution(f"{repo}:nope")),
                "unreachable": error(lambda: head.inspect_distribution(f"{topo.RUNNER_ADDRESS}:5999/{topo.IMAGE_REPO}:0.1")),
            }
            for _ in offload.pull(repo, tag="index-sample", stream=True, decode=True):
                pass
            index_inspect = offload.inspect_image(f"{repo}:index-sample")
            offload.remove_image(f"{repo}:index-sample")  # untags: the image stays under its own tag
        finally:
            c.delete(f"{base}/manifests/{index_digest}")
    engine_version = head.version()
    doc = {
        "source": (
            f"recorded on lab instance {topo.INSTANCE} ({topo.REGISTRY}, Debian docker-registry 2.8) through the head's "
            f"dockerd (Debian docker.io {engine_version['Version']}, API {engine_version['ApiVersion']}) with docker-py's "
            "inspect_distribution (tests/unit/recorded/image_transport/record_distribution.py); the index was pushed "
            "for the recording (the lab's image for linux/amd64 and linux/arm64/v8) and deleted after it"
        ),
        "image": image,
        "index_image": f"{repo}:index-sample",
        "answers": answers,
        "errors": errors,
        "inspect": {"tag": head.inspect_image(image), "index": index_inspect},
    }
    (HERE / "distribution-lab.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps({k: doc[k] for k in ("answers", "errors")}, indent=1))


if __name__ == "__main__":
    main()
