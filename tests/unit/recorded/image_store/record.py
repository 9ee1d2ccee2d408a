"""Re-record the classic image store's samples from the lab (root, lab up, image pulled on the head):

    python tests/unit/recorded/image_store/record.py

Writes, all of the one image the lab registry serves as sparkctl/vllm-sim:0.1 at that moment:
- ../image_transport/registry-lab.json: the registry's answers (manifest HEAD/GET by tag, the
  config blob, a missing tag), replayed by the unit tests through httpx's MockTransport;
- classic-inspect.json: `docker image inspect` of it on the head's dockerd (Debian 20.10, overlay2);
- classic-info.json: `docker info --format '{{json .}}'` of that dockerd (the disk probe reads it).
Read-only on the lab: nothing is pulled, tagged or started.
"""

import json
import subprocess
import sys
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[3]
sys.path.insert(0, str(REPO / "lab"))

from sparkctl.transport.registry import ACCEPT  # noqa: E402
from sparkctl_lab.paths import docker_socket  # noqa: E402

REGISTRY = "http://10.231.0.1:5000"
IMAGE = "10.231.0.1:5000/sparkctl/vllm-sim:0.1"
ENGINE = "Debian docker.io 20.10.24+dfsg1 (API 1.41), storage driver overlay2: the lab's head"


def exchange(client: httpx.Client, method: str, path: str) -> dict:
    r = client.request(method, REGISTRY + path, headers={"Accept": ACCEPT})
    keep = ("content-length", "content-type", "docker-content-digest", "docker-distribution-api-version")
    return {
        "method": method,
        "url": REGISTRY + path,
        "accept": ACCEPT,
        "status": r.status_code,
        "headers": {k: v for k, v in r.headers.items() if k in keep},
        "body": r.text,
    }


def docker(*args: str) -> str:
    sock = f"unix://{docker_socket('head')}"
    return subprocess.run(["docker", "-H", sock, *args], check=True, capture_output=True, text=True, timeout=30).stdout


def main() -> None:
    with httpx.Client(trust_env=False, timeout=5) as c:
        tag = "/v2/sparkctl/vllm-sim/manifests/0.1"
        got = [exchange(c, "HEAD", tag), exchange(c, "GET", tag)]
        config = json.loads(got[1]["body"])["config"]["digest"]
        got.append(exchange(c, "GET", f"/v2/sparkctl/vllm-sim/blobs/{config}"))
        got += [
            exchange(c, "HEAD", "/v2/sparkctl/vllm-sim/manifests/nope"),
            exchange(c, "GET", "/v2/sparkctl/vllm-sim/manifests/nope"),
        ]
    (HERE.parent / "image_transport" / "registry-lab.json").write_text(
        json.dumps(
            {
                "source": "lab registry (Debian docker-registry 2.8) at 10.231.0.1:5000, recorded with httpx "
                "(tests/unit/recorded/image_store/record.py)",
                "exchanges": got,
            },
            indent=1,
        )
        + "\n"
    )
    inspect = docker("image", "inspect", IMAGE)
    assert json.loads(inspect)[0]["Id"] == config, "the head's image is not the one the registry serves: pull it first"
    (HERE / "classic-inspect.json").write_text(
        json.dumps(
            {"source": f"recorded: `docker image inspect {IMAGE}` on {ENGINE} (record.py)", "rc": 0, "out": inspect}, indent=1
        )
        + "\n"
    )
    info = docker("info", "--format", "{{json .}}")
    (HERE / "classic-info.json").write_text(
        json.dumps(
            {"source": f"recorded: `docker info --format '{{{{json .}}}}'` on {ENGINE} (record.py)", "rc": 0, "out": info},
            indent=1,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
